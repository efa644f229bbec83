// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// control.hpp: the control protocol between tricolorctl and tricolord. One JSON object a line
// each way over a Unix stream socket: a request {"cmd": NAME, ...} and its response, either
// {"ok": true, ...} or {"ok": false, "error": TEXT}.
#pragma once

#include "tricolor/units.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tricolor {

inline constexpr const char *kDefaultSocket = "/run/tricolor/tricolor.sock";
inline constexpr const char *kDefaultPinDir = "/sys/fs/bpf/tricolor";
inline constexpr const char *kDefaultConfig = "/etc/tricolor/tricolor.yaml";

// The protocol's version: every request carries it as "version" (control_request adds it), and
// tricolord refuses a request of another version, naming both (docs/control.md).
inline constexpr int kControlProtocolVersion = 1;

// Sends @request to the daemon at @socket_path and returns its response (which may itself be
// {"ok": false}); an error only when the daemon cannot be reached or answers garbage. A request
// without "version" is sent with this client's.
Result<nlohmann::json> control_request(const std::string &socket_path,
                                       const nlohmann::json &request);

// One request line as tricolord reads it: a JSON object, with no name twice in any object
// (a JSON parser keeps one of the two silently; which one the sender meant is unknowable).
Result<nlohmann::json> parse_control_request(std::string_view line);

} // namespace tricolor
