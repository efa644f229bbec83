// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// units.hpp: rates and sizes as tc(8) writes them (docs/spec.md §4), parsed exactly.
// Every parser returns the value in the base unit or an error message that names the text.
#pragma once

#include "tricolor/result.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace tricolor {

// Bits per second: bare or "bit"; kbit..tbit (x1000); kibit..tibit (x1024); bps..tbps and
// kibps..tibps are bytes per second. Suffixes match case-insensitively, as in tc.
Result<uint64_t> parse_rate(std::string_view text);
// Packets per second (packet mode): bare or "pps"; kpps, mpps, gpps (x1000).
Result<uint64_t> parse_packet_rate(std::string_view text);
// Bytes: bare or "b"; k/kb, m/mb, g/gb (x1024).
Result<uint64_t> parse_size(std::string_view text);
// Packets (packet mode sizes): a bare whole number, or with "pkt".
Result<uint64_t> parse_packet_count(std::string_view text);

// Nanoseconds: ns, us, ms, s, m (minutes), h, d or w; a unit is required ("1.5s", "90m").
Result<uint64_t> parse_duration(std::string_view text);

// Human forms for messages and tables: the largest exact tc unit ("1500b", "10mbit").
std::string format_rate(uint64_t bits_per_s);
std::string format_size(uint64_t bytes);
// The largest unit that gives a whole number ("10s", "1500ms").
std::string format_duration(uint64_t ns);

} // namespace tricolor
