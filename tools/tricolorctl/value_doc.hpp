// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// value_doc.hpp: how the man page and the bash completion show an option's value or a command's
// argument. A command records it as it adds the option; the generator (gen.cpp) reads it, and
// tricolorctl itself never does.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tricolor::cli {

// What bash completion offers for the value.
enum class Complete : uint8_t { none, words, files, interfaces, policies };

struct ValueDoc {
    std::string name{}; // in the man page: RATE, PATH (none: the words, as a|b)
    Complete complete = Complete::none;
    std::vector<std::string> words{}; // Complete::words
};

// Records @doc for @opt; returns @opt.
CLI::Option *describe(CLI::Option *opt, ValueDoc doc);
// @opt takes only @choices: CLI11 checks them, the man page and the completion list them.
CLI::Option *one_of(CLI::Option *opt, std::vector<std::string> choices);
// What was recorded for @opt, or null.
const ValueDoc *value_doc(const CLI::Option *opt);

} // namespace tricolor::cli
