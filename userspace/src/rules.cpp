// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rules.cpp: compiles a policy set for the classifier (rules.hpp).
#include "tricolor/rules.hpp"
#include "tricolor/hierarchy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <arpa/inet.h>
#include <map>
#include <set>
#include <tuple>

namespace tricolor {

namespace {

// Prefix of @len bits as a big-endian 128-bit mask, word by word in network order.
void prefix_mask(uint32_t out[4], unsigned len) {
    for (int i = 0; i < 4; ++i) {
        unsigned bits = len > 32u * i ? std::min(32u, len - 32u * i) : 0;
        out[i] = htonl(bits == 0 ? 0 : (bits == 32 ? ~0u : ~0u << (32 - bits)));
    }
}

} // namespace

void store_prefix(const Prefix &p, uint32_t key[4], uint32_t mask[4]) {
    if (p.ipv6) {
        std::memcpy(key, p.addr.data(), 16);
        prefix_mask(mask, p.len);
    } else {
        key[0] = key[1] = 0;
        key[2] = htonl(0x0000ffff);
        std::memcpy(&key[3], p.addr.data(), 4);
        prefix_mask(mask, 96 + p.len);
    }
}

namespace {

// Splits [lo, hi] into aligned power-of-two blocks: (value, mask) pairs.
std::vector<std::pair<uint16_t, uint16_t>> port_prefixes(PortRange r) {
    std::vector<std::pair<uint16_t, uint16_t>> out;
    uint32_t lo = r.lo, hi = r.hi;
    while (lo <= hi) {
        uint32_t size = 1;
        while ((lo & (size * 2 - 1)) == 0 && lo + size * 2 - 1 <= hi && size < 65536)
            size *= 2;
        out.emplace_back(static_cast<uint16_t>(lo), static_cast<uint16_t>(~(size - 1) & 0xffff));
        lo += size;
    }
    return out;
}

unsigned specificity(const Match &m) {
    return (m.src ? m.src->len : 0) + (m.dst ? m.dst->len : 0);
}

// (mask, masked key): one classifier rule.
struct RuleKeyLess {
    bool operator()(const std::pair<tcm_class_key, tcm_class_key> &a,
                    const std::pair<tcm_class_key, tcm_class_key> &b) const {
        if (int c = std::memcmp(&a.first, &b.first, sizeof(a.first)))
            return c < 0;
        return ClassKeyLess{}(a.second, b.second);
    }
};

} // namespace

std::vector<RuleEntry> rule_entries(const Policy &p, uint32_t slot, uint32_t rank) {
    if (p.only_parent)
        return {}; // reached only through its children
    tcm_class_key key{}, mask{};
    const Match &m = p.match;
    if (m.ifindex) {
        key.ifindex = *m.ifindex;
        mask.ifindex = ~0u;
    }
    if (m.vlan) {
        key.vlan = *m.vlan;
        mask.vlan = 0xffff;
    }
    if (m.dscp) {
        key.dscp = *m.dscp;
        mask.dscp = 0xff;
    }
    if (m.proto) {
        key.proto = *m.proto;
        mask.proto = 0xff;
    }
    if (m.src || m.dst) {
        bool v6 = m.src ? m.src->ipv6 : m.dst->ipv6;
        key.flags |= v6 ? TCM_KEY_F_IPV6 : 0;
        mask.flags |= TCM_KEY_F_IPV6;
    }
    if (m.src)
        store_prefix(*m.src, key.src, mask.src);
    if (m.dst)
        store_prefix(*m.dst, key.dst, mask.dst);
    for (int i = 0; i < 4; ++i) {
        key.src[i] &= mask.src[i];
        key.dst[i] &= mask.dst[i];
    }
    std::vector<std::pair<uint16_t, uint16_t>> any{{0, 0}};
    auto sports = m.sport ? port_prefixes(*m.sport) : any;
    auto dports = m.dport ? port_prefixes(*m.dport) : any;
    if (m.sport || m.dport) {
        key.flags |= TCM_KEY_F_PORTS;
        mask.flags |= TCM_KEY_F_PORTS;
    }
    std::vector<RuleEntry> out;
    for (auto [sv, sm] : sports)
        for (auto [dv, dm] : dports) {
            RuleEntry e{mask, key, slot, rank};
            e.key.sport = sv;
            e.mask.sport = sm;
            e.key.dport = dv;
            e.mask.dport = dm;
            out.push_back(e);
        }
    return out;
}

std::vector<std::string> policy_set_problems(const std::vector<Policy> &policies) {
    std::vector<std::string> errors;
    std::set<uint32_t> ids;
    std::set<std::string> names;
    if (policies.size() > TCM_MAX_POLICIES)
        errors.push_back(fmt::format("{} policies: at most {}", policies.size(), TCM_MAX_POLICIES));
    size_t rules = 0;
    std::set<tcm_class_key, ClassKeyLess> masks;
    for (const auto &p : policies) {
        auto fail = [&](const std::string &why) {
            errors.push_back(fmt::format("policy '{}': {}", p.name, why));
        };
        if (p.id >= TCM_MAX_POLICIES)
            fail(fmt::format("id {} is not below {}", p.id, TCM_MAX_POLICIES));
        if (!ids.insert(p.id).second)
            fail(fmt::format("id {} is used twice", p.id));
        if (!names.insert(p.name).second)
            fail("the name is used twice");
        auto v = validate(p.meter);
        for (const auto &e : v.errors)
            fail(e);
        const Match &m = p.match;
        if (m.src && m.dst && m.src->ipv6 != m.dst->ipv6)
            fail("src and dst prefixes are of different families");
        if (m.dscp && *m.dscp > 63)
            fail(fmt::format("dscp {} is not 0 to 63", *m.dscp));
        if (m.vlan && *m.vlan > 4095)
            fail(fmt::format("vlan {} is not 0 to 4095", *m.vlan));
        if (p.prefix4 > 32 || p.prefix6 > 128)
            fail("per-key prefix lengths must be at most /32 (IPv4) and /128 (IPv6)");
        if (p.fleet && p.per != TCM_PER_AGGREGATE)
            fail("a fleet policy shares one aggregate bucket: it cannot be per src/dst/5tuple");
        for (const auto &a : p.actions)
            if (a.kind == TCM_ACT_KIND_DSCP && a.value > 63)
                fail(fmt::format("dscp:{} is not 0 to 63", a.value));
        auto es = rule_entries(p, 0, 0);
        if (es.size() > kMaxEntriesPerPolicy)
            fail(fmt::format("its port ranges expand to {} classifier entries (at most {}): "
                             "split the policy or widen the ranges",
                             es.size(), kMaxEntriesPerPolicy));
        rules += es.size();
        for (const auto &e : es)
            masks.insert(e.mask);
    }
    for (auto &e : hierarchy_errors(policies))
        errors.push_back(std::move(e));
    if (masks.size() > TCM_MAX_MASKS)
        errors.push_back(fmt::format(
            "the policies use {} distinct match shapes (prefix lengths, port ranges, fields); "
            "the data path probes at most {}",
            masks.size(), TCM_MAX_MASKS));
    if (rules > TCM_MAX_RULES / TCM_NR_SETS)
        errors.push_back(fmt::format("the policies expand to {} classifier entries; at most {}",
                                     rules, TCM_MAX_RULES / TCM_NR_SETS));
    return errors;
}

CompiledRules compile_rules(const std::vector<Policy> &policies) {
    // Rank: priority, then the longer prefix, then the name: a total order.
    std::vector<const Policy *> order;
    for (const auto &p : policies)
        order.push_back(&p);
    std::ranges::sort(order, [](const Policy *a, const Policy *b) {
        auto ka = std::tuple(a->priority, -static_cast<int>(specificity(a->match)), a->name);
        auto kb = std::tuple(b->priority, -static_cast<int>(specificity(b->match)), b->name);
        return ka < kb;
    });
    std::vector<RuleEntry> entries;
    for (uint32_t rank = 0; rank < order.size(); ++rank) {
        auto slot = static_cast<uint32_t>(order[rank] - policies.data());
        auto es = rule_entries(*order[rank], slot, rank);
        entries.insert(entries.end(), es.begin(), es.end());
    }
    // Masks in order of the best rank they hold.
    std::map<tcm_class_key, uint32_t, ClassKeyLess> min_rank;
    for (const auto &e : entries) {
        auto [it, fresh] = min_rank.emplace(e.mask, e.rank);
        if (!fresh)
            it->second = std::min(it->second, e.rank);
    }
    std::vector<std::pair<uint32_t, tcm_class_key>> masks;
    for (const auto &[m, r] : min_rank)
        masks.emplace_back(r, m);
    std::ranges::sort(masks, [](const auto &a, const auto &b) { return a.first < b.first; });
    // Two policies with the same match: only the better rank can ever win. Entries come in rank
    // order, so the first of a (mask, key) is the one to keep.
    CompiledRules out;
    std::set<std::pair<tcm_class_key, tcm_class_key>, RuleKeyLess> written;
    for (const auto &e : entries)
        if (written.emplace(e.mask, e.key).second)
            out.entries.push_back(e);
    out.masks = std::move(masks);
    return out;
}

} // namespace tricolor
