// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rule_table.cpp: see rule_table.hpp.
#include "tricolor/rule_table.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/mman.h>

#include <bpf/bpf.h>

namespace tricolor {

namespace {

bool same(const tcm_rule_key &a, const tcm_rule_key &b) {
    return std::memcmp(&a, &b, sizeof(a)) == 0;
}

uint32_t set_of(const tcm_rule_key &key) {
    return key.set_mask >> 16 & 1;
}

// The data path reads `used` last: a slot's key and rule are in place before it is marked used,
// and it is marked empty before they change.
void mark(tcm_rule_slot *s, uint32_t used) {
    __atomic_store_n(&s->used, used, __ATOMIC_RELEASE);
}

} // namespace

uint32_t rule_home(const tcm_rule_key &key) {
    uint32_t w[TCM_RULE_KEY_WORDS];
    std::memcpy(w, &key, sizeof(w));
#define WORD(i) w[i]
    return TCM_RULE_HASH(WORD);
#undef WORD
}

RuleTable::RuleTable(int fd) {
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
        throw std::runtime_error(
            fmt::format("cannot read the classifier's table: {}", std::strerror(errno)));
    per_set_ = info.max_entries / TCM_NR_SETS;
    if (per_set_ < TCM_RULE_PROBES || (per_set_ & (per_set_ - 1)) != 0)
        throw std::runtime_error(
            fmt::format("the classifier's table has {} slots: not two sets of a power of two",
                        info.max_entries));
    bytes_ = sizeof(tcm_rule_slot) * TCM_NR_SETS * per_set_;
    void *mem = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED)
        throw std::runtime_error(
            fmt::format("cannot map the classifier's table: {}", std::strerror(errno)));
    slots_ = static_cast<tcm_rule_slot *>(mem);
}

RuleTable::~RuleTable() {
    munmap(slots_, bytes_);
}

tcm_rule_slot *RuleTable::lookup(const tcm_rule_key &key) const {
    uint32_t set = set_of(key), home = rule_home(key);
    for (uint32_t i = 0; i < TCM_RULE_PROBES; ++i) {
        tcm_rule_slot *s = slot(set, home + i);
        if (!s->used)
            return nullptr;
        if (same(s->key, key))
            return s;
    }
    return nullptr;
}

std::optional<tcm_rule> RuleTable::find(const tcm_rule_key &key) const {
    if (const tcm_rule_slot *s = lookup(key))
        return s->rule;
    return std::nullopt;
}

int RuleTable::put(const tcm_rule_key &key, const tcm_rule &rule) {
    // One walk from the home: with no tombstones, @key is before the first empty slot or nowhere,
    // and that slot is where it goes.
    uint32_t set = set_of(key), home = rule_home(key);
    for (uint32_t i = 0; i < TCM_RULE_PROBES; ++i) {
        tcm_rule_slot *s = slot(set, home + i);
        if (s->used && same(s->key, key)) {
            // One 8-byte store: a reader sees the old rule or the new one.
            uint64_t v;
            std::memcpy(&v, &rule, sizeof(v));
            __atomic_store_n(reinterpret_cast<uint64_t *>(&s->rule), v, __ATOMIC_RELEASE);
            return 0;
        }
        if (!s->used) {
            s->key = key;
            s->rule = rule;
            mark(s, 1);
            return 0;
        }
    }
    return -ENOSPC;
}

int RuleTable::remove(const tcm_rule_key &key) {
    tcm_rule_slot *hole = lookup(key);
    if (!hole)
        return -ENOENT;
    uint32_t set = set_of(key);
    uint32_t h = static_cast<uint32_t>(hole - slot(set, 0));
    mark(hole, 0);
    // Backward shift: a later rule of the same run moves into the hole if the hole lies between
    // its home and where it sits (cyclically), so every rule stays reachable from its home
    // without crossing an empty slot.
    for (uint32_t j = h + 1;; ++j) {
        tcm_rule_slot *s = slot(set, j);
        if (!s->used)
            return 0;
        uint32_t home = rule_home(s->key);
        uint32_t dist_now = (j - home) & (per_set_ - 1);
        uint32_t dist_hole = (j - h) & (per_set_ - 1);
        if (dist_hole > dist_now)
            continue; // its home is after the hole: it must stay
        tcm_rule_slot *dst = slot(set, h);
        dst->key = s->key;
        dst->rule = s->rule;
        mark(dst, 1);
        mark(s, 0);
        h = j & (per_set_ - 1);
    }
}

size_t RuleTable::clear(uint32_t set) {
    size_t n = 0;
    for (uint32_t i = 0; i < per_set_; ++i)
        if (tcm_rule_slot *s = slot(set, i); s->used) {
            mark(s, 0);
            ++n;
        }
    return n;
}

std::vector<tcm_rule_key> RuleTable::keys(uint32_t set) const {
    std::vector<tcm_rule_key> out;
    for (uint32_t i = 0; i < per_set_; ++i)
        if (const tcm_rule_slot *s = slot(set, i); s->used)
            out.push_back(s->key);
    return out;
}

} // namespace tricolor
