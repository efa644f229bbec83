// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// hierarchy.hpp: the policy graph of docs/spec.md §9 (`parent`), checked as a whole: every entry
// point (apply, policy add/set/del, the daemon's config) goes through Datapath::check, which calls
// hierarchy_errors, so a set that would break a chain is refused before anything changes.
#pragma once

#include "tricolor/datapath.hpp"

#include <string>
#include <vector>

namespace tricolor {

// Every problem of the graph, each naming the policies: a parent that does not exist (also
// what deleting or renaming a parent under its children leaves), a policy that is its own
// ancestor, and a chain deeper than TCM_MAX_LEVELS.
std::vector<std::string> hierarchy_errors(const std::vector<Policy> &policies);

// The chain of @name, itself first, then its parent and so on (the set must check clean).
std::vector<const Policy *> chain_of(const std::vector<Policy> &policies, const std::string &name);

} // namespace tricolor
