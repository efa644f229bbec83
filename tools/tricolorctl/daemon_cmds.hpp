// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// daemon_cmds.hpp: the tricolorctl commands that talk to tricolord (docs/spec.md §7).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace tricolor::cli {

struct GlobalOptions {
    bool json = false;
    std::string socket;
};

// Adds every daemon command to @app; the returned function runs whichever was given (or
// returns -1 when none of them was).
std::function<int()> add_daemon_commands(CLI::App &app, GlobalOptions &global);

} // namespace tricolor::cli
