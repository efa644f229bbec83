/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* fleet.h: a fleet policy's committed bucket, refilled by user-space grants (docs/spec.md §10).
 * Called under the bucket's lock, so the fold and the packet's marking see one consistent
 * state. Exact: every granted token lands in C (srtcm: what overflows C in E, as its CIR
 * stream would) or in spilled, never twice; no division, two compares and adds. */
#ifndef TRICOLOR_FLEET_H
#define TRICOLOR_FLEET_H

#include "maps.h"
#include "meter.h"

/* One load of a field user space may store to at any time. */
#define TCM_READ_ONCE(x) (*(volatile __typeof__(x) *)&(x))

static __always_inline void fleet_fold(const struct tcm_policy *pol, struct tcm_flow *f,
                                       __u64 now) {
    __u32 id = pol->policy_id;
    struct tcm_fleet_grant *g = bpf_map_lookup_elem(&tcm_fleet, &id);

    if (!g)
        return;
    /* Read the user-space fields once each: a revoke is stored upto-then-seq, read seq-first. */
    __u64 seq = TCM_READ_ONCE(g->revoke_seq);
    if (seq != g->revoke_seen) {
        __u64 upto = TCM_READ_ONCE(g->revoke_upto);
        f->meter.c_tokens = 0;
        if (upto > g->drained)
            g->drained = upto;
        g->revoke_seen = seq;
    }
    __u64 granted = TCM_READ_ONCE(g->granted);
    /* The lease ran out (user space renews it before each grant it adds): nothing held or
     * granted so far may be spent. */
    __u64 until = TCM_READ_ONCE(g->lease_until_ns);
    if (until && now > until) {
        f->meter.c_tokens = 0;
        if (granted > g->drained)
            g->drained = granted;
        return;
    }
    if (granted <= g->drained)
        return;
    __u64 add = granted - g->drained;
    g->drained = granted;
    g->spilled += meter_grant(&pol->meter, &f->meter, add);
}

#endif /* TRICOLOR_FLEET_H */
