/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* fleet.h: a fleet policy's committed bucket, refilled at the rate the fleet leased to this host
 * (docs/fleet.md). Called under the bucket's lock, so the fold and the packet's marking see one
 * consistent state. Exact: C earns rate * dt for every ns of the lease, once (accrued_ns), up to
 * the lease's cap; no division (fill_ns is user space's), no overflow (dt < fill_ns keeps
 * rate * dt below TCM_FLEET_FULL + rate). */
#ifndef TRICOLOR_FLEET_H
#define TRICOLOR_FLEET_H

#include "maps.h"
#include "meter.h"

/* One load of a field user space may store to at any time. */
#define TCM_READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))

/* Tokens a lease of @rate earns from @t0 to @t1. A gap of @fill or more earns TCM_FLEET_FULL,
 * which fills any C and E: then what overflows them is not counted (*@full). */
static __always_inline __u64 fleet_earned(__u64 rate, __u64 fill, __u64 t0, __u64 t1, int *full) {
    if (t1 <= t0)
        return 0;
    __u64 dt = t1 - t0;
    if (dt >= fill) {
        *full = 1;
        return TCM_FLEET_FULL;
    }
    return dt * rate;
}

static __always_inline __u64 fleet_max(__u64 a, __u64 b) {
    return a > b ? a : b;
}

static __always_inline __u64 fleet_min(__u64 a, __u64 b) {
    return a < b ? a : b;
}

/* A global function, so that the verifier checks it once, on its own, rather than at each of
 * the chain's four levels: inlined there it doubled the data path's load time. Its pointers are
 * then only memory of their types' sizes, which the verifier makes it check for NULL. */
__noinline int tcm_fleet_fold(struct tcm_meter_state *st, const struct tcm_meter_config *cfg,
                              __u32 id, __u64 now) {
    struct tcm_fleet_lease *g = bpf_map_lookup_elem(&tcm_fleet, &id);

    if (!g || !st || !cfg)
        return 0;
    /* The lease ran out (user space renews it at each exchange): C earns up to the deadline,
     * and nothing it holds may be spent after it. */
    __u64 until = TCM_READ_ONCE(g->until_ns);
    __u64 end = until && now > until ? until : now;
    __u64 seq = TCM_READ_ONCE(g->seq);
    if (!(seq & 1)) {
        __u64 rate = TCM_READ_ONCE(g->rate), from = TCM_READ_ONCE(g->from_ns);
        __u64 fill = TCM_READ_ONCE(g->fill_ns), cap = TCM_READ_ONCE(g->cap);
        __u64 prate = TCM_READ_ONCE(g->prev_rate), pfrom = TCM_READ_ONCE(g->prev_from_ns);
        __u64 pfill = TCM_READ_ONCE(g->prev_fill_ns), cut = TCM_READ_ONCE(g->cut);
        if (TCM_READ_ONCE(g->seq) == seq) {
            if (cut != g->cut_seen) {
                st->c_tokens = 0;
                g->cut_seen = cut;
            }
            __u64 t = g->accrued_ns;
            int full = 0;
            __u64 add =
                fleet_earned(prate, pfill, fleet_max(t, pfrom), fleet_min(end, from), &full);
            __u64 more = fleet_earned(rate, fill, fleet_max(t, from), end, &full);
            /* Two segments each below TCM_FLEET_FULL + rate: their sum may wrap. */
            add = add + more < add ? TCM_FLEET_FULL : add + more;
            if (end > t)
                g->accrued_ns = end;
            __u64 over = meter_grant(cfg, st, cap, add);
            if (!full)
                g->spilled += over;
        }
    }
    if (until && now > until)
        st->c_tokens = 0;
    return 0;
}

#endif /* TRICOLOR_FLEET_H */
