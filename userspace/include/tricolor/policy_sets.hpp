// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_sets.hpp: the data path's two policy sets, brought up to date change by change.
// The data path reads one set while the other is written, and datapath_commit.cpp makes the
// written one active with one store. Rewriting a whole set for a change to one policy of 16k costs
// 16k configs and rules; instead this keeps a model of the set to be (each policy compiled
// once, ranked with gaps so one can go between two) and, for each set, what its maps hold, so
// bringing the inactive set up to the model writes only what differs for the policies changed
// since it was last written: the last change (made while it was active) and this one.
//
// Layout (bpf/include/tricolor_abi.h): a policy's slot is its id; a mask's rules are keyed by
// the mask's id, so reordering the probe order (tcm_masks) leaves the rules as they are.
#pragma once

#include "tricolor/policy.hpp"
#include "tricolor/result.hpp"
#include "tricolor/rule_table.hpp"
#include "tricolor/rules.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

extern "C" {
#include "tricolor_abi.h"
}

namespace tricolor {

// Policies to add or replace (by id) and ids to remove, as one change.
struct SetChange {
    std::vector<Policy> upserts;
    std::vector<uint32_t> removes;
};

class PolicySets {
  public:
    struct Maps {
        int cfg, masks, sets;
        RuleTable *rules;
    };
    // @known: the maps are as new (all zero, no rules), so both sets are known to be empty.
    // Otherwise (maps adopted from pins) each set is rewritten whole the first time it is written.
    PolicySets(Maps maps, bool known);
    ~PolicySets();

    // What @c would make wrong in the model's set, with policy_set_problems' messages, checking
    // only what @c touches (its policies, their hierarchies, the maps' limits). Empty: it fits.
    std::vector<std::string> problems(const SetChange &c) const;
    // Applies @c (checked) to the model and brings set @set's maps up to it. On failure the
    // model is as before and @set is rewritten whole next time.
    Result<void> write(uint32_t set, const SetChange &c);
    // Replaces the model with @policies (checked) and brings set @set up to it: for changes of
    // much of the set, whose ranks are laid out afresh.
    Result<void> rebuild(uint32_t set, const std::vector<Policy> &policies);
    // Set @active is the one the data path reads now: the other falls behind by the last write.
    void switched(uint32_t active);
    // Brings set @set up to the model (after a rebuild, once no packet reads it any more).
    Result<void> catch_up(uint32_t set);

    // The model's policies and their ranks, in rank order: for rules kept outside the set's maps
    // (the cgroup rules), which must order as the classifier's do.
    std::vector<std::pair<const Policy *, uint32_t>> ranked() const;
    // How many of the model's policies match a cgroup: ranked() is a walk of the whole model, not
    // for a set that has none.
    size_t cgroup_policies() const;

    // The ids of the model (equal to the active set's after switched()).
    bool contains(uint32_t id) const;
    size_t size() const;
    // The classifier entries the model's policies expand to.
    size_t entries() const;
    // Map writes (updates and deletes) the last write(), rebuild() or catch_up() made.
    size_t last_map_writes() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace tricolor
