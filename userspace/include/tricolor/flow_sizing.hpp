// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// flow_sizing.hpp: how big tricolord keeps the flow table (docs/daemon.md, "The flow table"), in
// flows of capacity, the slots being TCM_SLOT_LOAD_DEN / TCM_SLOT_LOAD_NUM of that
// (Datapath::flow_slots_for). The goal (docs/spec.md §15): the table's memory within 1.5x its
// flows' slots plus a constant, i.e. its slots at least two thirds full once it is bigger than
// the least table. So it grows once its slots are 78% full, to 70% full with what it holds then
// and what will come while the programs load, and shrinks, when they are under two thirds full,
// to 72%. (At 4/5 full, its capacity, 45 new flows in a million find no free slot within
// TCM_FLOW_PROBES: tests/bench/flow_slots_sim.py.)
#pragma once

#include <algorithm>
#include <cstdint>

#include "tricolor_abi.h"

namespace tricolor {

// Whether a table of @capacity flows that holds @live grows now: 39/40 of its capacity (its
// slots 78% full; the last 1/40 and the growth's own table take the flows that come while the
// programs load).
constexpr bool flow_table_grows(uint32_t capacity, uint64_t live) {
    return live * 40 >= uint64_t{capacity} * 39;
}

// The capacity of a table for @want flows with its slots 70% full (capacity 8/7 of @want), in
// [@least, @most].
constexpr uint32_t flow_capacity_for(uint64_t want, uint32_t least, uint32_t most) {
    const uint64_t c = (want * 8 + 6) / 7;
    return static_cast<uint32_t>(std::clamp<uint64_t>(c, least, std::max(least, most)));
}

// What a table of @capacity flows that holds @live shrinks to, or @capacity if it does not:
// its slots under two thirds full (@live under 5/6 of @capacity) and bigger than @least, to
// 72% full (capacity 10/9 of @live), at least @least.
constexpr uint32_t flow_capacity_shrunk(uint32_t capacity, uint64_t live, uint32_t least) {
    if (capacity <= least || live * 6 >= uint64_t{capacity} * 5)
        return capacity;
    const uint64_t c = (live * 10 + 8) / 9;
    return static_cast<uint32_t>(std::clamp<uint64_t>(c, least, capacity));
}

} // namespace tricolor
