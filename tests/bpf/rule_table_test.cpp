// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rule_table_test.cpp: the classifier's table of our own (rule_table.hpp, bpf/lib/classify.h).
// Rules made to share one home slot, put, found and removed in every order on a real mapped
// array; and through the data path, policies whose rules share a slot each classify their own
// packets, before and after the one nearer its home is removed.
#include "datapath_fixture.hpp"
#include "tricolor/rule_table.hpp"
#include "tricolor/rules.hpp"

#include <gtest/gtest.h>

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>

namespace tricolor::test {
namespace {

tcm_rule_key key_of(uint32_t set, uint32_t a, uint32_t b) {
    tcm_rule_key k{};
    k.set_mask = set << 16 | 3;
    k.key.dst[3] = a;
    k.key.src[3] = b;
    return k;
}

// @n keys of set @set whose home is @home (found by trying keys in order).
std::vector<tcm_rule_key> same_home(uint32_t set, uint32_t home, size_t n, uint32_t salt = 0) {
    std::vector<tcm_rule_key> out;
    for (uint32_t a = 0; out.size() < n; ++a)
        for (uint32_t b = 0; b < 64 && out.size() < n; ++b)
            if (auto k = key_of(set, a, b ^ salt); rule_home(k) == home)
                out.push_back(k);
    return out;
}

class RuleTableTest : public ::testing::Test {
  protected:
    void SetUp() override {
        TRICOLOR_REQUIRE_ROOT();
        LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = BPF_F_MMAPABLE);
        fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "rule_table_test", 4, sizeof(tcm_rule_slot),
                            TCM_NR_SETS * TCM_RULE_SLOTS, &o);
        ASSERT_GE(fd, 0);
        table = std::make_unique<RuleTable>(fd);
    }
    void TearDown() override {
        table.reset();
        if (fd >= 0)
            close(fd);
    }
    int fd = -1;
    std::unique_ptr<RuleTable> table;
};

TEST_F(RuleTableTest, RulesSharingAHomeAreFoundThroughEveryRemovalOrder) {
    // A run of 40 rules of one home, 10 of the next home among them, across the table's end.
    uint32_t home = TCM_RULE_SLOTS - 20;
    auto keys = same_home(1, home, 40);
    auto next = same_home(1, home + 1, 10);
    std::vector<tcm_rule_key> all;
    for (size_t i = 0; i < keys.size(); ++i) {
        all.push_back(keys[i]);
        if (i % 4 == 0 && i / 4 < next.size())
            all.push_back(next[i / 4]);
    }
    std::mt19937 rng(7);
    for (int round = 0; round < 5; ++round) {
        std::map<size_t, bool> in;
        for (size_t i = 0; i < all.size(); ++i) {
            ASSERT_EQ(table->put(all[i], tcm_rule{static_cast<uint32_t>(i), 100u + round}), 0);
            in[i] = true;
        }
        std::vector<size_t> order(all.size());
        for (size_t i = 0; i < order.size(); ++i)
            order[i] = i;
        std::ranges::shuffle(order, rng);
        for (size_t r : order) {
            ASSERT_EQ(table->remove(all[r]), 0);
            in[r] = false;
            for (size_t i = 0; i < all.size(); ++i) {
                auto got = table->find(all[i]);
                ASSERT_EQ(got.has_value(), in[i]) << "rule " << i << " after removing " << r;
                if (got) {
                    EXPECT_EQ(got->slot, i);
                }
            }
        }
        EXPECT_TRUE(table->keys(1).empty());
    }
    EXPECT_EQ(table->remove(all[0]), -ENOENT);
}

TEST_F(RuleTableTest, AFullRunIsRefusedAndChangesNothingAndASetClearsAlone) {
    auto keys = same_home(0, 1000, TCM_RULE_PROBES + 1);
    for (uint32_t i = 0; i < TCM_RULE_PROBES; ++i)
        ASSERT_EQ(table->put(keys[i], tcm_rule{i, i}), 0);
    EXPECT_EQ(table->put(keys[TCM_RULE_PROBES], tcm_rule{1, 1}), -ENOSPC);
    EXPECT_FALSE(table->find(keys[TCM_RULE_PROBES]));
    EXPECT_EQ(table->keys(0).size(), static_cast<size_t>(TCM_RULE_PROBES));
    // A rule already in it is replaced in place, and the other set is another table.
    EXPECT_EQ(table->put(keys[5], tcm_rule{77, 1}), 0);
    EXPECT_EQ(table->find(keys[5])->slot, 77u);
    auto other = key_of(1, 0, 0);
    EXPECT_FALSE(table->find(other));
    EXPECT_EQ(table->put(other, tcm_rule{9, 9}), 0);
    EXPECT_EQ(table->keys(1).size(), 1u);
    // Clearing a set (a set written whole) empties it and leaves the other.
    EXPECT_EQ(table->clear(0), static_cast<size_t>(TCM_RULE_PROBES));
    EXPECT_TRUE(table->keys(0).empty());
    EXPECT_FALSE(table->find(keys[5]));
    EXPECT_EQ(table->find(other)->slot, 9u);
    EXPECT_EQ(table->put(keys[TCM_RULE_PROBES], tcm_rule{1, 1}), 0);
}

// Destinations (198.18.0.0/16, /32 each) whose rules share a home in set @set, the first two
// found.
std::pair<std::string, std::string> colliding_destinations(uint32_t set) {
    std::map<uint32_t, std::string> seen;
    for (uint32_t i = 0;; ++i) {
        std::string addr = fmt::format("198.18.{}.{}", i >> 8 & 0xff, i & 0xff);
        Policy p = policy(1, "p");
        p.match.dst = prefix((addr + "/32").c_str());
        auto e = rule_entries(p, 1, 1).at(0);
        tcm_rule_key k{};
        k.set_mask = set << 16; // the one shape: mask id 0
        k.key = e.key;
        auto [it, fresh] = seen.emplace(rule_home(k), addr);
        if (!fresh)
            return {it->second, addr};
    }
}

TEST_F(DatapathTest, PoliciesWhoseRulesShareASlotEachClassifyTheirPackets) {
    auto [a1, a2] = colliding_destinations(0);
    auto [b1, b2] = colliding_destinations(1);
    std::vector<std::string> addrs = {a1, a2, b1, b2};
    std::vector<Policy> set;
    for (uint32_t i = 0; i < 4; ++i) {
        Policy p = policy(1 + i, "to-" + addrs[i]);
        p.match.dst = prefix((addrs[i] + "/32").c_str());
        set.push_back(p);
    }
    apply(set);
    auto check = [&](const std::vector<uint32_t> &present, const char *when) {
        SCOPED_TRACE(when);
        for (uint32_t i = 0; i < 4; ++i) {
            uint64_t before = packets(1 + i);
            uint64_t unclassified = dp->global_counters().unclassified_packets;
            dp->run_xdp(Packet().ipv4("198.19.0.1", addrs[i]).udp(1, 2).payload(10).build());
            bool in = std::ranges::find(present, i) != present.end();
            EXPECT_EQ(packets(1 + i) - before, in ? 1u : 0u) << addrs[i];
            EXPECT_EQ(dp->global_counters().unclassified_packets - unclassified, in ? 0u : 1u);
        }
    };
    check({0, 1, 2, 3}, "all four");
    // Each removal is written to one set and caught up in the other at the next change.
    ASSERT_TRUE(dp->remove(1).has_value());
    check({1, 2, 3}, "the first of set 0's pair removed");
    ASSERT_TRUE(dp->remove(3).has_value());
    check({1, 3}, "the first of set 1's pair removed");
    ASSERT_TRUE(dp->upsert(set[0]).has_value());
    check({0, 1, 3}, "set 0's first back");
}

} // namespace
} // namespace tricolor::test
