// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_spec.hpp: a policy as users write it (docs/spec.md §7), in the one representation that the
// CLI, the control socket and the config file share: a JSON object whose values are what the
// user typed ("10mbit", "src/24", "dscp:af12"). to_policy() checks every field and gives all the
// problems at once, each naming the field and the value.
#pragma once

#include "tricolor/datapath.hpp"
#include "tricolor/units.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace tricolor {

// The fields a policy object may have, in the order `policy show` prints them.
const std::vector<std::string> &policy_fields();
// The fields under "match".
const std::vector<std::string> &match_fields();

// Checks @spec (a policy object) and builds the data path's policy with identity @id.
// Interface names are resolved to ifindexes now: an unknown interface is an error.
Result<Policy> to_policy(const nlohmann::json &spec, uint32_t id);

// Applies @patch (fields to change; "match" entries replace the whole match) to @spec.
// A new "algo" drops the old algorithm's own parameters (pir, pbs, ebs, eir) the patch does not
// give.
nlohmann::json merge_policy(nlohmann::json spec, const nlohmann::json &patch);

} // namespace tricolor
