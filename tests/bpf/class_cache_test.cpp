// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The classification cache (tcm_class_cache, bpf/lib/classify.h) through BPF_PROG_TEST_RUN:
// with many match shapes a packet's policy comes from the cache, and a policy change never
// serves the old set: not after one switch, not when the set index comes back, not when the
// version wraps after 2^32 switches.
#include "datapath_fixture.hpp"
#include "packet.hpp"
#include "test_util.hpp"
#include "tricolor/datapath.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <linux/bpf.h>
#include <sched.h>

using namespace tricolor;
using test::Packet;

namespace {

// 198.19.0.2 is the packets' destination; each filler's prefix differs from it in its last bit,
// so the fillers add shapes (destination /32.../25, with and without a port) and match nothing.
std::vector<Policy> with_shapes(int fillers) {
    std::vector<Policy> set;
    const uint32_t dst = 0xc6130002;
    for (int i = 0; i < fillers; ++i) {
        Policy p;
        p.id = 100 + i;
        p.name = "filler" + std::to_string(i);
        p.meter = test::meter_params(Algo::srtcm, 8000000, 3000, 8000000, 3000);
        int len = 32 - i / 2;
        uint32_t a = (dst ^ (1u << (32 - len))) & (len == 32 ? ~0u : ~((1u << (32 - len)) - 1));
        p.match.dst = Prefix{
            false, {uint8_t(a >> 24), uint8_t(a >> 16), uint8_t(a >> 8), uint8_t(a)}, uint8_t(len)};
        if (i % 2)
            p.match.dport = PortRange{9, 9};
        set.push_back(p);
    }
    return set;
}

Policy named(uint32_t id, const char *name, const char *src, uint32_t priority) {
    Policy p = test::policy(id, name);
    p.match.src = parse_prefix(src).value();
    p.priority = priority;
    return p;
}

class ClassCacheTest : public test::DatapathFixture {
  protected:
    // On one CPU: the doorkeeper that admits a key on its second miss is per CPU, as a flow's
    // packets are on one (RSS), and a test run runs on the CPU of its caller.
    void SetUp() override {
        sched_getaffinity(0, sizeof(saved_), &saved_);
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu(), &one);
        sched_setaffinity(0, sizeof(one), &one);
        test::DatapathFixture::SetUp();
    }
    void TearDown() override {
        test::DatapathFixture::TearDown();
        sched_setaffinity(0, sizeof(saved_), &saved_);
    }
    cpu_set_t saved_{};
    uint32_t flow_capacity() const override { return 1024; }
    // The id of the policy the packet from @src fell under, or -1.
    int64_t policy_of(const char *src) {
        dp->run_xdp(Packet().ipv4(src, "198.19.0.2").udp(1000, 2000).payload(100).build());
        auto v = dp->last_verdict();
        return v.policy_id ? int64_t(*v.policy_id) : -1;
    }
};

// Two policies matching the same packet, in two sets that rank them the other way round.
std::vector<Policy> ranked(bool a_first) {
    auto set = with_shapes(8);
    set.push_back(named(1, "a", "198.18.0.0/16", a_first ? 0 : 1));
    set.push_back(named(2, "b", "198.18.0.0/24", a_first ? 1 : 0));
    return set;
}

TEST_F(ClassCacheTest, ASwitchNeverServesTheOldSet) {
    apply(ranked(true));
    EXPECT_EQ(policy_of("198.18.0.1"), 1);
    EXPECT_EQ(policy_of("198.18.0.1"), 1); // the second miss: cached
    EXPECT_EQ(policy_of("198.18.0.1"), 1); // now from the cache
    EXPECT_GE(dp->class_cache_entries(), 1u);
    // Set 1, then set 0 again, then 1: each switch must show at once, though the set index
    // alternates and the packet's key stays the same.
    for (int round = 0; round < 6; ++round) {
        bool a_first = round % 2;
        apply(ranked(a_first));
        EXPECT_EQ(policy_of("198.18.0.1"), a_first ? 1 : 2) << "after switch " << round;
        EXPECT_EQ(policy_of("198.18.0.1"), a_first ? 1 : 2) << "cached, after switch " << round;
        EXPECT_EQ(policy_of("198.18.0.1"), a_first ? 1 : 2) << "from the cache, switch " << round;
    }
    // Two switches with no packet between them: the set index is the one of the cached entry,
    // the version is not.
    apply(ranked(true));
    EXPECT_EQ(policy_of("198.18.0.1"), 1);
    EXPECT_EQ(policy_of("198.18.0.1"), 1);
    apply(ranked(true));
    apply(ranked(false));
    EXPECT_EQ(policy_of("198.18.0.1"), 2);
    // What no policy matched is cached as such, and stops being so when a policy appears.
    EXPECT_EQ(policy_of("198.18.1.1"), 1);
    auto set = ranked(true);
    set.pop_back();
    set.pop_back();
    apply(set);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(policy_of("198.18.1.1"), -1) << "packet " << i;
    set.push_back(named(3, "c", "198.18.1.0/24", 0));
    apply(set);
    EXPECT_EQ(policy_of("198.18.1.1"), 3);
    EXPECT_EQ(policy_of("198.18.1.1"), 3);
    EXPECT_EQ(policy_of("198.18.1.1"), 3);
    auto c = dp->policy_counters()[3];
    EXPECT_EQ(c.packets[TCM_GREEN], 3u); // a cached answer is metered and counted as any other
}

TEST_F(ClassCacheTest, AWrapOfTheVersionEmptiesTheCacheFirst) {
    apply(ranked(true));
    EXPECT_EQ(policy_of("198.18.0.1"), 1);
    EXPECT_EQ(policy_of("198.18.0.1"), 1); // its second miss: cached under this version
    ASSERT_EQ(dp->class_cache_entries(), 1u);
    uint32_t version = dp->active_set();
    // 2^32 - 1 switches later (bit 0, the set, is the same), one more comes back to 0 and the
    // next to `version`: the entry cached then must not answer for the set of now.
    dp->set_version_for_test(version | 0xfffffffeu);
    apply(ranked(false));
    EXPECT_EQ(dp->active_set(), 0u);
    EXPECT_EQ(dp->class_cache_entries(), 0u);
    apply(ranked(false));
    EXPECT_EQ(dp->active_set(), version);
    EXPECT_EQ(policy_of("198.18.0.1"), 2);
}

TEST_F(ClassCacheTest, FewShapesProbeWithoutTheCache) {
    // Below TCM_CLASS_CACHE_MIN_MASKS shapes a probe costs no more than the cache: it is neither
    // read nor filled. From there on, each key seen twice (matched or not) has its entry.
    for (int shapes : {TCM_CLASS_CACHE_MIN_MASKS - 1, TCM_CLASS_CACHE_MIN_MASKS}) {
        auto set = with_shapes(shapes - 1);
        set.push_back(named(1, "a", "198.18.0.0/16", 0));
        apply(set);
        for (int i = 0; i < 2; ++i) {
            EXPECT_EQ(policy_of("198.18.0.1"), 1);
            EXPECT_EQ(policy_of("198.19.0.1"), -1);
        }
        EXPECT_EQ(dp->class_cache_entries(), shapes < TCM_CLASS_CACHE_MIN_MASKS ? 0u : 2u)
            << shapes << " shapes";
    }
}

TEST_F(ClassCacheTest, ASlotAnswersOnlyForItsWholeKeyAndVersion) {
    // A slot keeps one key, and keys of one slot replace each other: an answer is served only
    // to the key it was found for, every word of it, under the version it was found under.
    apply(ranked(true));
    ASSERT_EQ(policy_of("198.18.0.1"), 1);
    ASSERT_EQ(policy_of("198.18.0.1"), 1); // cached
    const int cpu = sched_getcpu();
    auto slots = dp->class_cache_of_cpu(cpu);
    uint32_t slot = 0;
    size_t held = 0;
    for (uint32_t i = 0; i < slots.size(); ++i)
        if (slots[i].answer & TCM_CLASS_CACHED) {
            slot = i;
            ++held;
        }
    ASSERT_EQ(held, 1u);
    const tcm_class_cache_entry mine = slots[slot];
    ASSERT_EQ(mine.version, dp->active_set());
    // The answer of policy 2 planted in the packet's slot: served while the entry is the
    // packet's (the cache is read)...
    const int32_t b_index = int32_t(mine.answer & ~TCM_CLASS_CACHED) - 1;
    tcm_class_cache_entry planted = mine;
    planted.answer = TCM_CLASS_CACHED | uint32_t(b_index + 2);
    dp->set_class_cache_slot(cpu, slot, planted);
    ASSERT_NE(policy_of("198.18.0.1"), 1) << "the planted answer is not read";
    // ...and not once any word of the key differs, nor under a version of the same set.
    for (int w = 0; w < TCM_CLASS_KEY_WORDS; ++w) {
        tcm_class_cache_entry other = planted;
        reinterpret_cast<uint32_t *>(&other.key)[w] ^= 0x100;
        dp->set_class_cache_slot(cpu, slot, other);
        EXPECT_EQ(policy_of("198.18.0.1"), 1) << "key word " << w;
    }
    tcm_class_cache_entry old = planted;
    old.version = mine.version - 2;
    dp->set_class_cache_slot(cpu, slot, old);
    EXPECT_EQ(policy_of("198.18.0.1"), 1) << "a version of before";
    tcm_class_cache_entry empty = planted;
    empty.answer &= ~TCM_CLASS_CACHED;
    dp->set_class_cache_slot(cpu, slot, empty);
    EXPECT_EQ(policy_of("198.18.0.1"), 1) << "an empty slot";
}

TEST_F(ClassCacheTest, AKeyIsCachedOnItsSecondMissOnly) {
    // The doorkeeper: a flood of keys seen once (spoofed sources) fills nothing; a key seen
    // again does, and is then answered from the cache.
    auto set = with_shapes(TCM_CLASS_CACHE_MIN_MASKS);
    set.push_back(named(1, "a", "198.18.0.0/16", 0));
    apply(set);
    for (int i = 0; i < 200; ++i)
        ASSERT_EQ(policy_of(fmt::format("198.18.{}.{}", i / 250, i % 250 + 1).c_str()), 1);
    EXPECT_EQ(dp->class_cache_entries(), 0u) << "200 keys seen once";
    EXPECT_EQ(policy_of("198.18.0.7"), 1);
    EXPECT_EQ(dp->class_cache_entries(), 1u) << "one of them seen again";
    EXPECT_EQ(policy_of("198.18.0.7"), 1);
    EXPECT_EQ(dp->class_cache_entries(), 1u);
}

} // namespace
