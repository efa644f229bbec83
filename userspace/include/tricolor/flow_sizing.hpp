// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// flow_sizing.hpp: how big tricolord keeps the flow table (docs/daemon.md, "The flow table"), in
// flows of capacity, the slots being TCM_SLOT_LOAD_DEN / TCM_SLOT_LOAD_NUM of that
// (flow_slots_for). The goal (docs/spec.md §15): the table's memory within 1.5x its flows' slots
// plus a constant, the least table's (TCM_START_FLOWS flows: 2 MiB). So it grows once 39/40 full
// (its slots 78% full), or with 4096 flows of room left in a smaller table, to its slots 70% full
// with what it holds then and what will come while the programs load, by 9/8 at least; and
// shrinks, once flows have gone and it is not within the goal, to 72%. (At 4/5 full, its
// capacity, 76 new flows in a million find no free slot within TCM_FLOW_PROBES:
// tests/bench/flow_slots_sim.py.)
#pragma once

#include <algorithm>
#include <cstdint>

#include "tricolor_abi.h"

namespace tricolor {

// The least table tricolord keeps: the capacity it started with (--flows, @start), and
// TCM_START_FLOWS whatever that was (a table that small is within the goal's constant), at most
// @most (--max-flows).
constexpr uint32_t flow_least_capacity(uint32_t start, uint32_t most) {
    return std::min(std::max<uint32_t>(start, TCM_START_FLOWS), most);
}

// Whether a table of @capacity flows that holds @live grows now: at 39/40 of its capacity, or
// 4096 flows short of it (the room for 40 ms of flows at 10^5/s, while the daemon sees it and
// opens the growth's own table) in a table of under 163840, or at half in a table of under
// 8192.
constexpr bool flow_table_grows(uint32_t capacity, uint64_t live) {
    const uint64_t c = capacity, room = std::min(std::max<uint64_t>(c / 40, 4096), c / 2);
    return live >= c - room;
}

// The capacity a table of @capacity flows grows to for @want flows: its slots 70% full with
// them (capacity 8/7 of @want), 9/8 of @capacity at least (a growth is a load of the programs),
// in [@least, @most].
constexpr uint32_t flow_capacity_for(uint32_t capacity, uint64_t want, uint32_t least,
                                     uint32_t most) {
    const uint64_t c = std::max((want * 8 + 6) / 7, (uint64_t{capacity} * 9 + 7) / 8);
    return static_cast<uint32_t>(std::clamp<uint64_t>(c, least, std::max(least, most)));
}

// The slots of a table of @capacity flows: four fifths full at capacity (TCM_SLOT_LOAD_NUM /
// TCM_SLOT_LOAD_DEN), 2 * TCM_FLOW_PROBES at least.
constexpr uint32_t flow_slots_for(uint32_t capacity) {
    const uint64_t slots =
        (uint64_t{capacity} * TCM_SLOT_LOAD_DEN + TCM_SLOT_LOAD_NUM - 1) / TCM_SLOT_LOAD_NUM;
    return static_cast<uint32_t>(std::max<uint64_t>(slots, 2 * TCM_FLOW_PROBES));
}

// Whether a table of @capacity flows that holds @live is within the goal: its slots at most 1.5
// a flow plus those of the least table (of @least flows).
constexpr bool flow_table_within_goal(uint32_t capacity, uint64_t live, uint32_t least) {
    return uint64_t{flow_slots_for(capacity)} * 2 <= 3 * live + 2 * uint64_t{flow_slots_for(least)};
}

// The capacity of a table made for @live flows (a shrink, a start on pins): its slots 72% full
// (capacity 10/9 of @live) and 4096 flows of room at least (so that it does not grow at once:
// flow_table_grows), in [@least, @most].
constexpr uint32_t flow_capacity_settled(uint64_t live, uint32_t least, uint32_t most) {
    const uint64_t c = std::max((live * 10 + 8) / 9, live + 4097);
    return static_cast<uint32_t>(std::clamp<uint64_t>(c, least, std::max(least, most)));
}

// What a table of @capacity flows that holds @live shrinks to, or @capacity if it does not: once
// it is not within the goal (flows gone), to flow_capacity_settled.
constexpr uint32_t flow_capacity_shrunk(uint32_t capacity, uint64_t live, uint32_t least) {
    if (capacity <= least || flow_table_within_goal(capacity, live, least))
        return capacity;
    return std::min(capacity, flow_capacity_settled(live, least, capacity));
}

} // namespace tricolor
