// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// format.hpp: how tricolorctl's tables print numbers, fields and matches.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace tricolor::cli {

// 1.5KB, 20.0MB: powers of 1000.
std::string human_bytes(uint64_t b);
// 10.0 Mbit/s.
std::string human_rate(double bits);
// One fleet policy's line (docs/spec.md §10): its mode, the hosts seen, this host's share.
std::string fleet_line(const nlohmann::json &f);
// A --quota's use of this period (stats, flows): "  quota: used 12.0 MiB of 50.0 GiB, ...".
std::string quota_line(const nlohmann::json &q);
// The field as typed (strings bare), or @fallback when @p lacks it.
std::string field(const nlohmann::json &p, const char *key, const char *fallback = "-");
// "src 10.0.0.0/8 proto udp", or "any".
std::string match_text(const nlohmann::json &m);

} // namespace tricolor::cli
