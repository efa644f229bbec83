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

unsigned specificity(const Match &m) {
    return (m.src ? m.src->len : 0) + (m.dst ? m.dst->len : 0);
}

std::vector<RuleEntry> rule_entries(const Policy &p, uint32_t slot, uint32_t rank) {
    if (p.only_parent || p.match.cgroup)
        return {}; // reached only through its children, or by the socket (cgroup_rules)
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

std::vector<std::string> policy_problems(const Policy &p) {
    std::vector<std::string> out;
    auto fail = [&](const std::string &why) {
        out.push_back(fmt::format("policy '{}': {}", p.name, why));
    };
    if (p.id >= TCM_MAX_POLICIES)
        fail(fmt::format("id {} is not below {}", p.id, TCM_MAX_POLICIES));
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
    if (p.per == TCM_PER_CGROUP && !m.cgroup)
        fail("per cgroup needs a cgroup match (--match cgroup PATH)");
    if (p.fleet && p.per != TCM_PER_AGGREGATE)
        fail("a fleet policy shares one aggregate bucket: it cannot be per src/dst/5tuple");
    for (const auto &a : p.actions)
        if (a.kind == TCM_ACT_KIND_DSCP && a.value > 63)
            fail(fmt::format("dscp:{} is not 0 to 63", a.value));
    if (size_t n = rule_entries(p, 0, 0).size(); n > kMaxEntriesPerPolicy)
        fail(fmt::format("its port ranges expand to {} classifier entries (at most {}): "
                         "split the policy or widen the ranges",
                         n, kMaxEntriesPerPolicy));
    return out;
}

std::string too_many_policies(size_t n) {
    return fmt::format("{} policies: at most {}", n, TCM_MAX_POLICIES);
}

std::string too_many_shapes(size_t n) {
    return fmt::format(
        "the policies use {} distinct match shapes (prefix lengths, port ranges, fields); "
        "the data path probes at most {}",
        n, TCM_MAX_MASKS);
}

std::string too_many_entries(size_t n) {
    return fmt::format("the policies expand to {} classifier entries; at most {}", n,
                       TCM_MAX_RULES / TCM_NR_SETS);
}

std::vector<std::string> policy_set_problems(const std::vector<Policy> &policies) {
    std::vector<std::string> errors;
    std::set<uint32_t> ids;
    std::set<std::string> names;
    if (policies.size() > TCM_MAX_POLICIES)
        errors.push_back(too_many_policies(policies.size()));
    size_t rules = 0;
    std::set<tcm_class_key, ClassKeyLess> masks;
    for (const auto &p : policies) {
        auto fail = [&](const std::string &why) {
            errors.push_back(fmt::format("policy '{}': {}", p.name, why));
        };
        for (auto &e : policy_problems(p))
            errors.push_back(std::move(e));
        if (!ids.insert(p.id).second)
            fail(fmt::format("id {} is used twice", p.id));
        if (!names.insert(p.name).second)
            fail("the name is used twice");
        auto es = rule_entries(p, 0, 0);
        rules += es.size();
        for (const auto &e : es)
            masks.insert(e.mask);
    }
    for (auto &e : hierarchy_errors(policies))
        errors.push_back(std::move(e));
    if (masks.size() > TCM_MAX_MASKS)
        errors.push_back(too_many_shapes(masks.size()));
    if (rules > TCM_MAX_RULES / TCM_NR_SETS)
        errors.push_back(too_many_entries(rules));
    return errors;
}

} // namespace tricolor
