/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* flow.h: finding a packet's bucket pair and metering under its lock.
 * The lock is a word in the map value taken with cmpxchg and released with xchg (a plain store
 * on x86, flow_unlock): bpf_spin_lock is refused in LRU maps and costs more here, and a bounded
 * spin lets a packet that cannot get the lock (a holder stalled by an interrupt for
 * microseconds) be coloured red rather than admitted unmetered. chain.h reads the clock before
 * the lock (edt.h under it), and the meter ignores a time before the bucket's last. Metering
 * under the locks is in chain.h. */
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

/* The flow table's layout, from tcm_flow_meta (datapath_load.cpp), frozen at load. */
const volatile __u32 tcm_slot_count = 256;
const volatile __u32 tcm_slot_shift = 8;
const volatile __u32 tcm_slot_capacity = 204;
const volatile __u32 tcm_slot_seed[TCM_SLOT_SEED_WORDS] = {};

/* The layout of the table of slots of before a resize (tcm_flow_slots_prev), set at load with
 * TCM_MOVING_SLOTS. */
const volatile __u32 tcm_prev_slot_count = 256;
const volatile __u32 tcm_prev_slot_shift = 8;
const volatile __u32 tcm_prev_slot_seed[TCM_SLOT_SEED_WORDS] = {};

/* Whether slot @s holds the flow @id: head and words, compared without a branch per word. */
static __always_inline int flow_slot_holds(const struct tcm_flow_slot *s,
                                           const struct tcm_flow_id *id) {
    return ((s->id.head ^ id->head) | (s->id.w[0] ^ id->w[0]) | (s->id.w[1] ^ id->w[1]) |
            (s->id.w[2] ^ id->w[2]) | (s->id.w[3] ^ id->w[3])) == 0;
}

/* Writes @id into slot @s, its words first and its head last (xchg: a full barrier), so that a
 * packet that finds the head finds the words. */
static __always_inline void flow_slot_publish(struct tcm_flow_slot *s,
                                              const struct tcm_flow_id *id) {
    s->id.w[0] = id->w[0];
    s->id.w[1] = id->w[1];
    s->id.w[2] = id->w[2];
    s->id.w[3] = id->w[3];
    __sync_lock_test_and_set(&s->id.head, id->head);
}

/* The slot of @id's flow, or -1: the slots from its home on, to the first empty one. No lock:
 * a slot's id is written before its head is set to the flow's, and a deleted flow's slot is
 * taken by another only once no packet can still hold it (tricolor_abi.h). (The loads of head
 * and words are not ordered on a weakly ordered CPU, BPF having no load-acquire before Linux
 * 6.15: there, a slot deleted, freed and taken again by a flow of the same head within one
 * lookup could be matched with the old words. x86 keeps loads in order.) A bounded loop, not
 * unrolled: its callers are global functions, each verified once. */
static __always_inline int flow_slot_lookup(const struct tcm_flow_id *id) {
    __u32 idx = TCM_SLOT_HOME(id, tcm_slot_seed, tcm_slot_count, tcm_slot_shift);

    for (__u32 i = 0; i < TCM_FLOW_PROBES; i++, idx = TCM_SLOT_NEXT(idx, tcm_slot_count)) {
        struct tcm_flow_slot *s = bpf_map_lookup_elem(&tcm_flow_slots, &idx);
        if (!s)
            return -1;
        if (s->id.head == TCM_SLOT_EMPTY)
            return -1;
        if (flow_slot_holds(s, id))
            return (int)idx;
    }
    return -1;
}

/* flow_slot_lookup as a global function, for a program that finds a flow on one of many paths
 * (sock_ops, shape.h): its loop of TCM_FLOW_PROBES probes is then verified once, not once per
 * path that reaches it. */
__attribute__((noinline)) int flow_slot_find(const struct tcm_flow_id *id) {
    return id ? flow_slot_lookup(id) : -1;
}

/* The flow in slot @got (flow_slot_lookup's, or flow_slot_get's, result): NULL unless @got is a
 * slot's index. */
static __always_inline struct tcm_flow *flow_slot_flow(int got) {
    if (got < 0)
        return NULL;
    __u32 idx = (__u32)got;
    struct tcm_flow_slot *s = bpf_map_lookup_elem(&tcm_flow_slots, &idx);
    return s ? &s->flow : NULL;
}

/* What flow_slot_get returns when it finds no slot (a slot's index otherwise). */
enum tcm_slot_miss {
    TCM_SLOT_FULL = -1,    /* the table holds its capacity, or the probes found no free slot */
    TCM_SLOT_STUCK = -2,   /* a lock could not be had: the guard, or a flow's of before */
    TCM_SLOT_ERROR = -3,   /* a map lookup failed */
    TCM_SLOT_NEW = -4,     /* flow_slot_get: not there; flow_slot_create makes it */
    TCM_SLOT_SPILLED = -5, /* in the table of a growth under way (tcm_flow_spill), by its id in
                            * tcm_slot_key: flow_spilled finds it */
};

/* Which tables of before hold flows that move at their next packet (TCM_MOVING_*). Set at load;
 * 0 removes the branches (the verifier knows .rodata). */
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
    TCM_MOVE_NONE = 0,  /* in no table of before: a new flow */
    TCM_MOVE_DONE = 1,  /* moved into the slot, which is published and still locked */
    TCM_MOVE_STUCK = 2, /* its lock could not be had: the aggregate bucket */
};

/* Moves the flow of @key under @pol, @id, out of a table of before if it is there, into @s, a
 * slot claimed for it: under the old entry's lock, which the program of before takes too, its
 * state is copied into the slot still locked, the slot is published, the old entry is marked
 * moved (a program of before, still running on another CPU for a moment after the swap, then
 * cannot lock it and colours its packet red) and deleted; the caller unlocks the slot. Every
 * packet is thus metered in one place: nothing lost, nothing given twice. A global function, the
 * old key in a per-CPU scratch slot, as hot_note (hot.h). Returns enum tcm_move_result. */
__attribute__((noinline)) int flow_move_old(const struct tcm_policy *pol,
                                            const struct tcm_class_key *key,
                                            struct tcm_flow_slot *s) {
    __u32 zero = 0;
    if (!pol || !key || !s)
        return TCM_MOVE_NONE;
    /* The id flow_slot_create filled, as a map key: a map value is one on Linux 6.1 too, where
     * a pointer passed to a global function is not. */
    struct tcm_slot_scratch *sk = bpf_map_lookup_elem(&tcm_slot_key, &zero);
    if (!sk)
        return TCM_MOVE_NONE;
    struct tcm_flow_id *id = &sk->id;
    struct tcm_flow_key *ok = NULL;
    struct tcm_flow *old = NULL;
    if ((tcm_flows_moving & TCM_MOVING_SLOTS) && sk->prev >= 0) {
        void *before = bpf_map_lookup_elem(&tcm_flow_slots_prev, &zero);
        struct tcm_flow_slot *ps = before ? bpf_map_lookup_elem(before, &sk->prev_idx) : NULL;
        if (ps)
            old = &ps->flow;
    }
    if (!old && (tcm_flows_moving & TCM_MOVING_PREV)) {
        old = bpf_map_lookup_elem(&tcm_flows_prev, id);
        /* Moved already, and since reclaimed from the slots: not the flow (as flow_prev_scan
         * says of a slot). The entry stays, moved, while programs of before may run: one of
         * them finding it gone would make the flow anew there (tcm_flow_spill). */
        if (old && old->lock == TCM_FLOW_MOVED)
            old = NULL;
    }
    if (!old && (tcm_flows_moving & TCM_MOVING_OLD)) {
        ok = bpf_map_lookup_elem(&tcm_tuple_key, &zero);
        if (!ok)
            return TCM_MOVE_NONE;
        __builtin_memset(ok, 0, sizeof(*ok));
        flow_old_key_fill(pol, key, ok);
        old = bpf_map_lookup_elem(&tcm_flows_old, ok);
    }
    if (!old)
        return TCM_MOVE_NONE;
    /* One attempt, no spin: the lock is held only by a packet of the program of before, for a
     * moment, while the programs are swapped; this packet then goes to the aggregate bucket and
     * the flow moves at the next. (A bpf_loop here would cost a frame that a chain on Linux 6.1,
     * which counts every frame as at least 32 bytes, cannot spare.) Moved (TCM_FLOW_MOVED): by
     * a program of before, from tcm_flows_old into what is tcm_flows_prev now, after this
     * packet looked there; the next packet finds it there. */
    if (__sync_val_compare_and_swap(&old->lock, 0, 1) != 0)
        return TCM_MOVE_STUCK;
    /* The copy holds the lock word 1, as the old entry does now: ours until the caller's. */
    s->flow = *old;
    flow_slot_publish(s, id);
    __sync_lock_test_and_set(&old->lock, TCM_FLOW_MOVED);
    /* A slot of before, or an entry of tcm_flows_prev, stays as it is, moved: its table goes
     * whole once every flow has (user space deletes such entries once no program of before
     * runs). */
    if (ok)
        bpf_map_delete_elem(&tcm_flows_old, ok);
    return TCM_MOVE_DONE;
}

/* A new flow's value, all zero, in .rodata: 80 bytes of a stack a chain already strains. */
const volatile struct tcm_flow tcm_flow_fresh = {};

struct tcm_guard_ctx {
    __u32 *guard;
};

/* One attempt at the guard, but none at the last index: bpf_loop then returns fewer than
 * TCM_LOCK_SPINS runs exactly when the guard was had (no result word beside the pointer: the
 * context is on a stack that has no room to spare). */
static long flow_guard_try(__u32 index, void *arg) {
    struct tcm_guard_ctx *ctx = arg;

    if (index + 1 >= TCM_LOCK_SPINS)
        return 1;
    return __sync_val_compare_and_swap(ctx->guard, 0, 1) == 0;
}

/* One probe of flow_slot_create's scan under the guard, on its scratch state (tcm_slot_key):
 * the slot of the flow if another packet made it meanwhile (found), else the first free slot
 * of the probe sequence, claimed with a cmpxchg on its head (another home's creator may want it
 * too). A bpf_loop callback, verified once whatever TCM_FLOW_PROBES is (a bounded loop is
 * walked once per probe, which took Linux 6.1's count for the tc program past its million
 * with clang 16 and 17 at 128 probes), its state in the scratch (Linux 6.1 counts each frame as
 * a multiple of 32 bytes: flow_slot_create's has no room for more). 1 ends the scan. */
static long flow_scan_step(__u32 index, void *arg) {
    __u32 zero = 0;
    struct tcm_slot_scratch *sk = bpf_map_lookup_elem(&tcm_slot_key, &zero);
    if (!sk)
        return 1;
    struct tcm_flow_slot *s = bpf_map_lookup_elem(&tcm_flow_slots, &sk->idx);
    if (!s)
        return 1;
    __u32 head = s->id.head;
    if (flow_slot_holds(s, &sk->id)) {
        sk->found = (int)sk->idx;
        return 1;
    }
    if (sk->claimed < 0 && (head == TCM_SLOT_EMPTY || head == TCM_SLOT_FREE) &&
        __sync_val_compare_and_swap(&s->id.head, head, TCM_SLOT_CLAIMED) == head)
        sk->claimed = (int)sk->idx;
    /* Nothing of this home lies beyond a slot that was empty (another's claim of it since
     * changes nothing: ours is excluded by the guard). */
    if (head == TCM_SLOT_EMPTY)
        return 1;
    sk->idx = TCM_SLOT_NEXT(sk->idx, tcm_slot_count);
    return 0;
}

static __always_inline void flow_slot_scan(struct tcm_slot_scratch *sk) {
    sk->found = -1;
    sk->claimed = -1;
    sk->idx = sk->home;
    bpf_loop(TCM_FLOW_PROBES, flow_scan_step, NULL, 0);
}

/* One probe for the flow being made (tcm_slot_key's id) in the table of slots of before a
 * resize, under that table's layout, into the scratch's prev (-1: not there). Under the new
 * home's guard, as flow_scan_step: user space moving the same flow takes that guard too. A
 * bpf_loop callback, for the same reasons. */
static long flow_prev_step(__u32 index, void *arg) {
    __u32 zero = 0;
    struct tcm_slot_scratch *sk = bpf_map_lookup_elem(&tcm_slot_key, &zero);
    void *before = bpf_map_lookup_elem(&tcm_flow_slots_prev, &zero);
    if (!sk || !before)
        return 1;
    struct tcm_flow_slot *s = bpf_map_lookup_elem(before, &sk->prev_idx);
    if (!s || s->id.head == TCM_SLOT_EMPTY)
        return 1;
    /* Moved already (and since reclaimed from the slots, or this would not be asked): not
     * there, or its next packet would wait on a lock no one releases. */
    if (flow_slot_holds(s, &sk->id)) {
        if (s->flow.lock != TCM_FLOW_MOVED)
            sk->prev = (int)sk->prev_idx;
        return 1;
    }
    sk->prev_idx = TCM_SLOT_NEXT(sk->prev_idx, tcm_prev_slot_count);
    return 0;
}

static __always_inline void flow_prev_scan(struct tcm_slot_scratch *sk) {
    sk->prev = -1;
    sk->prev_idx =
        TCM_SLOT_HOME(&sk->id, tcm_prev_slot_seed, tcm_prev_slot_count, tcm_prev_slot_shift);
    bpf_loop(TCM_FLOW_PROBES, flow_prev_step, NULL, 0);
}

#ifndef EEXIST
#define EEXIST 17 /* the kernel's errno, as bpf_map_update_elem returns it */
#endif

/* flow_slot_create's flow (tcm_slot_key's id) in the table of a growth under way: found there,
 * or, if @make (the table has no room for it), made there fresh. TCM_SLOT_SPILLED, TCM_SLOT_NEW
 * (not there, not made) or TCM_SLOT_FULL (no growth under way, or its table is full too). Two
 * packets of one new flow on two CPUs make it once: the insert is the hash map's, BPF_NOEXIST,
 * and the second finds the first's. A global function of its own: flow_slot_create's frame
 * stays as it was. */
__attribute__((noinline)) int flow_spill_get(int make) {
    __u32 zero = 0;
    struct tcm_slot_scratch *sk = bpf_map_lookup_elem(&tcm_slot_key, &zero);
    void *spill = bpf_map_lookup_elem(&tcm_flow_spill, &zero);
    if (!sk || !spill)
        return TCM_SLOT_FULL;
    if (bpf_map_lookup_elem(spill, &sk->id))
        return TCM_SLOT_SPILLED;
    if (!make)
        return TCM_SLOT_NEW;
    long err = bpf_map_update_elem(spill, &sk->id, (const void *)&tcm_flow_fresh, BPF_NOEXIST);
    return err == 0 || err == -EEXIST ? TCM_SLOT_SPILLED : TCM_SLOT_FULL;
}

/* Creates the flow of @key under @pol, which flow_slot_get did not find: under its home slot's
 * guard (two packets of one new flow on two CPUs: the second finds what the first created),
 * looks again, then takes the first free slot of the probe sequence (a cmpxchg on its head:
 * another home's creator may want it too) and fills it with the flow moved from a table of
 * before, or a fresh one (buckets fill at its first packet, under the lock), and publishes it.
 * Returns the slot's index or enum tcm_slot_miss. A global function, verified once. Its state
 * is in a per-CPU scratch slot (tcm_slot_key), not on its stack: on Linux 6.1 a chain's frames,
 * each counted as 32 bytes at least, leave this one and those it calls 96 bytes. */
__attribute__((noinline)) int flow_slot_create(const struct tcm_policy *pol,
                                               const struct tcm_class_key *key) {
    __u32 zero = 0;
    if (!pol || !key)
        return TCM_SLOT_ERROR;
    struct tcm_slot_scratch *sk = bpf_map_lookup_elem(&tcm_slot_key, &zero);
    if (!sk)
        return TCM_SLOT_ERROR;
    __builtin_memset(&sk->id, 0, sizeof(sk->id));
    if (flow_key_of(pol, key, &sk->id) < 0)
        return TCM_SLOT_ERROR;
    sk->home = TCM_SLOT_HOME(&sk->id, tcm_slot_seed, tcm_slot_count, tcm_slot_shift);
    struct tcm_flow_slot *hs = bpf_map_lookup_elem(&tcm_flow_slots, &sk->home);
    if (!hs)
        return TCM_SLOT_ERROR;
    if (__sync_val_compare_and_swap(&hs->guard, 0, 1) != 0) {
        struct tcm_guard_ctx g = {.guard = &hs->guard};
        if (bpf_loop(TCM_LOCK_SPINS, flow_guard_try, &g, 0) >= TCM_LOCK_SPINS)
            return TCM_SLOT_STUCK;
    }
    flow_slot_scan(sk);
    /* A growth under way: a flow made in its table while this one had no room is there, not
     * here, though this one may have room again (flows reclaimed). Made there only when this
     * one has none (below). */
    const int spilled = sk->found < 0 ? flow_spill_get(0) : TCM_SLOT_FULL;
    if ((tcm_flows_moving & TCM_MOVING_SLOTS) && sk->found < 0 && sk->claimed >= 0 &&
        spilled != TCM_SLOT_SPILLED)
        flow_prev_scan(sk);
    /* A slot claimed but not used is freed again, never emptied: another home's flow may have
     * been placed beyond it meanwhile, which an empty slot would hide. */
    int ret = sk->found, release = sk->found >= 0 ? sk->claimed : -1;
    if (spilled == TCM_SLOT_SPILLED) {
        ret = TCM_SLOT_SPILLED;
        release = sk->claimed;
    } else if (sk->found < 0 && sk->claimed < 0) {
        ret = spilled == TCM_SLOT_NEW ? flow_spill_get(1) : TCM_SLOT_FULL;
    } else if (sk->found < 0) {
        struct tcm_flow_meta *meta = bpf_map_lookup_elem(&tcm_flow_meta, &zero);
        struct tcm_flow_slot *s = bpf_map_lookup_elem(&tcm_flow_slots, &sk->claimed);
        ret = TCM_SLOT_FULL;
        release = sk->claimed;
        if (!s || !meta) {
            ret = TCM_SLOT_ERROR;
        } else if (__sync_fetch_and_add(&meta->live, 1) >= tcm_slot_capacity) {
            __sync_fetch_and_add(&meta->live, -1);
            if (spilled == TCM_SLOT_NEW)
                ret = flow_spill_get(1);
        } else {
            int moved = tcm_flows_moving ? flow_move_old(pol, key, s) : TCM_MOVE_NONE;
            if (moved == TCM_MOVE_STUCK) {
                __sync_fetch_and_add(&meta->live, -1);
                ret = TCM_SLOT_STUCK;
            } else {
                if (moved == TCM_MOVE_DONE) {
                    __sync_lock_test_and_set(&s->flow.lock, 0);
                } else {
                    s->flow = *(const struct tcm_flow *)&tcm_flow_fresh;
                    flow_slot_publish(s, &sk->id);
                }
                ret = sk->claimed;
                release = -1;
            }
        }
    }
    if (release >= 0) {
        sk->idx = (__u32)release;
        struct tcm_flow_slot *s = bpf_map_lookup_elem(&tcm_flow_slots, &sk->idx);
        if (s)
            __sync_lock_test_and_set(&s->id.head, TCM_SLOT_FREE);
    }
    hs = bpf_map_lookup_elem(&tcm_flow_slots, &sk->home);
    if (hs)
        __sync_lock_test_and_set(&hs->guard, 0);
    if (ret >= 0 && sk->found < 0 && TCM_FLOW_KIND(sk->id.head) == TCM_FLOW_5TUPLE6)
        flow_note_tuple(key, &sk->id);
    return ret;
}

/* The slot of the packet's flow under @pol (per key): its index, TCM_SLOT_NEW if there is none,
 * or TCM_SLOT_ERROR. A global function: a chain finds up to TCM_MAX_LEVELS flows, and the
 * verifier then checks the (mode, family, four prefix words) paths and the probes once rather
 * than once per level and per path. flow_find calls flow_slot_create on a miss, not this: the
 * two frames together would not fit under a chain's. */
__attribute__((noinline)) int flow_slot_get(const struct tcm_policy *pol,
                                            const struct tcm_class_key *key) {
    struct tcm_flow_id id;

    if (!pol || !key)
        return TCM_SLOT_ERROR;
    __builtin_memset(&id, 0, sizeof(id));
    if (flow_id_fill(pol, key, &id) < 0)
        return TCM_SLOT_ERROR;
    int idx = flow_slot_lookup(&id);
    return idx >= 0 ? idx : TCM_SLOT_NEW;
}

/* The bucket pair the packet is metered in; NULL only if a map lookup failed. A new flow that
 * finds no room, or a lock it cannot have, is metered in the policy's aggregate bucket (counted):
 * policed, never given a new burst, never passed unmetered. */
static __always_inline struct tcm_flow *flow_find_in(const struct tcm_policy *pol,
                                                     const struct tcm_class_key *key,
                                                     struct tcm_global_counters *g, __u32 *agg,
                                                     const int spill) {
    __u32 id = pol->policy_id;

    *agg = 1; /* the policy's aggregate bucket, unless a flow's is found */
    if (pol->per == TCM_PER_AGGREGATE)
        return bpf_map_lookup_elem(&tcm_policy_state, &id);
    int got = flow_slot_get(pol, key);
    if (got == TCM_SLOT_NEW) {
        got = flow_slot_create(pol, key);
        if (spill && got == TCM_SLOT_SPILLED) {
            __u32 zero = 0;
            struct tcm_slot_scratch *sk = bpf_map_lookup_elem(&tcm_slot_key, &zero);
            void *table = bpf_map_lookup_elem(&tcm_flow_spill, &zero);
            struct tcm_flow *f = sk && table ? bpf_map_lookup_elem(table, &sk->id) : NULL;
            if (f) {
                *agg = 0;
                return f;
            }
            got = TCM_SLOT_FULL; /* made and gone at once: a moment's race with user space */
        }
    }
    if (got >= 0) {
        __u32 idx = (__u32)got;
        struct tcm_flow_slot *s = bpf_map_lookup_elem(&tcm_flow_slots, &idx);
        *agg = 0;
        return s ? &s->flow : NULL;
    }
    if (got == TCM_SLOT_ERROR)
        return NULL;
    if (g) {
        if (got == TCM_SLOT_STUCK)
            g->lock_timeouts++;
        else
            g->table_full++;
    }
    return bpf_map_lookup_elem(&tcm_policy_state, &id);
}

/* The level of a chain, or a chain's level 0 (the packet's own policy), that may take a flow
 * made in the table of a growth under way (TCM_SLOT_SPILLED): a third kind of bucket pointer,
 * which the verifier walks the rest of the chain with, so at the packet's own level only (a
 * parent level's new flow finds its policy's bucket while the table is full, as before). */
#define flow_find(pol, key, g, agg) flow_find_in(pol, key, g, agg, 0)
#define flow_find_own(pol, key, g, agg) flow_find_in(pol, key, g, agg, 1)

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

/* Set at load on a CPU whose stores are never reordered with its earlier loads and stores (x86,
 * TSO): there a plain store releases a lock, as the kernel's own spin unlock does, and the
 * locked xchg, a full barrier that waits for the critical section's stores to drain, is a
 * second atomic per packet that a bpf_spin_lock meter does not pay (docs/datapath.md, "Where
 * the time went"). Elsewhere (arm64 before BPF had store-release) the xchg stays. */
const volatile __u8 tcm_store_release = 0;

static __always_inline void flow_unlock(struct tcm_flow *f) {
    if (tcm_store_release) {
        /* The critical section's loads and stores stay before the store (compiler barrier;
         * the JIT emits them in order and the CPU keeps that order). */
        asm volatile("" ::: "memory");
        *(volatile __u32 *)&f->lock = 0;
    } else {
        __sync_lock_test_and_set(&f->lock, 0);
    }
}

#endif /* TRICOLOR_FLOW_H */
