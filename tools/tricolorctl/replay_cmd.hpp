// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// replay_cmd.hpp: `tricolorctl replay` (docs/spec.md §2).
#pragma once

#include "tricolor/meter.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace tricolor::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;
inline constexpr int kExitUsage = 2;

struct ReplayOptions {
    MeterSpec meter;
    std::string engine = "model";
    std::string file;
    std::string policy_file; // -f: a config file's policies, trace lines with addresses (§9)
};

void add_meter_flags(CLI::App &cmd, MeterSpec &spec);
void add_replay_command(CLI::App &app, ReplayOptions &options);
int run_replay_command(const ReplayOptions &options);

} // namespace tricolor::cli
