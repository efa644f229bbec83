// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// control.hpp: the control protocol between tricolorctl and tricolord. One JSON object a line
// each way over a Unix stream socket: a request {"cmd": NAME, ...} and its response, either
// {"ok": true, ...} or {"ok": false, "error": TEXT}.
#pragma once

#include "tricolor/units.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace tricolor {

inline constexpr const char *kDefaultSocket = "/run/tricolor/tricolor.sock";
inline constexpr const char *kDefaultPinDir = "/sys/fs/bpf/tricolor";
inline constexpr const char *kDefaultConfig = "/etc/tricolor/tricolor.yaml";

// Sends @request to the daemon at @socket_path and returns its response (which may itself be
// {"ok": false}); an error only when the daemon cannot be reached or answers garbage.
Result<nlohmann::json> control_request(const std::string &socket_path,
                                       const nlohmann::json &request);

} // namespace tricolor
