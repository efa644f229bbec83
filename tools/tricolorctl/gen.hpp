// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// gen.hpp: what tricolorctl-gen (gen.cpp, gen_man.cpp) reads off the command line tricolorctl
// builds: its commands, their options, and which of those the policy flag table made.
#pragma once

#include <CLI/CLI.hpp>

#include <iosfwd>
#include <string>
#include <vector>

namespace tricolor::cli::gen {

// The commands under @app, in their order.
std::vector<const CLI::App *> subcommands_of(const CLI::App &app);
// The options a user gives @app, positionals included, in their order; a command's own --help and
// --help-all are left out (the top's are its global options).
std::vector<const CLI::Option *> options_of(const CLI::App &app);
// "policy add" (the top: "").
std::string path_of(const CLI::App &app);
// Every name of @opt, short ones first: -j --json (a positional: its name).
std::vector<std::string> names_of(const CLI::Option &opt);
// How many words follow @opt: 0 for a flag, 2 for --match KEY VALUE.
int values_of(const CLI::Option &opt);
// Whether @opt is one of the policy flag table's options.
bool is_policy_option(const CLI::Option &opt);

// Writes the man page: @tmpl with its markers replaced (gen_man.cpp). Throws runtime_error
// naming the marker that names nothing, or that is given twice.
void write_man(const CLI::App &app, std::istream &tmpl, std::ostream &out);

} // namespace tricolor::cli::gen
