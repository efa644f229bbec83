/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* aqm.h: --aqm drop|ecn (docs/spec.md §8): the law, applied per bucket pair under its lock, that
 * picks the packets carrying an early congestion signal (one per drain, and one for a drain that
 * doubled twice: slow start), and the signal's delivery and counters. The law and why it is that
 * law: docs/tcp.md, "--aqm drop|ecn". A policy without --aqm pays one load and a branch. */
#ifndef TRICOLOR_AQM_H
#define TRICOLOR_AQM_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"
#include "maps.h"
#include "meter.h"
#include "parse.h"
#include "act.h"

/* tcm_flow.flags: bit 24, the late signal was sent in this drain (cleared when the reserve is
 * back above TCM_AQM_REARM eighths); bit 25, the slow-start signal was sent in this drain;
 * bits 8-11, the deepest deficit of this drain and bits 12-15 of the one before, in eighths of
 * the reserve. A drain runs from the bucket leaving near full (deficit over S/16) to its return. */
#define TCM_FLOW_AQM_SIGNALLED (1u << 24)
#define TCM_FLOW_AQM_SS_SIGNALLED (1u << 25)
#define TCM_FLOW_AQM_CUR_SHIFT 8
#define TCM_FLOW_AQM_PREV_SHIFT 12
#define TCM_FLOW_AQM_PP_SHIFT 16
#define TCM_FLOW_AQM_LEVELS (0xfffu << TCM_FLOW_AQM_CUR_SHIFT)

/* The late signal is sent when the deficit reaches TCM_AQM_LEVEL eighths of the reserve; the
 * bucket re-arms when the deficit is back under TCM_AQM_REARM eighths. */
#define TCM_AQM_LEVEL 6
#define TCM_AQM_REARM 4
/* A bucket that saw no packet for this long forgets its drains (slow start follows idle). */
#define TCM_AQM_IDLE_NS 1000000000ull

/* The deficit in whole eighths of the reserve, 0..8, by compares (no division per packet). */
static __always_inline __u32 aqm_eighths(__u64 deficit, __u64 eighth) {
    if (deficit >= 4 * eighth) {
        if (deficit >= 6 * eighth)
            return deficit >= 8 * eighth ? 8 : deficit >= 7 * eighth ? 7 : 6;
        return deficit >= 5 * eighth ? 5 : 4;
    }
    if (deficit >= 2 * eighth)
        return deficit >= 3 * eighth ? 3 : 2;
    return deficit >= eighth ? 1 : 0;
}

/* Called with the flow locked, before the packet is metered at @now: a bucket idle for a second
 * forgets its drains (a new sender, or one back from idle, starts in slow start). Here rather
 * than in aqm_step so that no saved time lives across the meter (6.1 counts the stack). */
static __always_inline void aqm_idle(const struct tcm_policy *pol, struct tcm_flow *f, __u64 now) {
    /* @now may be before the bucket's last time: read before the lock (chain_meter_packet),
     * or after a packet edt_mark gave a departure ahead of it (--shape edt moves last_ns up to
     * its horizon forward). Neither is an idle second. */
    if (pol->aqm && now > f->meter.last_ns && now - f->meter.last_ns >= TCM_AQM_IDLE_NS)
        f->flags &= ~(TCM_FLOW_AQM_LEVELS | TCM_FLOW_AQM_SS_SIGNALLED);
}

/* Called with the flow locked, after the packet was metered and coloured @color. Returns 1 if
 * this packet carries the signal: the first of a drain at least 2/8 deep and twice the one
 * before, itself twice its predecessor (slow start), or the first at TCM_AQM_LEVEL eighths. */
static __always_inline int aqm_step(const struct tcm_policy *pol, struct tcm_flow *f, __u32 color) {
    __u64 size, tokens;

    meter_reserve(&pol->meter, &f->meter, &size, &tokens);
    __u64 deficit = size > tokens ? size - tokens : 0;
    __u64 eighth = size >> 3; /* sizes fit 2^64 / 8 with room: no overflow in 8 * eighth */
    __u32 flags = f->flags;
    __u32 cur = (flags >> TCM_FLOW_AQM_CUR_SHIFT) & 0xf;
    __u32 prev = (flags >> TCM_FLOW_AQM_PREV_SHIFT) & 0xf;
    __u32 pp = (flags >> TCM_FLOW_AQM_PP_SHIFT) & 0xf;

    if (deficit <= eighth >> 1) { /* near full: the drain, if any, is over */
        if (cur)
            flags = (flags & ~(TCM_FLOW_AQM_LEVELS | TCM_FLOW_AQM_SS_SIGNALLED)) |
                    cur << TCM_FLOW_AQM_PREV_SHIFT | prev << TCM_FLOW_AQM_PP_SHIFT;
        if (deficit < TCM_AQM_REARM * eighth)
            flags &= ~TCM_FLOW_AQM_SIGNALLED;
        f->flags = flags;
        return 0;
    }
    __u32 lvl = aqm_eighths(deficit, eighth);
    if (lvl > cur) {
        cur = lvl;
        flags = (flags & ~(0xfu << TCM_FLOW_AQM_CUR_SHIFT)) | cur << TCM_FLOW_AQM_CUR_SHIFT;
    }
    if (deficit < TCM_AQM_REARM * eighth)
        flags &= ~TCM_FLOW_AQM_SIGNALLED; /* refilled past half: armed again */
    int signal = 0;
    if (color != TCM_RED && pol->action[color].kind != TCM_ACT_KIND_DROP) {
        /* The signal goes to a packet that would pass. */
        if (!(flags & TCM_FLOW_AQM_SS_SIGNALLED) && cur >= 2 && prev >= 1 && cur >= 2 * prev &&
            prev >= 2 * pp) {
            flags |= TCM_FLOW_AQM_SS_SIGNALLED;
            signal = 1;
        } else if (!(flags & TCM_FLOW_AQM_SIGNALLED) && lvl >= TCM_AQM_LEVEL) {
            flags |= TCM_FLOW_AQM_SIGNALLED;
            signal = 1;
        }
    }
    f->flags = flags;
    return signal;
}

/* The early signal on a packet that would pass: CE if the policy says ecn and the packet is
 * ECN-capable (act_set_ce), else a drop (@v->drop). Counted per policy apart from the colours,
 * which stay what the meter said. */
static __always_inline void aqm_signal(void *data, void *data_end, const struct tcm_pkt *p,
                                       const struct tcm_policy *pol, struct tcm_verdict *v,
                                       __u32 segs, __u32 len) {
    __u32 id = pol->policy_id;
    struct tcm_tcp_counters *t = bpf_map_lookup_elem(&tcm_tcp_stats, &id);
    if (pol->aqm == TCM_AQM_ECN && act_set_ce(data, data_end, p) == 0) {
        if (t) {
            t->aqm_marked_packets += segs;
            t->aqm_marked_bytes += len;
        }
        return;
    }
    v->drop = 1;
    if (t) {
        t->aqm_dropped_packets += segs;
        t->aqm_dropped_bytes += len;
    }
}

#endif /* TRICOLOR_AQM_H */
