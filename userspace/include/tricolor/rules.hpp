// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rules.hpp: the C++ half of bpf/lib/classify.h. A policy set is compiled into tuple-space
// rules: every policy becomes one or more (mask, masked key) entries, port ranges expanded into
// aligned prefixes. Ranking the policies and writing the two sets is policy_sets.hpp's.
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

// At most this many entries a policy (port ranges expand into prefixes).
constexpr size_t kMaxEntriesPerPolicy = 1024;

// @p as the classifier holds it: a 128-bit key and mask in network order, IPv4 mapped
// (::ffff:a.b.c.d, mask /96 + len).
void store_prefix(const Prefix &p, uint32_t key[4], uint32_t mask[4]);

// The entries of one policy (none for an only_parent policy: it is reached through children).
std::vector<RuleEntry> rule_entries(const Policy &p, uint32_t slot, uint32_t rank);

// How specific a match is: its prefix lengths together. Ranks a policy after its priority.
unsigned specificity(const Match &m);

// What the data path cannot take of one policy on its own (values, entries), one message a
// problem naming the policy.
std::vector<std::string> policy_problems(const Policy &p);
// The messages for a set over the maps' limits (policies, match shapes, classifier entries).
std::string too_many_policies(size_t n);
std::string too_many_shapes(size_t n);
std::string too_many_entries(size_t n);

// What the data path cannot take of @policies, one message a problem naming the policy
// (ids, names, values, shapes and entries beyond the maps, the hierarchy): empty when none.
std::vector<std::string> policy_set_problems(const std::vector<Policy> &policies);

} // namespace tricolor
