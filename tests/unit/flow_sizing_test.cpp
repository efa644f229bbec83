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

double slots_per_flow(uint32_t capacity, uint64_t live) {
    return static_cast<double>(Datapath::flow_slots_for(capacity)) / static_cast<double>(live);
}

// Flows that come one at a time from none to the most: the table grows when the rules say, and
// at every count past the least table its slots are at most 1.5 per flow; the growths are
// steps of at least 1/9 (a growth is a load of the programs).
TEST(FlowSizing, FlowsThatComeKeepTheSlotsWithinOneAndAHalfAFlow) {
    uint32_t capacity = kLeast;
    int growths = 0;
    for (uint64_t live = 1; live <= kMost; ++live) {
        if (capacity < kMost && flow_table_grows(capacity, live)) {
            const uint32_t next = flow_capacity_for(live, kLeast, kMost);
            if (next < kMost) { // the last one is what is left up to the most
                ASSERT_GE(uint64_t{next} * 9, uint64_t{capacity} * 10) << "at " << live;
            }
            capacity = next;
            ++growths;
        }
        ASSERT_LE(live, capacity);
        if (live > kLeast) {
            ASSERT_LE(slots_per_flow(capacity, live), 1.5) << live << " in " << capacity;
        }
    }
    EXPECT_EQ(capacity, kMost);
    EXPECT_LE(growths, 40);
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
                if (live > kLeast) {
                    ASSERT_LE(slots_per_flow(capacity, live), 1.5) << live << " in " << capacity;
                }
                continue;
            }
            EXPECT_EQ(flow_capacity_shrunk(to, live, kLeast), to) << live;
            EXPECT_FALSE(flow_table_grows(to, live)) << live;
        }
    }
    // A table that grew is not shrunk by what it holds right after.
    for (uint64_t live : {20000u, 300000u, 900000u}) {
        const uint32_t grown = flow_capacity_for(live, kLeast, kMost);
        EXPECT_EQ(flow_capacity_shrunk(grown, live, kLeast), grown) << live;
    }
}

TEST(FlowSizing, SlotsAreFourFifthsFullAtCapacity) {
    EXPECT_EQ(Datapath::flow_slots_for(16384), 20480u);
    EXPECT_EQ(Datapath::flow_slots_for(1u << 20), 1310720u);
    EXPECT_EQ(Datapath::flow_slots_for(1001), 1252u); // rounded up
    EXPECT_EQ(Datapath::flow_slots_for(16), 2u * TCM_FLOW_PROBES);
}

} // namespace
} // namespace tricolor
