/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* flow.h: finding a packet's bucket pair and metering under its lock.
 * The lock is a word in the map value taken with cmpxchg and released with xchg: bpf_spin_lock
 * is refused in LRU maps and costs more here, and a bounded spin lets a packet that cannot get
 * the lock (a holder stalled by an interrupt for microseconds) be coloured red rather than
 * admitted unmetered. The clock is read inside the critical section, so holders of one flow see
 * non-decreasing times. Metering under the locks is in chain.h. */
#ifndef TRICOLOR_FLOW_H
#define TRICOLOR_FLOW_H

#include "maps.h"
#include "meter.h"
#include "clock.h"
#include "parse.h"

static __always_inline void flow_mask_prefix(__u32 *addr, __u32 plen) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __u32 bits = plen > 32 * i ? plen - 32 * i : 0;
        if (bits < 32)
            addr[i] &= bits ? bpf_htonl(~0u << (32 - bits)) : 0;
    }
}

/* Fills @id, zeroed by the caller, with what the policy's `per` keeps of the packet
 * (tcm_flow_id has the layout of each kind). */
static __always_inline int flow_id_fill(const struct tcm_policy *pol,
                                        const struct tcm_class_key *key, struct tcm_flow_id *id) {
    if (!pol || !key || !id)
        return -1;
    __u32 v6 = key->flags & TCM_KEY_F_IPV6, zero = 0;
    switch (pol->per) {
    case TCM_PER_SRC:
        id->head = TCM_FLOW_HEAD(pol->policy_id, TCM_FLOW_SRC);
        __builtin_memcpy(id->w, key->src, 16);
        flow_mask_prefix(id->w, v6 ? pol->prefix6 : 96 + pol->prefix4);
        break;
    case TCM_PER_DST:
        id->head = TCM_FLOW_HEAD(pol->policy_id, TCM_FLOW_DST);
        __builtin_memcpy(id->w, key->dst, 16);
        flow_mask_prefix(id->w, v6 ? pol->prefix6 : 96 + pol->prefix4);
        break;
    case TCM_PER_5TUPLE:
        if (!v6) {
            id->head = TCM_FLOW_HEAD(pol->policy_id, TCM_FLOW_5TUPLE4);
            id->w[0] = key->src[3];
            id->w[1] = key->dst[3];
            id->w[2] = key->sport | (__u32)key->dport << 16;
            id->w[3] = key->proto;
        } else {
            /* 37 bytes do not fit: a keyed hash of them (tricolor_abi.h). */
            struct tcm_flow_seed *seed = bpf_map_lookup_elem(&tcm_flow_seed, &zero);
            if (!seed)
                return -1;
#define FLOW_TUPLE_WORD(i) TCM_FLOW_TUPLE_WORD(key, i)
            id->head = TCM_FLOW_HEAD(pol->policy_id, TCM_FLOW_5TUPLE6);
            tcm_flow_hash6(FLOW_TUPLE_WORD, seed->k, id->w);
#undef FLOW_TUPLE_WORD
        }
        break;
    case TCM_PER_CGROUP: {
        __u64 *bucket = bpf_map_lookup_elem(&tcm_cgroup_bucket, &zero);
        id->head = TCM_FLOW_HEAD(pol->policy_id, TCM_FLOW_CGROUP);
        if (bucket) {
            id->w[0] = (__u32)*bucket;
            id->w[1] = (__u32)(*bucket >> 32);
        }
        break;
    }
    }
    return 0;
}

/* flow_id_fill as a global function: a chain meters up to TCM_MAX_LEVELS keys, and the
 * verifier then checks the (mode, family, four prefix words) paths once rather than once per
 * level and per path. */
__attribute__((noinline)) int flow_key_of(const struct tcm_policy *pol,
                                          const struct tcm_class_key *key, struct tcm_flow_id *id) {
    return flow_id_fill(pol, key, id);
}

/* Keeps the IPv6 5-tuple of a flow just created under @id for user space (tcm_flow_tuples):
 * its key is a hash. A global function, its tuple built in a per-CPU scratch slot, as hot_note
 * (hot.h) and for the same reason: the deepest frame of a chain has no room for it. */
__attribute__((noinline)) int flow_note_tuple(const struct tcm_class_key *key,
                                              const struct tcm_flow_id *id) {
    __u32 zero = 0;
    if (!key || !id)
        return 0;
    struct tcm_flow_key *t = bpf_map_lookup_elem(&tcm_tuple_key, &zero);
    if (!t)
        return 0;
    struct tcm_flow_id k = *id; /* a map key from the stack: Linux 6.1 wants one */
    t->policy_id = TCM_FLOW_POLICY(k.head);
    t->proto = key->proto;
    t->pad = 0;
    t->sport = key->sport;
    t->dport = key->dport;
    t->pad2 = 0;
    __builtin_memcpy(t->src, key->src, 16);
    __builtin_memcpy(t->dst, key->dst, 16);
    bpf_map_update_elem(&tcm_flow_tuples, &k, t, BPF_ANY);
    return 0;
}

/* 1: tcm_flows_old is the pinned table of before, whose flows move at their next packet. Set at
 * load; 0 removes the branch (the verifier knows .rodata). */
const volatile __u8 tcm_flows_moving = 0;

/* Fills @fk, zeroed by the caller, with the flow's key in tcm_flows_old: the whole
 * tcm_flow_key, as the data path of before keyed its table. */
static __always_inline void flow_old_key_fill(const struct tcm_policy *pol,
                                              const struct tcm_class_key *key,
                                              struct tcm_flow_key *fk) {
    __u32 v6 = key->flags & TCM_KEY_F_IPV6, zero = 0;
    fk->policy_id = pol->policy_id;
    switch (pol->per) {
    case TCM_PER_SRC:
        __builtin_memcpy(fk->src, key->src, 16);
        flow_mask_prefix(fk->src, v6 ? pol->prefix6 : 96 + pol->prefix4);
        break;
    case TCM_PER_DST:
        __builtin_memcpy(fk->dst, key->dst, 16);
        flow_mask_prefix(fk->dst, v6 ? pol->prefix6 : 96 + pol->prefix4);
        break;
    case TCM_PER_5TUPLE:
        __builtin_memcpy(fk->src, key->src, 16);
        __builtin_memcpy(fk->dst, key->dst, 16);
        fk->proto = key->proto;
        fk->sport = key->sport;
        fk->dport = key->dport;
        break;
    case TCM_PER_CGROUP: {
        __u64 *bucket = bpf_map_lookup_elem(&tcm_cgroup_bucket, &zero);
        if (bucket) {
            fk->src[0] = (__u32)*bucket;
            fk->src[1] = (__u32)(*bucket >> 32);
        }
        break;
    }
    }
}

enum tcm_move_result {
    TCM_MOVE_NONE = 0,  /* not in tcm_flows_old: a new flow */
    TCM_MOVE_DONE = 1,  /* in tcm_flows now, moved here or by another CPU */
    TCM_MOVE_STUCK = 2, /* its lock could not be had, or tcm_flows is full: the aggregate bucket */
};

struct tcm_move_ctx {
    struct tcm_flow *old;
    __u32 seen; /* the lock word the last attempt found */
};

static long flow_move_try(__u32 index, void *arg) {
    struct tcm_move_ctx *ctx = arg;

    ctx->seen = __sync_val_compare_and_swap(&ctx->old->lock, 0, 1);
    return ctx->seen != 1; /* stop once it was free (now ours) or moved */
}

/* Moves the flow of @key under @pol, @id in tcm_flows, out of tcm_flows_old if it is there:
 * under the old entry's lock, which the program of before takes too, a copy goes into tcm_flows
 * still locked, the old entry is marked moved (a program of before, still running on another
 * CPU for a moment after the swap, then cannot lock it and colours its packet red), and the copy
 * is unlocked. Every packet is thus metered in one place: nothing lost, nothing given twice.
 * A global function, its old key in a per-CPU scratch slot, as hot_note (hot.h). */
__attribute__((noinline)) int flow_move_old(const struct tcm_policy *pol,
                                            const struct tcm_class_key *key,
                                            const struct tcm_flow_id *id) {
    __u32 zero = 0;
    if (!pol || !key || !id)
        return TCM_MOVE_NONE;
    struct tcm_flow_key *ok = bpf_map_lookup_elem(&tcm_tuple_key, &zero);
    if (!ok)
        return TCM_MOVE_NONE;
    __builtin_memset(ok, 0, sizeof(*ok));
    flow_old_key_fill(pol, key, ok);
    struct tcm_flow *old = bpf_map_lookup_elem(&tcm_flows_old, ok);
    if (!old)
        return TCM_MOVE_NONE;
    struct tcm_move_ctx ctx = {.old = old, .seen = 1};
    bpf_loop(TCM_LOCK_SPINS, flow_move_try, &ctx, 0);
    if (ctx.seen == TCM_FLOW_MOVED)
        return TCM_MOVE_DONE;
    if (ctx.seen != 0)
        return TCM_MOVE_STUCK;
    struct tcm_flow_id k = *id; /* a map key from the stack: Linux 6.1 wants one */
    /* The copy holds the lock word 1, as the old entry does now: ours until released below. */
    if (bpf_map_update_elem(&tcm_flows, &k, old, BPF_NOEXIST) != 0) {
        __sync_lock_test_and_set(&old->lock, 0);
        return TCM_MOVE_STUCK;
    }
    struct tcm_flow *f = bpf_map_lookup_elem(&tcm_flows, &k);
    __sync_lock_test_and_set(&old->lock, TCM_FLOW_MOVED);
    bpf_map_delete_elem(&tcm_flows_old, ok);
    if (f)
        __sync_lock_test_and_set(&f->lock, 0);
    /* After the delete: the tuple is built in the scratch slot the old key was. */
    if (TCM_FLOW_KIND(k.head) == TCM_FLOW_5TUPLE6)
        flow_note_tuple(key, &k);
    return TCM_MOVE_DONE;
}

/* A new flow's value, all zero, in .rodata: up to TCM_MAX_LEVELS inlined copies of
 * flow_find would otherwise each want 80 bytes of a stack a chain already strains. */
const volatile struct tcm_flow tcm_flow_fresh = {};

/* The bucket pair the packet is metered in; NULL only if a map lookup failed. */
static __always_inline struct tcm_flow *flow_find(const struct tcm_policy *pol,
                                                  const struct tcm_class_key *key,
                                                  struct tcm_global_counters *g) {
    __u32 id = pol->policy_id;
    struct tcm_flow_id fk;
    struct tcm_flow *f;

    if (pol->per == TCM_PER_AGGREGATE)
        return bpf_map_lookup_elem(&tcm_policy_state, &id);
    __builtin_memset(&fk, 0, sizeof(fk));
    if (flow_key_of(pol, key, &fk) < 0)
        return NULL;
    f = bpf_map_lookup_elem(&tcm_flows, &fk);
    if (f)
        return f;
    if (tcm_flows_moving) {
        int moved = flow_move_old(pol, key, &fk);
        if (moved == TCM_MOVE_DONE) {
            f = bpf_map_lookup_elem(&tcm_flows, &fk);
            if (f)
                return f;
        }
        if (moved != TCM_MOVE_NONE) {
            if (g)
                g->lock_timeouts++;
            return bpf_map_lookup_elem(&tcm_policy_state, &id);
        }
    }
    /* Not started: buckets fill at its first packet, under the lock. */
    /* The error is compared as an int: before Linux 6.4 the verifier turned this helper into a
     * direct call of the map's update, which returns an int, so the upper half of the 64-bit
     * result is not its sign (-EEXIST arrives as 0x00000000ffffffef). Compared as a long, the
     * loser of two CPUs creating one flow at once would take the table-full path on 6.1. */
    int err = (int)bpf_map_update_elem(&tcm_flows, &fk, (const void *)&tcm_flow_fresh, BPF_NOEXIST);
    if (err == 0 && TCM_FLOW_KIND(fk.head) == TCM_FLOW_5TUPLE6)
        flow_note_tuple(key, &fk);
    if (err == 0 || err == -17 /* EEXIST: another CPU created it */) {
        f = bpf_map_lookup_elem(&tcm_flows, &fk);
        if (f)
            return f;
    }
    if (g)
        g->table_full++;
    return bpf_map_lookup_elem(&tcm_policy_state, &id);
}

struct tcm_lock_ctx {
    struct tcm_flow *flow;
    int held;
};

static long flow_lock_try(__u32 index, void *arg) {
    struct tcm_lock_ctx *ctx = arg;

    if (__sync_val_compare_and_swap(&ctx->flow->lock, 0, 1) == 0) {
        ctx->held = 1;
        return 1; /* stop the loop */
    }
    return 0;
}

/* One inline attempt, the uncontended case; bpf_loop spins for the rest, because a plain bounded
 * loop is walked by the verifier once per iteration on every path. */
static __always_inline int flow_lock(struct tcm_flow *f) {
    if (__sync_val_compare_and_swap(&f->lock, 0, 1) == 0)
        return 1;
    struct tcm_lock_ctx ctx = {.flow = f, .held = 0};
    bpf_loop(TCM_LOCK_SPINS, flow_lock_try, &ctx, 0);
    return ctx.held;
}

static __always_inline void flow_unlock(struct tcm_flow *f) {
    __sync_lock_test_and_set(&f->lock, 0);
}

#endif /* TRICOLOR_FLOW_H */
