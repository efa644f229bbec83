// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_sets_test.cpp: one-policy changes write only what they change (policy_sets.hpp), and
// the data path classifies after any sequence of them exactly as the rank order says: random
// adds, changes, renames and removals, checked packet by packet against a classifier written
// here from the rules of docs/spec.md (priority, then the longer prefix, then the name).
#include "datapath_fixture.hpp"

#include <gmock/gmock.h>

#include <arpa/inet.h>
#include <fmt/format.h>

#include <cstring>

#include <map>
#include <optional>
#include <random>
#include <tuple>

namespace tricolor::test {
namespace {

struct Probe {
    std::string dst;
    uint16_t dport;
};

const std::vector<Probe> kProbes = [] {
    std::vector<Probe> out;
    for (const char *dst :
         {"198.18.0.1", "198.18.0.2", "198.18.1.1", "198.18.3.4", "198.18.7.7", "198.19.0.1"})
        for (uint16_t port : {80, 1500, 22, 5000})
            out.push_back({dst, port});
    return out;
}();

bool in_prefix(const Prefix &p, const std::string &addr) {
    uint32_t a = 0, net = 0;
    inet_pton(AF_INET, addr.c_str(), &a);
    std::memcpy(&net, p.addr.data(), 4);
    uint32_t mask = p.len == 0 ? 0 : htonl(~0u << (32 - p.len));
    return (a & mask) == (net & mask);
}

// The policy a UDP packet to @probe falls under: the best (priority, -prefix length, name).
std::optional<uint32_t> reference(const std::map<uint32_t, Policy> &set, const Probe &probe) {
    std::optional<std::tuple<uint32_t, int, std::string>> best;
    std::optional<uint32_t> id;
    for (const auto &[pid, p] : set) {
        if (p.match.dst && !in_prefix(*p.match.dst, probe.dst))
            continue;
        if (p.match.dport && (probe.dport < p.match.dport->lo || probe.dport > p.match.dport->hi))
            continue;
        auto key =
            std::tuple(p.priority, -static_cast<int>(p.match.dst ? p.match.dst->len : 0), p.name);
        if (!best || key < *best) {
            best = key;
            id = pid;
        }
    }
    return id;
}

class PolicySetsTest : public DatapathFixture {
  protected:
    // Every probe classified as the reference says; @what names the step.
    void expect_classified(const std::map<uint32_t, Policy> &set, const std::string &what) {
        for (const auto &pr : kProbes) {
            dp->run_xdp(Packet().ipv4("198.18.255.1", pr.dst).udp(9, pr.dport).build());
            auto want = reference(set, pr);
            auto got = dp->last_verdict().policy_id;
            ASSERT_EQ(got, want) << what << ": packet to " << pr.dst << ":" << pr.dport;
        }
    }
};

Policy random_policy(std::mt19937 &rng, uint32_t id) {
    static const char *prefixes[] = {"198.18.0.0/16", "198.18.0.0/24", "198.18.1.0/24",
                                     "198.18.3.0/24", "198.18.0.1/32", "198.18.3.4/32",
                                     "198.18.0.0/15"};
    static const PortRange ports[] = {{80, 80}, {1000, 1999}, {0, 1023}};
    Policy p = policy(id, std::string(1, static_cast<char>('a' + rng() % 4)) + std::to_string(id));
    if (rng() % 5)
        p.match.dst = prefix(prefixes[rng() % std::size(prefixes)]);
    if (rng() % 2) {
        p.match.proto = 17;
        p.match.dport = ports[rng() % std::size(ports)];
    }
    p.priority = rng() % 3;
    return p;
}

} // namespace

// A few hundred changes of one policy each, mixed with whole applies; after each, every probe
// packet falls under the policy the rank order gives. Fails if a set is left behind by a change
// (a dirty policy not rewritten), a rule of two claimants keeps the wrong one, a reordered
// mask keeps its old place, or a rank goes out of order.
TEST_F(PolicySetsTest, AnySequenceOfChangesClassifiesAsTheRankOrderSays) {
    std::mt19937 rng(20261123);
    std::map<uint32_t, Policy> set;
    for (int step = 0; step < 400; ++step) {
        unsigned what = rng() % 10;
        std::string text;
        if (what < 6 || set.empty()) {
            uint32_t id = rng() % 48;
            Policy p = random_policy(rng, id);
            text = fmt::format("step {}: upsert {}", step, p.name);
            auto r = dp->upsert(p);
            ASSERT_TRUE(r.has_value()) << text << ": " << r.error();
            set[id] = p;
        } else if (what < 9) {
            auto it = std::next(set.begin(), static_cast<long>(rng() % set.size()));
            text = fmt::format("step {}: remove {}", step, it->second.name);
            auto r = dp->remove(it->first);
            ASSERT_TRUE(r.has_value()) << text << ": " << r.error();
            set.erase(it);
        } else {
            // A whole set with a few policies changed: the diff path.
            for (int k = 0; k < 3; ++k) {
                uint32_t id = rng() % 48;
                set[id] = random_policy(rng, id);
            }
            text = fmt::format("step {}: apply", step);
            std::vector<Policy> all;
            for (const auto &[id, p] : set)
                all.push_back(p);
            auto r = dp->apply(all);
            ASSERT_TRUE(r.has_value()) << text << ": " << r.error();
        }
        expect_classified(set, text);
    }
}

// Policies added one after another in rank order between the same two neighbours: each halves
// the room between them until the ranks are laid out afresh; the order holds throughout.
TEST_F(PolicySetsTest, RanksLaidOutAfreshWhenTheRoomBetweenTwoRunsOut) {
    std::map<uint32_t, Policy> set;
    Policy first = policy(0, "a"), last = policy(1, "c");
    first.match.dst = last.match.dst = prefix("198.18.0.0/16");
    ASSERT_TRUE(dp->upsert(first).has_value());
    ASSERT_TRUE(dp->upsert(last).has_value());
    set[0] = first;
    set[1] = last;
    std::string name = "b";
    for (uint32_t id = 2; id < 40; ++id, name += "z") {
        // "b", "bz", "bzz", ...: each sorts after the one before and before "c".
        Policy p = policy(id, name);
        p.match.dst = prefix(id % 2 ? "198.18.0.0/16" : "198.18.0.0/15");
        p.priority = 0;
        ASSERT_TRUE(dp->upsert(p).has_value());
        set[id] = p;
        expect_classified(set, "after " + name);
        // The newest matches 198.18/16 only if nothing before it in rank order does: "a" does.
    }
    // Now take "a" away: the first of the others in rank order, "b", takes the /16.
    ASSERT_TRUE(dp->remove(0).has_value());
    set.erase(0);
    expect_classified(set, "without a");
}

// The point of it all: at two thousand policies, changing or removing one writes a handful of
// map entries (its config and rule in the inactive set, the masks' order, the set header, and
// those of the change before, which the set missed while it was active), not the whole set.
TEST_F(PolicySetsTest, OneChangeAmongThousandsWritesAFewEntries) {
    std::vector<Policy> all;
    for (uint32_t id = 0; id < 2000; ++id) {
        Policy p = policy(id, fmt::format("p{:04}", id));
        p.match.dst = Prefix{false, {198, 18, uint8_t(id >> 8), uint8_t(id & 0xff)}, 32};
        all.push_back(p);
    }
    apply(all);
    Policy changed = all[700];
    for (int round = 0; round < 4; ++round) {
        changed.priority = round % 2 ? 0 : 5;
        changed.meter.cir += 8000;
        ASSERT_TRUE(dp->upsert(changed).has_value());
        EXPECT_LE(dp->last_set_writes(), 12u) << "round " << round;
    }
    ASSERT_TRUE(dp->remove(1999).has_value());
    EXPECT_LE(dp->last_set_writes(), 12u);
    std::map<uint32_t, Policy> set;
    for (const auto &p : all)
        set[p.id] = p;
    set[700] = changed;
    set.erase(1999);
    for (uint32_t id : {0u, 700u, 1998u, 1999u}) {
        std::string dst = fmt::format("198.18.{}.{}", id >> 8, id & 0xff);
        dp->run_xdp(Packet().ipv4("198.18.255.1", dst).udp(9, 80).build());
        EXPECT_EQ(dp->last_verdict().policy_id, set.contains(id) ? std::optional(id) : std::nullopt)
            << dst;
    }
}

} // namespace tricolor::test

namespace tricolor::test {

// A change of one policy is checked against the set around it, as a whole set would be: each
// refusal says what apply() of the whole set would say, and changes nothing.
TEST_F(PolicySetsTest, OneChangeIsRefusedAsTheWholeSetWouldBe) {
    Policy parent = policy(1, "link"), child = policy(2, "user");
    child.parent = "link";
    child.match.dst = prefix("198.18.0.0/24");
    ASSERT_TRUE(dp->upsert(parent).has_value());
    ASSERT_TRUE(dp->upsert(child).has_value());
    std::map<uint32_t, Policy> set{{1, parent}, {2, child}};
    auto whole = [&](std::optional<Policy> up, std::optional<uint32_t> del) {
        std::map<uint32_t, Policy> s = set;
        if (up)
            s[up->id] = *up;
        if (del)
            s.erase(*del);
        std::vector<Policy> v;
        for (const auto &[id, p] : s)
            v.push_back(p);
        return v;
    };
    struct Bad {
        const char *what;
        std::optional<Policy> up;
        std::optional<uint32_t> del;
        const char *says;
    };
    Policy orphan = policy(3, "orphan");
    orphan.parent = "nope";
    Policy loop = parent;
    loop.parent = "user";
    Policy twin = policy(4, "user");
    std::vector<Bad> bad = {
        {"a parent that does not exist", orphan, {}, "its parent 'nope' does not exist"},
        {"a parent deleted under its child", {}, 1u, "policy 'user': its parent 'link' does not"},
        {"a cycle", loop, {}, "form a cycle of parents"},
        {"a name another id holds", twin, {}, "the name is used twice"},
    };
    // A chain one level deeper than the data path meters.
    Policy prev = child;
    std::vector<Policy> chain;
    for (uint32_t level = 2; level < TCM_MAX_LEVELS; ++level) {
        Policy p = policy(10 + level, fmt::format("level{}", level));
        p.parent = prev.name;
        ASSERT_TRUE(dp->upsert(p).has_value());
        set[p.id] = p;
        prev = p;
    }
    Policy deep = policy(40, "too-deep");
    deep.parent = prev.name;
    bad.push_back({"a chain too deep", deep, {}, "levels; at most"});
    expect_classified(set, "before");
    uint32_t version = dp->active_set();
    for (const auto &b : bad) {
        SCOPED_TRACE(b.what);
        auto one = b.up ? dp->upsert(*b.up) : dp->remove(*b.del);
        ASSERT_FALSE(one.has_value());
        EXPECT_THAT(one.error(), ::testing::HasSubstr(b.says));
        auto all = dp->check(whole(b.up, b.del));
        ASSERT_FALSE(all.has_value());
        EXPECT_THAT(all.error(), ::testing::HasSubstr(b.says));
        EXPECT_EQ(dp->active_set(), version); // nothing switched
        expect_classified(set, b.what);
    }
}

// The maps' limits count the set after the change: 64 match shapes fit, a 65th is refused.
TEST_F(PolicySetsTest, TheShapesLimitCountsTheSetAfterTheChange) {
    for (uint32_t len = 1; len <= TCM_MAX_MASKS; ++len) {
        Policy p = policy(len, fmt::format("len{}", len));
        p.match.dst = Prefix{false, {198, 18, 0, 0}, static_cast<uint8_t>(len % 33)};
        if (len > 32)
            p.match.dport = PortRange{80, 80};
        ASSERT_TRUE(dp->upsert(p).has_value()) << len;
    }
    Policy extra = policy(100, "extra");
    extra.match.proto = 17;
    auto r = dp->upsert(extra);
    ASSERT_FALSE(r.has_value());
    EXPECT_THAT(r.error(), ::testing::HasSubstr("65 distinct match shapes"));
    // Replacing one policy's shape by a new one keeps the count at 64.
    extra.id = 1;
    extra.name = "len1";
    EXPECT_TRUE(dp->upsert(extra).has_value());
}

} // namespace tricolor::test
