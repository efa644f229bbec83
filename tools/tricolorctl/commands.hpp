// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// commands.hpp: the command table (commands.cpp), as xdp-tools' cmds[]: a row per command with
// its one line of help and the pair its own file defines, one that adds its options to the
// command and one that runs it. tricolorctl, its man page and its bash completion are all made
// from the table (tools/tricolorctl/gen.cpp writes the last two at build time).
#pragma once

#include "context.hpp"

#include <CLI/CLI.hpp>

#include <memory>
#include <span>
#include <string_view>

namespace tricolor::cli {

struct Command {
    std::string_view name;      // "attach"; "policy add" is the command add of the group policy
    std::string_view help;      // its line in --help and in the man page
    void (*add)(CLI::App &cmd); // adds its options and arguments; none: a group of commands
    int (*run)(Context &ctx);   // runs it, given what was parsed; returns the exit code
};

std::span<const Command> commands();

// The whole command line: the global options, then each command of the table in its order.
// Parsing it sets @chosen to the command given.
std::unique_ptr<CLI::App> make_app(Context &ctx, const Command *&chosen);

} // namespace tricolor::cli
