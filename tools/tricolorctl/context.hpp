// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// context.hpp: what every tricolorctl command is given to run (the global options and the way to
// the daemon), and the exit codes of docs/spec.md §7.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace tricolor::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;
inline constexpr int kExitUsage = 2;

class Context {
  public:
    bool as_json = false; // -j
    std::string socket;   // --socket

    // --socket, else $TRICOLOR_SOCKET, else the default.
    std::string socket_path() const;
    // Sends @req to tricolord. On refusal prints the message (as {"error":…} under -j), sets
    // @exit_code and returns nullopt; otherwise prints the answer's warnings (not under -j) and
    // returns the answer without its "ok".
    std::optional<nlohmann::json> call(nlohmann::json req, int &exit_code) const;
    // Prints @message as an error: "tricolorctl: message", or {"error": message} under -j.
    void fail(const std::string &message) const;
    bool json_out() const { return as_json; }
    // Under -j prints @reply whole, one line, and returns true: the caller's table is not wanted.
    bool json_reply(const nlohmann::json &reply) const;
};

} // namespace tricolor::cli
