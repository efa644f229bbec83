// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_flags.hpp: the CLI side of the one table of policy flags (tricolor::policy_flags()):
// the options it makes on `policy add`, `policy set` and `replay`, and the policy object that
// what was given for them makes.
#pragma once

#include "tricolor/policy_fields.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tricolor::cli {

// What the user gave for each row of policy_flags().
struct PolicyFlags {
    struct Given {
        std::optional<std::string> text;                        // Text
        std::vector<std::pair<std::string, std::string>> match; // Match
        bool set = false;                                       // On, Off, Clear
    };
    std::string name;
    std::vector<Given> given = std::vector<Given>(policy_flags().size());
};

// The command the options are for: `policy add` (a new policy's fields, the table's required
// ones required), `policy set` (any of them, and the ways back: --no-fleet...) or `replay` (a
// meter's own parameters, none required: it checks them itself, as -f stands for them all).
enum class PolicyFlagsFor : uint8_t { add, set, replay };

// The options of the command @use is for, one per row of policy_flags() it takes, in the table's
// order; returns them.
std::vector<CLI::Option *> add_policy_flags(CLI::App &cmd, PolicyFlags &f, PolicyFlagsFor use);

// The fields the user gave, as a policy object (@full, for add) or a patch of one (for set).
// Later rows win: --no-parent after --parent leaves no parent.
nlohmann::json policy_json(const PolicyFlags &f, bool full);

} // namespace tricolor::cli
