// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rule_table.hpp: the classifier's table of rules (bpf/include/tricolor_abi.h, struct
// tcm_rule_slot), written in place through mmap. Open addressing with linear probing: a rule in
// the first free slot from its home (TCM_RULE_HASH) on, at most TCM_RULE_PROBES - 1 after it; a
// removal shifts the rules after it back, so the data path's probe can stop at an empty slot.
// PolicySets writes only a set no packet reads (the inactive one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

extern "C" {
#include "tricolor_abi.h"
}

namespace tricolor {

class RuleTable {
  public:
    // Maps the table of the array map @fd (tcm_rule_table: two sets of slots, its size at load);
    // throws if it cannot.
    explicit RuleTable(int fd);
    ~RuleTable();
    RuleTable(const RuleTable &) = delete;
    RuleTable &operator=(const RuleTable &) = delete;

    // Adds @key's rule or replaces it: 0, or -ENOSPC when no slot within TCM_RULE_PROBES of its
    // home is free (the set's table is then as before).
    int put(const tcm_rule_key &key, const tcm_rule &rule);
    // Removes @key's rule: 0, or -ENOENT.
    int remove(const tcm_rule_key &key);
    std::optional<tcm_rule> find(const tcm_rule_key &key) const;
    // Removes every rule of set @set (one pass over its slots, no shifts): how many there were.
    size_t clear(uint32_t set);
    // The keys of set @set (its bit in set_mask), in slot order.
    std::vector<tcm_rule_key> keys(uint32_t set) const;

    // Slots per set (a power of two): at most half of them hold rules.
    uint32_t slots_per_set() const { return per_set_; }

  private:
    tcm_rule_slot *slot(uint32_t set, uint32_t i) const {
        return &slots_[(set & 1) * per_set_ + (i & (per_set_ - 1))];
    }
    // The slot holding @key, or null.
    tcm_rule_slot *lookup(const tcm_rule_key &key) const;
    tcm_rule_slot *slots_;
    uint32_t per_set_;
    size_t bytes_;
};

// TCM_RULE_HASH of @key.
uint32_t rule_home(const tcm_rule_key &key);

} // namespace tricolor
