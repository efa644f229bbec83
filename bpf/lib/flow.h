/* flow.h: finding a packet's bucket pair and metering under its lock.
 * The lock is a word in the map value taken with cmpxchg and released with xchg: bpf_spin_lock
 * is refused in LRU maps and costs more here, and a bounded spin lets a packet that cannot get
 * the lock (a holder stalled by an interrupt for microseconds) be coloured red rather than
 * admitted unmetered. The clock is read inside the critical section, so holders of one flow see
 * non-decreasing times. */
#ifndef TRICOLOR_FLOW_H
#define TRICOLOR_FLOW_H

#include "maps.h"
#include "meter.h"
#include "clock.h"
#include "parse.h"

static __always_inline void tc_mask_prefix(__u32 *addr, __u32 plen) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __u32 bits = plen > 32 * i ? plen - 32 * i : 0;
        if (bits < 32)
            addr[i] &= bits ? bpf_htonl(~0u << (32 - bits)) : 0;
    }
}

static __always_inline void tc_flow_key_of(const struct tc_policy *pol, const struct tc_pkt *p,
                                           struct tc_flow_key *fk) {
    __builtin_memset(fk, 0, sizeof(*fk));
    fk->policy_id = pol->policy_id;
    if (pol->per == TC_PER_SRC || pol->per == TC_PER_5TUPLE)
        __builtin_memcpy(fk->src, p->key.src, 16);
    if (pol->per == TC_PER_DST || pol->per == TC_PER_5TUPLE)
        __builtin_memcpy(fk->dst, p->key.dst, 16);
    if (pol->per == TC_PER_SRC)
        tc_mask_prefix(fk->src, p->key.flags & TC_KEY_F_IPV6 ? pol->prefix6 : 96 + pol->prefix4);
    if (pol->per == TC_PER_DST)
        tc_mask_prefix(fk->dst, p->key.flags & TC_KEY_F_IPV6 ? pol->prefix6 : 96 + pol->prefix4);
    if (pol->per == TC_PER_5TUPLE) {
        fk->proto = p->key.proto;
        fk->sport = p->key.sport;
        fk->dport = p->key.dport;
    }
}

/* The bucket pair the packet is metered in; NULL only if a map lookup failed. */
static __always_inline struct tc_flow *
tc_flow_find(const struct tc_policy *pol, const struct tc_pkt *p, struct tc_global_counters *g) {
    __u32 id = pol->policy_id;
    struct tc_flow_key fk;
    struct tc_flow *f;

    if (pol->per == TC_PER_AGGREGATE)
        return bpf_map_lookup_elem(&tc_policy_state, &id);
    tc_flow_key_of(pol, p, &fk);
    f = bpf_map_lookup_elem(&tc_flows, &fk);
    if (f)
        return f;
    struct tc_flow fresh = {}; /* not started: buckets fill at its first packet, under the lock */
    long err = bpf_map_update_elem(&tc_flows, &fk, &fresh, BPF_NOEXIST);
    if (err == 0 || err == -17 /* EEXIST: another CPU created it */) {
        f = bpf_map_lookup_elem(&tc_flows, &fk);
        if (f)
            return f;
    }
    if (g)
        g->table_full++;
    return bpf_map_lookup_elem(&tc_policy_state, &id);
}

struct tc_lock_ctx {
    struct tc_flow *flow;
    int held;
};

static long tc_lock_try(__u32 index, void *arg) {
    struct tc_lock_ctx *ctx = arg;

    if (__sync_val_compare_and_swap(&ctx->flow->lock, 0, 1) == 0) {
        ctx->held = 1;
        return 1; /* stop the loop */
    }
    return 0;
}

/* One inline attempt, the uncontended case; bpf_loop spins for the rest, because a plain bounded
 * loop is walked by the verifier once per iteration on every path. */
static __always_inline int tc_flow_lock(struct tc_flow *f) {
    if (__sync_val_compare_and_swap(&f->lock, 0, 1) == 0)
        return 1;
    struct tc_lock_ctx ctx = {.flow = f, .held = 0};
    bpf_loop(TC_LOCK_SPINS, tc_lock_try, &ctx, 0);
    return ctx.held;
}

static __always_inline void tc_flow_unlock(struct tc_flow *f) {
    __sync_lock_test_and_set(&f->lock, 0);
}

/* Colours a packet of @len metered units with incoming colour @in_color, and counts it in the
 * flow. Returns enum tc_color. */
static __always_inline __u32 tc_flow_meter(const struct tc_policy *pol, struct tc_flow *f,
                                           __u32 len, __u32 in_color,
                                           struct tc_global_counters *g) {
    __u32 color;

    if (!tc_flow_lock(f)) {
        if (g)
            g->lock_timeouts++;
        return TC_RED; /* never admit what the meter could not check */
    }
    __u64 now = tc_now_ns();
    if (!(f->flags & TC_FLOW_F_STARTED)) {
        tc_meter_start(&pol->meter, &f->meter, now);
        f->flags |= TC_FLOW_F_STARTED;
    }
    color = tc_meter_mark(&pol->meter, &f->meter, now, len, in_color);
    if (color < TC_NR_COLORS) {
        f->counters.packets[color]++;
        f->counters.bytes[color] += len;
    }
    tc_flow_unlock(f);
    return color;
}

#endif /* TRICOLOR_FLOW_H */
