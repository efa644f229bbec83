// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rules.hpp: the C++ half of bpf/lib/classify.h. A policy set is compiled into tuple-space
// rules: every policy becomes one or more (mask, masked key) entries, port ranges expanded into
// aligned prefixes, policies ranked (priority, then the longer prefix, then the name), and the
// masks ordered by the best rank under each so the data path can stop probing early.
#pragma once

#include "tricolor/policy.hpp"
#include "tricolor/result.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include "tricolor_abi.h"
}

namespace tricolor {

// One classifier entry: the policy at @slot of the set, ranked @rank (0 best).
struct RuleEntry {
    tcm_class_key mask;
    tcm_class_key key;
    uint32_t slot;
    uint32_t rank;
};

struct ClassKeyLess {
    bool operator()(const tcm_class_key &a, const tcm_class_key &b) const {
        return std::memcmp(&a, &b, sizeof(a)) < 0;
    }
};

// A policy set as the classifier maps hold it.
struct CompiledRules {
    std::vector<RuleEntry> entries;                        // in rank order
    std::vector<std::pair<uint32_t, tcm_class_key>> masks; // (best rank, mask), best first
};

// At most this many entries a policy (port ranges expand into prefixes).
constexpr size_t kMaxEntriesPerPolicy = 1024;

// @p as the classifier holds it: a 128-bit key and mask in network order, IPv4 mapped
// (::ffff:a.b.c.d, mask /96 + len).
void store_prefix(const Prefix &p, uint32_t key[4], uint32_t mask[4]);

// The entries of one policy (none for an only_parent policy: it is reached through children).
std::vector<RuleEntry> rule_entries(const Policy &p, uint32_t slot, uint32_t rank);

// What the data path cannot take of @policies, one message a problem naming the policy
// (ids, names, values, shapes and entries beyond the maps, the hierarchy): empty when none.
std::vector<std::string> policy_set_problems(const std::vector<Policy> &policies);

// Ranks @policies and compiles their entries and masks.
CompiledRules compile_rules(const std::vector<Policy> &policies);

} // namespace tricolor
