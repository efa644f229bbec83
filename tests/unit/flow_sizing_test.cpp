// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The flow table's sizes as tricolord keeps them (tricolor/flow_sizing.hpp): the memory bound of
// docs/spec.md §15 held at every size the rules give, growths that are steps, not creeps, and
// no size that grows or shrinks again at once.
#include "tricolor/datapath.hpp"
#include "tricolor/flow_sizing.hpp"

#include <gtest/gtest.h>

namespace tricolor {
namespace {

constexpr uint32_t kLeast = TCM_START_FLOWS, kMost = TCM_DEFAULT_FLOWS;

// The goal: the slots within 1.5 a flow plus the least table's.
bool within_goal(uint32_t capacity, uint64_t live) {
    return uint64_t{flow_slots_for(capacity)} * 2 <=
           3 * live + 2 * uint64_t{flow_slots_for(kLeast)};
}

// Flows that come one at a time from none to the most: the table grows when the rules say, by
// 9/8 at least (a growth is a load of the programs), and at every count its slots are within
// the goal; past 10^5 flows, within 1.5 a flow alone.
TEST(FlowSizing, FlowsThatComeKeepTheSlotsWithinOneAndAHalfAFlow) {
    uint32_t capacity = kLeast;
    int growths = 0;
    for (uint64_t live = 1; live <= kMost; ++live) {
        if (capacity < kMost && flow_table_grows(capacity, live)) {
            const uint32_t next = flow_capacity_for(capacity, live, kLeast, kMost);
            if (next < kMost) { // the last one is what is left up to the most
                ASSERT_GE(uint64_t{next} * 8, uint64_t{capacity} * 9) << "at " << live;
            }
            capacity = next;
            ++growths;
        }
        ASSERT_LE(live, capacity);
        ASSERT_TRUE(within_goal(capacity, live)) << live << " in " << capacity;
        if (live > 100000) {
            ASSERT_LE(flow_slots_for(capacity), 1.5 * static_cast<double>(live))
                << live << " in " << capacity;
        }
    }
    EXPECT_EQ(capacity, kMost);
    EXPECT_LE(growths, 40);
}

// A growth for the flows that come while the programs load: all of them fit, and the slots are
// within the goal once they have come.
TEST(FlowSizing, AGrowthHasRoomForWhatComesWhileItLoads) {
    for (uint32_t capacity : {kLeast, 100000u, 400000u}) {
        for (uint64_t coming : {0u, 1000u, 100000u, 300000u}) {
            uint64_t live = 0;
            while (!flow_table_grows(capacity, live))
                ++live;
            const uint32_t next = flow_capacity_for(capacity, live + coming, kLeast, kMost);
            if (next == kMost)
                continue;
            EXPECT_GE(next, live + coming) << capacity << " " << coming;
            EXPECT_TRUE(within_goal(next, live + coming)) << capacity << " " << coming;
        }
    }
}

// Flows that go: the table shrinks once its slots are under two thirds full, to where it
// neither shrinks nor grows again, and never below what it holds or the least table.
TEST(FlowSizing, FlowsThatGoShrinkTheTableToWhereItStays) {
    for (uint32_t capacity : {kLeast * 2, 100000u, 500000u, kMost}) {
        for (uint64_t live = 0; live <= capacity; live += 997) {
            const uint32_t to = flow_capacity_shrunk(capacity, live, kLeast);
            ASSERT_LE(to, capacity);
            ASSERT_GE(to, std::max<uint64_t>(live, kLeast));
            if (to == capacity) {
                ASSERT_TRUE(within_goal(capacity, live)) << live << " in " << capacity;
                continue;
            }
            EXPECT_EQ(flow_capacity_shrunk(to, live, kLeast), to) << live;
            EXPECT_FALSE(flow_table_grows(to, live)) << live;
        }
    }
    // A table that grew is not shrunk by what it holds right after.
    for (uint64_t live : {20000u, 300000u, 900000u}) {
        const uint32_t grown = flow_capacity_for(kLeast, live, kLeast, kMost);
        EXPECT_EQ(flow_capacity_shrunk(grown, live, kLeast), grown) << live;
    }
}

TEST(FlowSizing, SlotsAreFourFifthsFullAtCapacity) {
    EXPECT_EQ(flow_slots_for(16384), 20480u);
    EXPECT_EQ(flow_slots_for(1u << 20), 1310720u);
    EXPECT_EQ(flow_slots_for(1001), 1252u); // rounded up
    EXPECT_EQ(flow_slots_for(16), 2u * TCM_FLOW_PROBES);
}

// A table of a power of two of slots places a flow where the tables of before 2026-11-30 did
// (the hash under the mask of its slots), so that one pinned by an earlier tricolor is read as
// it was written; in a table of any size every home is a slot of it.
TEST(FlowSizing, TheHomeOfAPowerOfTwoIsTheMaskOfBefore) {
    auto home_before = [](const tcm_flow_id *id, const uint32_t *k, uint32_t mask) {
        uint64_t h = uint64_t{id->head + k[0]} * uint32_t(id->w[0] + k[1]) +
                     uint64_t{uint32_t(id->w[1] + k[2])} * uint32_t(id->w[2] + k[3]) +
                     uint64_t{uint32_t(id->w[3] + k[4])} * k[5];
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        return static_cast<uint32_t>(h & mask);
    };
    uint64_t x = 0x9e3779b97f4a7c15ull;
    auto next = [&] { return static_cast<uint32_t>((x = x * 6364136223846793005ull + 1) >> 33); };
    for (int i = 0; i < 100000; ++i) {
        tcm_flow_id id{};
        id.head = next();
        for (auto &w : id.w)
            w = next();
        uint32_t k[TCM_SLOT_SEED_WORDS];
        for (auto &w : k)
            w = next();
        const uint32_t shift = 6 + i % 20, n = 1u << shift;
        ASSERT_EQ(TCM_SLOT_SHIFT(n), shift);
        ASSERT_EQ(TCM_SLOT_HOME(&id, k, n, shift), home_before(&id, k, n - 1)) << n;
        const uint32_t odd = flow_slots_for(1000 + next() % 2000000);
        ASSERT_LT(TCM_SLOT_HOME(&id, k, odd, TCM_SLOT_SHIFT(odd)), odd);
    }
}

} // namespace
} // namespace tricolor
