// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_fleet.cpp: a fleet policy's local side (docs/fleet.md): the lease written into the
// mmapped tcm_fleet array under its sequence count, and what the data path has made of it.
#include "datapath_impl.hpp"

#include "meter.h" // meter_fill_ns

#include <algorithm>
#include <atomic>

namespace tricolor {

namespace {
// One store the data path may read at any time: never torn, never merged with another.
void put(__u64 &field, uint64_t v) {
    __atomic_store_n(&field, static_cast<__u64>(v), __ATOMIC_RELAXED);
}
} // namespace

void Datapath::fleet_set_lease(uint32_t id, const FleetLease &l) {
    if (id >= TCM_MAX_POLICIES)
        return;
    tcm_fleet_lease &g = impl_->fleet[id];
    const uint64_t now = now_ns();
    // A lease that ran out (Redis forgot this host, or a daemon before this one died) earned
    // nothing after its deadline, and a renewal may neither earn that gap nor spend what C
    // held (Redis has given that part of CBS to others): it starts anew, C empty.
    const bool lapsed = g.until_ns && g.until_ns < now;
    // A lease of nothing (a policy new on this id, or no longer a fleet one) keeps nothing
    // from before either.
    const bool afresh = lapsed || (l.rate == 0 && l.cap == 0);
    if (g.rate != l.rate || g.cap != l.cap || afresh) {
        // Earned at the old rate up to now, at the new one from now: Redis counts a raised rate
        // from before its reply, a lowered one until this host's next exchange.
        const uint64_t seq = g.seq;
        put(g.seq, seq + 1);
        std::atomic_thread_fence(std::memory_order_release);
        const uint64_t prev = afresh ? 0 : g.rate;
        put(g.prev_rate, prev);
        put(g.prev_from_ns, g.from_ns);
        put(g.prev_fill_ns, meter_fill_ns(TCM_FLEET_FULL, prev));
        put(g.rate, l.rate);
        put(g.from_ns, now);
        put(g.fill_ns, meter_fill_ns(TCM_FLEET_FULL, l.rate));
        put(g.cap, l.cap);
        if (afresh)
            put(g.cut, g.cut + 1);
        std::atomic_thread_fence(std::memory_order_release);
        put(g.seq, seq + 2);
    }
    __atomic_store_n(&g.until_ns, l.until_ns, __ATOMIC_RELEASE);
}

FleetLocal Datapath::fleet_local(uint32_t id) const {
    FleetLocal out;
    if (id >= TCM_MAX_POLICIES)
        return out;
    const tcm_fleet_lease &g = impl_->fleet[id];
    out.spilled = __atomic_load_n(&g.spilled, __ATOMIC_ACQUIRE);
    // C above a lowered cap is cut at the next packet: none of it can be spent.
    out.held = std::min<uint64_t>(policy_state(id).meter.c_tokens,
                                  __atomic_load_n(&g.cap, __ATOMIC_ACQUIRE));
    return out;
}

} // namespace tricolor
