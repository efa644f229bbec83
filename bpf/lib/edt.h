/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* edt.h: --shape edt (docs/spec.md §8). On a tc egress attachment, a packet of an edt policy that
 * its bucket would colour red for want of tokens gets a departure time (skb->tstamp) when the
 * bucket will hold its tokens, and fq releases it then; one that could not leave within the
 * horizon is dropped. The bucket is metered at departure times, so §1's bound holds for what
 * leaves. How and why: docs/tcp.md, "--shape edt"; the steps of edt_mark: docs/datapath.md,
 * "What the headers' comments point to". */
#ifndef TRICOLOR_EDT_H
#define TRICOLOR_EDT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"
#include "maps.h"
#include "chain.h"

/* Meters one packet of an edt policy, incoming colour @c0, on @st (the flow's state, under its
 * lock) and returns its colour, ORed with TCM_METER_DELAYED (*@stamp is then its departure time)
 * or TCM_METER_SHAPE_DROP. *@stamp: the skb's departure time (0: none). */
static __always_inline int edt_mark(const struct tcm_policy *pol, struct tcm_meter_state *st,
                                    __u64 now, __u32 len, __u32 c0, __u64 *stamp) {
    const struct tcm_meter_config *m = &pol->meter;
    __u64 own = *stamp, t = now;
    /* A sender that paces itself (TCP under fq stamps every packet) is metered when it asked to
     * leave; a stamp beyond the horizon is not a departure time we trust, and is left alone. */
    if (own > now && own - now <= TCM_EDT_HORIZON_NS)
        t = own;
    __u64 dep = st->last_ns > t ? st->last_ns : t;
    __u32 color = meter_mark(m, st, t, len, c0);
    if (color == TCM_RED) {
        if (!(m->flags & TCM_METER_F_COLOR_AWARE))
            c0 = TCM_GREEN;
        __u64 rate, tokens, size;
        /* Arrived red: red whatever the tokens; or no bucket's refill would make it pass. */
        if (c0 == TCM_RED || !meter_wait_bucket(m, st, c0, &rate, &tokens, &size))
            return TCM_RED;
        __u64 cost = meter_cost(m, len);
        __u32 id = pol->policy_id;
        struct tcm_edt_cfg *e = bpf_map_lookup_elem(&tcm_edt_cfg, &id);
        if (!e || !e->recip || rate == 0 || cost > size || tokens >= cost)
            return TCM_RED | TCM_METER_SHAPE_DROP;
        __u64 wait = meter_wait_ns(cost - tokens, rate, e->recip);
        if (wait > TCM_EDT_HORIZON_NS) /* so that dep + wait cannot wrap */
            return TCM_RED | TCM_METER_SHAPE_DROP;
        dep += wait;
        if (dep - now > TCM_EDT_HORIZON_NS)
            return TCM_RED | TCM_METER_SHAPE_DROP;
        color = meter_mark(m, st, dep, len, c0);
        if (color == TCM_RED) /* a rate changed under the packet: its estimate is stale */
            return TCM_RED | TCM_METER_SHAPE_DROP;
    }
    if (dep > now && dep > own) {
        *stamp = dep;
        return color | TCM_METER_DELAYED;
    }
    return color;
}

/* chain_meter_packet for a policy with shape edt on tc: a chain of one (apply refuses edt in a
 * hierarchy), metered by edt_mark on egress, as without edt on ingress. A global function of its
 * own, given the skb: the tc program's other paths carry none of it for the verifier (Linux
 * 6.1's margin is thin), and its frame sits beside chain_meter_packet's, not under it. Counts
 * what it did in tcm_tcp_stats; returns the colour, TCM_METER_SIGNAL (--aqm) and
 * TCM_METER_SHAPE_DROP, or TCM_NR_COLORS if the bucket could not be found. */
__attribute__((noinline)) int edt_meter_packet(const struct tcm_policy *pol,
                                               const struct tcm_class_key *key,
                                               const struct tcm_chain_in *in,
                                               struct __sk_buff *skb) {
    __u32 zero = 0, agg;

    if (!pol || !key || !in)
        return TCM_NR_COLORS;
    struct tcm_global_counters *g = bpf_map_lookup_elem(&tcm_global_stats, &zero);
    struct tcm_flow *f = flow_find(pol, key, g, &agg);
    if (!f)
        return TCM_NR_COLORS;
    __u32 len = chain_level_len(pol, in), segs = in->segs;
    __u32 c0 = in->in_color > TCM_RED ? TCM_GREEN : in->in_color;
    if (!flow_lock(f)) {
        if (g)
            g->lock_timeouts++;
        chain_count(pol, TCM_RED, segs, len);
        return TCM_RED; /* never admit what the meter could not check */
    }
    __u64 now = clock_now_ns();
    aqm_idle(pol, f, now);
    if (!(f->flags & TCM_FLOW_F_STARTED))
        meter_start(&pol->meter, &f->meter, now);
    int metered;
    /* Egress: the packet is not on the device it arrived by (at tc ingress skb_iif is always
     * the device's own). One forwarded back out of its own device counts as ingress: the hard
     * policer, which is safe. */
    if (skb->ingress_ifindex != skb->ifindex) {
        __u64 stamp = skb->tstamp;
        metered = edt_mark(pol, &f->meter, now, len, c0, &stamp);
        if (metered & TCM_METER_DELAYED)
            skb->tstamp = stamp;
    } else {
        metered = meter_mark(&pol->meter, &f->meter, now, len, c0);
    }
    __u32 color = meter_color_index(metered & 0xff);
    __u32 signal = pol->aqm && aqm_step(pol, f, color) ? TCM_METER_SIGNAL : 0;
    chain_done(pol, f, key, in, color);
    if (metered & (TCM_METER_DELAYED | TCM_METER_SHAPE_DROP)) {
        __u32 id = pol->policy_id;
        struct tcm_tcp_counters *t = bpf_map_lookup_elem(&tcm_tcp_stats, &id);
        if (t && (metered & TCM_METER_SHAPE_DROP)) {
            t->shape_dropped_packets += segs;
            t->shape_dropped_bytes += len;
        } else if (t) {
            t->shape_delayed_packets += segs;
            t->shape_delayed_bytes += len;
        }
    }
    return color | signal | (metered & TCM_METER_SHAPE_DROP);
}

#endif /* TRICOLOR_EDT_H */
