// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_fleet.cpp: a fleet policy's local side (docs/spec.md §10): the grants, revokes and
// lease written into the mmapped tcm_fleet array, and what the data path has made of them.
#include "datapath_impl.hpp"

#include <algorithm>

namespace tricolor {

void Datapath::fleet_grant(uint32_t id, uint64_t tokens) {
    if (id >= TCM_MAX_POLICIES || tokens == 0)
        return;
    tcm_fleet_grant &g = impl_->fleet[id];
    __atomic_store_n(&g.granted, g.granted + tokens, __ATOMIC_RELEASE); // the only writer
}

void Datapath::fleet_revoke(uint32_t id) {
    if (id >= TCM_MAX_POLICIES)
        return;
    tcm_fleet_grant &g = impl_->fleet[id];
    __atomic_store_n(&g.revoke_upto, __atomic_load_n(&g.granted, __ATOMIC_RELAXED),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&g.revoke_seq, g.revoke_seq + 1, __ATOMIC_RELEASE);
}

void Datapath::fleet_lease(uint32_t id, uint64_t until_ns) {
    if (id < TCM_MAX_POLICIES)
        __atomic_store_n(&impl_->fleet[id].lease_until_ns, until_ns, __ATOMIC_RELEASE);
}

FleetLocal Datapath::fleet_local(uint32_t id) const {
    FleetLocal out;
    if (id >= TCM_MAX_POLICIES)
        return out;
    const tcm_fleet_grant &g = impl_->fleet[id];
    // drained before C: a fold between the reads counts its tokens twice, never zero times.
    uint64_t drained = __atomic_load_n(&g.drained, __ATOMIC_ACQUIRE);
    uint64_t seen = __atomic_load_n(&g.revoke_seen, __ATOMIC_ACQUIRE);
    out.granted = __atomic_load_n(&g.granted, __ATOMIC_ACQUIRE);
    out.spilled = __atomic_load_n(&g.spilled, __ATOMIC_ACQUIRE);
    uint64_t pending = out.granted > drained ? out.granted - drained : 0;
    if (seen != __atomic_load_n(&g.revoke_seq, __ATOMIC_ACQUIRE)) {
        uint64_t upto = __atomic_load_n(&g.revoke_upto, __ATOMIC_ACQUIRE);
        pending = out.granted > std::max(upto, drained) ? out.granted - std::max(upto, drained) : 0;
        out.held = pending; // C is emptied at the next packet
        return out;
    }
    out.held = pending + policy_state(id).meter.c_tokens;
    return out;
}

} // namespace tricolor
