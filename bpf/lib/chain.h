/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* chain.h: metering a packet up its policy's chain of parents (docs/spec.md §9), all or nothing,
 * and counting it at every level: each level decides at one instant, each parent colour-aware on
 * the colour from below, and tokens are taken only if the packet does not end red. Locks are
 * taken child to parent, one order on every CPU. A policy without parents is a chain of one.
 * Why it is shaped so (the scratch pass, the global functions): docs/datapath.md,
 * "Hierarchies". */
#ifndef TRICOLOR_CHAIN_H
#define TRICOLOR_CHAIN_H

#include "flow.h"
#include "hot.h"
#include "aqm.h"
#include "fleet.h"
#include "quota.h"

/* What the pipeline knows of the packet; each level derives its own metered length from it,
 * as its own `length` and `overhead` say (chain_level_len, docs/spec.md §3). */
struct tcm_chain_in {
    __u32 l3_total; /* IP bytes of the whole (possibly GSO) packet */
    __u32 segs;     /* segments it will be */
    __u32 hdr_len;  /* IP + L4 headers, repeated by every segment */
    __u32 l2_len;   /* bytes before the IP header, counted in l2 mode */
    __u32 in_color; /* the matched policy's incoming colour */
    __u32 pad;
};

/* What chain_meter_packet and edt_meter_packet return: the packet's colour (TCM_METER_COLOR)
 * ORed with these bits, or TCM_NR_COLORS when the matched policy's bucket could not be found. */
enum tcm_meter_verdict {
    TCM_METER_COLOR = 0xff,
    TCM_METER_SIGNAL = 0x100,     /* --aqm: this packet carries the early signal (aqm.h) */
    TCM_METER_DELAYED = 0x200,    /* edt_mark gave it a departure time (internal to edt.h) */
    TCM_METER_SHAPE_DROP = 0x400, /* --shape edt: red, and it cannot leave within the horizon */
};
#define TCM_METER_SHAPE_DROP_SHIFT 10 /* pipeline.h turns the bit into a drop without a branch */
_Static_assert(TCM_METER_SHAPE_DROP == 1 << TCM_METER_SHAPE_DROP_SHIFT, "the shift names the bit");

#define TCM_LEVEL_AWARE 0x100u   /* chain_level_mark mode: colour-aware whatever the policy says */
#define TCM_LEVEL_FRESH 0x200u   /* the flow has not started: fill (or empty) its buckets first */
#define TCM_LEVEL_AGG 0x800u     /* chain_level_ext: the bucket is the policy's aggregate */
#define TCM_LEVEL_COMMIT 0x1000u /* chain_ext_level: the packet passed, the copy is taken */
#define TCM_LEVEL_TOUCH 0x2000u  /* chain_ext_level: the packet ended red, the level sees it so */
#define TCM_LEVEL_SLOT_SHIFT 14  /* chain_ext_level: the level's index, its copies' slot */
#define TCM_LEVEL_EXT(pol) ((pol)->meter.flags & (TCM_METER_F_WARM | TCM_METER_F_QUOTA))

/* A level's meter alone on @st: started first if the flow is new (TCM_LEVEL_FRESH), colour-aware
 * under TCM_LEVEL_AWARE. @mode: the incoming colour, ORed with TCM_LEVEL_*. */
static __always_inline int chain_level_step(const struct tcm_policy *pol,
                                            struct tcm_meter_state *st, __u64 now, __u32 len,
                                            __u32 mode) {
    if (mode & TCM_LEVEL_FRESH)
        meter_start(&pol->meter, st, now);
    if (mode & TCM_LEVEL_AWARE)
        return meter_mark_aware(&pol->meter, st, now, len, mode & 0xff);
    return meter_mark(&pol->meter, st, now, len, mode & 0xff);
}

/* Colours one packet at one level on @st, a copy of the level's state, and returns the colour. */
__attribute__((noinline)) int chain_level_mark(const struct tcm_policy *pol,
                                               struct tcm_meter_state *st, __u64 now, __u32 len,
                                               __u32 mode) {
    if (!pol || !st)
        return TCM_RED;
    return chain_level_step(pol, st, now, len, mode);
}

/* A new bucket's tcm_ext_state, all zero, in .rodata (as tcm_flow_fresh). */
const volatile struct tcm_ext_state tcm_ext_fresh = {};

/* The warm-up and quota config of @pol (*@xp; NULL if it has none written) and the state of its
 * bucket for @key (its aggregate's under TCM_LEVEL_AGG in @mode), made at the bucket's first
 * packet; NULL with *@xp set when there is no room for it. @last_ns: the bucket's last packet. */
static __always_inline struct tcm_ext_state *chain_ext_state(const struct tcm_policy *pol,
                                                             const struct tcm_class_key *key,
                                                             struct tcm_ext_scratch *sc,
                                                             __u64 last_ns, __u32 mode,
                                                             const struct tcm_policy_ext **xp) {
    __u32 pid = pol->policy_id;
    const struct tcm_policy_ext *x = bpf_map_lookup_elem(&tcm_policy_ext, &pid);

    *xp = x;
    if (!x)
        return NULL;
    __builtin_memset(&sc->id, 0, sizeof(sc->id));
    if (pol->per == TCM_PER_AGGREGATE || (mode & TCM_LEVEL_AGG))
        sc->id.head = TCM_FLOW_HEAD(pol->policy_id, 0);
    else if (flow_id_fill(pol, key, &sc->id) < 0)
        return NULL;
    struct tcm_ext_state *xs = bpf_map_lookup_elem(&tcm_meter_ext, &sc->id);
    if (!xs) {
        bpf_map_update_elem(&tcm_meter_ext, &sc->id, (const void *)&tcm_ext_fresh, BPF_NOEXIST);
        xs = bpf_map_lookup_elem(&tcm_meter_ext, &sc->id);
        /* A bucket that started without this state (a warm-up or quota given to a running
         * policy; a state the daemon let go as its flow was reclaimed and made again): its
         * tokens stay, and it is warm (a warm-up over at its last packet): cold only after a
         * gap of D, as the spec says. The start D before it (mod 2^64: the warm-up's times are
         * differences from it) makes it so whatever the clock reads. */
        if (xs && !(mode & TCM_LEVEL_FRESH)) {
            xs->started = 1;
            xs->warm.start_ns = last_ns - x->warm.d_ns;
        }
    }
    return xs;
}

/* UTC at @now, for the quotas' periods (tcm_wall). */
static __always_inline __u64 chain_wall(__u64 now) {
    __u32 zero = 0;
    struct tcm_wall *wall = bpf_map_lookup_elem(&tcm_wall, &zero);
    return now + (wall ? wall->offset_ns : 0);
}

/* chain_level_mark for a policy with a warm-up or a quota (TCM_LEVEL_EXT) on @st, its bucket's
 * meter state, and its tcm_ext_state (by the bucket's flow id, made at its first packet).
 * @len_mode: the metered length, and above it chain_level_mark's mode with TCM_LEVEL_AGG. */
static __always_inline int chain_level_ext(const struct tcm_policy *pol,
                                           const struct tcm_class_key *key,
                                           struct tcm_meter_state *st, __u64 now, __u64 len_mode) {
    __u32 len = (__u32)len_mode, mode = (__u32)(len_mode >> 32), zero = 0;
    struct tcm_ext_scratch *sc = bpf_map_lookup_elem(&tcm_ext_scratch, &zero);
    const struct tcm_policy_ext *x;

    if (!pol || !key || !st || !sc)
        return TCM_RED;
    struct tcm_ext_state *xs = chain_ext_state(pol, key, sc, st->last_ns, mode, &x);
    if (x && !xs)
        return TCM_RED; /* no room for the state: never admit what the quota cannot count */
    /* No config: a policy of before, or of a set not yet written whole: the meter alone. */
    if (!x)
        return chain_level_step(pol, st, now, len, mode);
    /* A flow made again keeps its quota's state, not its meter's. */
    if (mode & TCM_LEVEL_FRESH)
        xs->started = 0;
    return quota_mark(&pol->meter, x, st, xs, now, chain_wall(now), len, mode & 0xff, 0);
}

static __always_inline __u32 chain_level_len(const struct tcm_policy *pol,
                                             const struct tcm_chain_in *in) {
    __u32 len = in->l3_total + (in->segs - 1) * in->hdr_len;
    if (pol->length_mode == TCM_LEN_L2)
        len += in->segs * in->l2_len;
    return len + in->segs * pol->overhead;
}

static __always_inline void chain_count(const struct tcm_policy *pol, __u32 color, __u32 segs,
                                        __u32 len) {
    __u32 id = pol->policy_id;
    struct tcm_counters *c = bpf_map_lookup_elem(&tcm_policy_stats, &id);
    if (c) {
        c->packets[color] += segs;
        c->bytes[color] += len;
    }
}

/* Level @i (> 0): the parent of level i-1, if it has one, and its bucket. Returns 1 if found. */
static __always_inline int chain_parent(const struct tcm_policy **lp, struct tcm_flow **lf, int i,
                                        const struct tcm_class_key *key,
                                        struct tcm_global_counters *g) {
    const struct tcm_policy *below = lp[i - 1];
    if (!below || below->parent == 0)
        return 0;
    __u32 idx = below->parent - 1;
    const struct tcm_policy *lvl = bpf_map_lookup_elem(&tcm_policy_cfg, &idx);
    if (!lvl)
        return 0;
    __u32 agg;
    struct tcm_flow *f = flow_find(lvl, key, g, &agg);
    if (!f)
        return 0;
    lp[i] = lvl;
    lf[i] = f;
    return 1;
}

static __always_inline void chain_unlock(struct tcm_flow *f) {
    if (f)
        flow_unlock(f);
}

/* Takes the locks of levels 0..n-1, child to parent; on a timeout releases what it holds. */
static __always_inline int chain_lock(struct tcm_flow **lf, __u32 n) {
    if (!lf[0] || !flow_lock(lf[0]))
        return 0;
    if (n > 1 && (!lf[1] || !flow_lock(lf[1]))) {
        chain_unlock(lf[0]);
        return 0;
    }
    if (n > 2 && (!lf[2] || !flow_lock(lf[2]))) {
        chain_unlock(lf[1]);
        chain_unlock(lf[0]);
        return 0;
    }
    if (n > 3 && (!lf[3] || !flow_lock(lf[3]))) {
        chain_unlock(lf[2]);
        chain_unlock(lf[1]);
        chain_unlock(lf[0]);
        return 0;
    }
    return 1;
}

/* Level @i's decision, on @st: a scratch copy of its state (the first pass) or the state
 * itself (the commit, or a chain of one). @color is the colour from below. */
static __always_inline __u32 chain_mark(const struct tcm_policy *lvl, struct tcm_flow *f,
                                        struct tcm_meter_state *st, __u64 now,
                                        const struct tcm_chain_in *in, __u32 color, int i) {
    if (!lvl || !f)
        return TCM_RED;
    __u32 mode = color | (i > 0 ? TCM_LEVEL_AWARE : 0) |
                 (f->flags & TCM_FLOW_F_STARTED ? 0 : TCM_LEVEL_FRESH);
    if (st != &f->meter)
        *st = f->meter;
    return meter_color_index(chain_level_mark(lvl, st, now, chain_level_len(lvl, in), mode));
}

/* The second pass: level @i decides again on its state itself, taking its tokens. */
static __always_inline void chain_take(const struct tcm_policy *lvl, struct tcm_flow *f, __u64 now,
                                       const struct tcm_chain_in *in, __u32 color, int i) {
    if (lvl && f)
        chain_mark(lvl, f, &f->meter, now, in, color, i);
}

/* Level @i of a packet that ends red: no bucket changes, but a flow still starts at its first
 * packet, so that under `start: empty` a flow whose first packets are red begins to earn
 * tokens (it would otherwise stay empty, and red, for ever). */
static __always_inline void chain_start(const struct tcm_policy *lvl, struct tcm_flow *f,
                                        __u64 now) {
    if (lvl && f && !(f->flags & TCM_FLOW_F_STARTED))
        meter_start(&lvl->meter, &f->meter, now);
}

/* A fleet level (docs/fleet.md): what its lease earned since the last packet goes into C before
 * the level decides. Started here, so that the start (C empty) cannot undo the fold. */
static __always_inline void chain_fleet(const struct tcm_policy *lvl, struct tcm_flow *f,
                                        __u64 now) {
    if (!lvl || !f || !(lvl->meter.flags & TCM_METER_F_FLEET))
        return;
    if (!(f->flags & TCM_FLOW_F_STARTED)) {
        meter_start(&lvl->meter, &f->meter, now);
        f->flags |= TCM_FLOW_F_STARTED;
    }
    tcm_fleet_fold(&f->meter, &lvl->meter, lvl->policy_id, now);
}

/* Counts the packet at level @i by its final colour and releases the level's lock; then, with
 * the flow's bytes as the lock left them, notes a flow that became a heavy hitter (hot.h). */
static __always_inline void chain_done(const struct tcm_policy *lvl, struct tcm_flow *f,
                                       const struct tcm_class_key *key,
                                       const struct tcm_chain_in *in, __u32 color) {
    if (!lvl || !f)
        return;
    __u32 len = chain_level_len(lvl, in);
    f->flags |= TCM_FLOW_F_STARTED;
    f->counters.packets[color]++;
    f->counters.bytes[color] += len;
    __u64 total =
        f->counters.bytes[TCM_GREEN] + f->counters.bytes[TCM_YELLOW] + f->counters.bytes[TCM_RED];
    flow_unlock(f);
    chain_count(lvl, color, in->segs, len);
    hot_check(lvl, key, total, len);
}

/* Meters the packet through @pol and its parents and counts it at every level by its final
 * colour. Returns enum tcm_color, with TCM_METER_SIGNAL set if --aqm picked the packet for its
 * early signal (aqm.h), or TCM_NR_COLORS when the matched policy's bucket could not be
 * found (a failed map lookup: the packet is not metered).
 *
 * A global function, not inlined: the verifier checks it once, on its own, instead of once for
 * every path of the parser that leads to it. Inlined, the product of the parser's paths with
 * the flow key's (mode, family, four prefix words) and the meter's takes Linux 6.1's verifier
 * past its million-instruction limit (6.18 prunes better). The levels are
 * written out rather than looped over: four at most, and each step is a few calls. @g: the
 * global counters, which the caller has looked up already (never NULL: a per-CPU array's one
 * element). */
__attribute__((noinline)) int chain_meter_packet(const struct tcm_policy *pol,
                                                 const struct tcm_class_key *key,
                                                 const struct tcm_chain_in *in,
                                                 struct tcm_global_counters *g) {
    const struct tcm_policy *lp[TCM_MAX_LEVELS] = {};
    struct tcm_flow *lf[TCM_MAX_LEVELS] = {};
    __u32 n = 1, color;

    if (!pol || !key || !in || !g)
        return TCM_NR_COLORS;
    /* The packet's instant, read before its buckets are found and locked, as a bpf_spin_lock
     * meter must: the ordered clock read (lfence; rdtsc) then waits only for the classification,
     * not for the lock's atomic too (docs/datapath.md, "Where the time went", measures it).
     * Another CPU may lock the flow in between with a later time; the levels then
     * meet a last_ns after this packet's and add nothing for it (meter_refill, aqm_idle; the
     * fleet fold earns only past its accrued_ns): metered at that later instant, exact in
     * tokens. */
    __u64 now = clock_now_ns();
    __u32 agg;
    struct tcm_flow *f0 = flow_find_own(pol, key, g, &agg);
    if (!f0)
        return TCM_NR_COLORS;
    lp[0] = pol;
    lf[0] = f0;
    /* A parent is another slot of the same policy set. A chain deeper than the data path
     * meters (apply refuses one) stops at TCM_MAX_LEVELS. */
    if (chain_parent(lp, lf, 1, key, g)) {
        n = 2;
        if (chain_parent(lp, lf, 2, key, g)) {
            n = 3;
            if (chain_parent(lp, lf, 3, key, g))
                n = 4;
        }
    }

    if (!chain_lock(lf, n)) {
        if (g)
            g->lock_timeouts++;
        chain_count(pol, TCM_RED, in->segs, chain_level_len(pol, in));
        if (n > 1 && lp[1])
            chain_count(lp[1], TCM_RED, in->segs, chain_level_len(lp[1], in));
        if (n > 2 && lp[2])
            chain_count(lp[2], TCM_RED, in->segs, chain_level_len(lp[2], in));
        if (n > 3 && lp[3])
            chain_count(lp[3], TCM_RED, in->segs, chain_level_len(lp[3], in));
        return TCM_RED; /* never admit what the meters could not check */
    }

    /* One instant for every level. A chain of one decides on its state directly (a red
     * packet takes no tokens there anyway). A longer chain decides on a scratch copy, level by
     * level, keeping each level's incoming colour; only if the top level's colour is not red
     * does it decide again on the states themselves, which gives the same colours (same state,
     * time and input) and takes the tokens. Deciding twice costs less than 4 saved states
     * would cost stack: a chain's frames must fit 512 bytes with the entry point's. */
    aqm_idle(pol, f0, now);
    chain_fleet(lp[0], lf[0], now);
    if (n > 1)
        chain_fleet(lp[1], lf[1], now);
    if (n > 2)
        chain_fleet(lp[2], lf[2], now);
    if (n > 3)
        chain_fleet(lp[3], lf[3], now);
    __u32 c0 = in->in_color > TCM_RED ? TCM_GREEN : in->in_color;
    if (n == 1) {
        /* Inline rather than through chain_level_mark: the common case, one call less. */
        if (!(f0->flags & TCM_FLOW_F_STARTED))
            meter_start(&pol->meter, &f0->meter, now);
        color = meter_color_index(
            meter_mark(&pol->meter, &f0->meter, now, chain_level_len(pol, in), c0));
    } else {
        struct tcm_meter_state st;
        __u32 c1, c2 = TCM_RED, c3 = TCM_RED; /* the incoming colour of each level */
        c1 = chain_mark(lp[0], lf[0], &st, now, in, c0, 0);
        color = chain_mark(lp[1], lf[1], &st, now, in, c1, 1);
        if (n > 2) {
            c2 = color;
            color = chain_mark(lp[2], lf[2], &st, now, in, c2, 2);
        }
        if (n > 3) {
            c3 = color;
            color = chain_mark(lp[3], lf[3], &st, now, in, c3, 3);
        }
        if (color != TCM_RED) {
            chain_take(lp[0], lf[0], now, in, c0, 0);
            chain_take(lp[1], lf[1], now, in, c1, 1);
            if (n > 2)
                chain_take(lp[2], lf[2], now, in, c2, 2);
            if (n > 3)
                chain_take(lp[3], lf[3], now, in, c3, 3);
        } else {
            chain_start(lp[0], lf[0], now);
            chain_start(lp[1], lf[1], now);
            if (n > 2)
                chain_start(lp[2], lf[2], now);
            if (n > 3)
                chain_start(lp[3], lf[3], now);
        }
    }

    color = meter_color_index(color);
    /* --aqm looks at the matched policy's own bucket (aqm.h), under its lock. */
    __u32 signal = pol->aqm && aqm_step(pol, f0, color) ? TCM_METER_SIGNAL : 0;
    chain_done(lp[0], lf[0], key, in, color);
    if (n > 1)
        chain_done(lp[1], lf[1], key, in, color);
    if (n > 2)
        chain_done(lp[2], lf[2], key, in, color);
    if (n > 3)
        chain_done(lp[3], lf[3], key, in, color);
    return color | signal;
}

/* chain_meter_packet for a policy with a warm-up or a quota (docs/spec.md §14), a chain of one
 * (apply refuses either in a hierarchy): a global function of its own, beside
 * chain_meter_packet rather than under it, as edt_meter_packet is. Under it, the warm-up's,
 * the quota's and the over meter's frame would take a chain's past the verifier's 512 bytes. */
__attribute__((noinline)) int ext_meter_packet(const struct tcm_policy *pol,
                                               const struct tcm_class_key *key,
                                               const struct tcm_chain_in *in,
                                               struct tcm_global_counters *g) {
    __u32 agg, color;

    if (!pol || !key || !in || !g)
        return TCM_NR_COLORS;
    __u64 now = clock_now_ns(); /* before the lock, as chain_meter_packet's */
    struct tcm_flow *f = flow_find(pol, key, g, &agg);
    if (!f)
        return TCM_NR_COLORS;
    __u32 len = chain_level_len(pol, in);
    if (!flow_lock(f)) {
        g->lock_timeouts++;
        chain_count(pol, TCM_RED, in->segs, len);
        return TCM_RED; /* never admit what the meter could not check */
    }
    aqm_idle(pol, f, now);
    __u32 mode = (in->in_color > TCM_RED ? TCM_GREEN : in->in_color) |
                 (f->flags & TCM_FLOW_F_STARTED ? 0 : TCM_LEVEL_FRESH) | (agg ? TCM_LEVEL_AGG : 0);
    color = meter_color_index(chain_level_ext(pol, key, &f->meter, now, (__u64)mode << 32 | len));
    __u32 signal = pol->aqm && aqm_step(pol, f, color) ? TCM_METER_SIGNAL : 0;
    chain_done(pol, f, key, in, color);
    return color | signal;
}

/* Level i of ext_chain_meter_packet's chain (i in @len_mode's TCM_LEVEL_SLOT), @f locked.
 * Without TCM_LEVEL_COMMIT or TOUCH: its colour for the packet, decided on copies of its states
 * in the scratch's slot i. With COMMIT (the packet passed every level): the copies become its
 * states, the same decision, its tokens and its quota's bytes taken. With TOUCH (the packet
 * ended red): it meets the packet red, colour-aware, on its states: its buckets earn to now, a
 * warm-up's gap ends there, a meter starts, a period turns, and nothing is taken (docs/spec.md
 * §9, §14). A level without a warm-up or quota is chain_mark's, chain_take's, chain_start's.
 * A global function of its own: a warm-up's, a quota's and an over meter's code is more than a
 * chain's frame leaves room for inline. */
__attribute__((noinline)) int chain_ext_level(const struct tcm_policy *lvl, struct tcm_flow *f,
                                              const struct tcm_class_key *key, __u64 now,
                                              __u64 len_mode) {
    __u32 len = (__u32)len_mode, mode = (__u32)(len_mode >> 32), zero = 0;
    __u32 i = (mode >> TCM_LEVEL_SLOT_SHIFT) & (TCM_MAX_LEVELS - 1);
    struct tcm_ext_scratch *sc = bpf_map_lookup_elem(&tcm_ext_scratch, &zero);
    const struct tcm_policy_ext *x = NULL;
    struct tcm_ext_state *xs = NULL;

    if (!lvl || !f || !key || !sc)
        return TCM_RED;
    if (TCM_LEVEL_EXT(lvl)) {
        xs = chain_ext_state(lvl, key, sc, f->meter.last_ns, mode, &x);
        if (x && !xs)
            return TCM_RED; /* no room for the state: never admit what the quota cannot count */
    }
    struct tcm_meter_state *st = &sc->st[i];
    struct tcm_ext_state *xc = &sc->xs[i];
    if (mode & TCM_LEVEL_COMMIT) {
        f->meter = *st;
        if (xs && (sc->ext_slots & 1u << i))
            *xs = *xc;
        return TCM_GREEN;
    }
    if (mode & TCM_LEVEL_TOUCH) {
        /* On the states themselves, red whatever came from below. */
        st = &f->meter;
        xc = xs;
        mode |= TCM_LEVEL_AWARE | TCM_RED;
    } else {
        *st = f->meter;
        if (xs) {
            *xc = *xs;
            sc->ext_slots |= 1u << i;
        } else {
            sc->ext_slots &= ~(1u << i);
        }
    }
    if (!xs) {
        if (!(mode & TCM_LEVEL_TOUCH))
            return chain_level_step(lvl, st, now, len, mode);
        if (mode & TCM_LEVEL_FRESH)
            meter_start(&lvl->meter, st, now);
        return TCM_RED; /* chain_start's: a red packet takes nothing, its time adds nothing */
    }
    if (mode & TCM_LEVEL_FRESH)
        xc->started = 0; /* a flow made again keeps its quota's state, not its meter's */
    return quota_mark(&lvl->meter, x, st, xc, now, chain_wall(now), len, mode & 0xff,
                      (mode & TCM_LEVEL_AWARE) != 0);
}

/* Level @i's policy of @pol's chain, walked up again rather than kept: a chain's pointers on
 * the stack are what its frames cannot afford (ext_chain_meter_packet). */
static __always_inline const struct tcm_policy *chain_up(const struct tcm_policy *pol, int i) {
    for (int j = 0; j < i && pol; j++) {
        __u32 idx = pol->parent - 1;
        pol = pol->parent ? bpf_map_lookup_elem(&tcm_policy_cfg, &idx) : NULL;
    }
    return pol;
}

/* ext_chain_meter_packet's levels in one word, which its frame has room for where two would
 * not: bit TCM_LV_HAS(i) if level i exists, TCM_LV_AGG(i) if its bucket is its aggregate. */
#define TCM_LV_AGG(i) (1u << (i))
#define TCM_LV_HAS(i) (0x10u << (i))

/* Level @i's call of chain_ext_level with @op (0, TCM_LEVEL_COMMIT or TOUCH), @color from below. */
static __always_inline __u32 chain_ext_call(const struct tcm_policy *pol, struct tcm_flow *f, int i,
                                            const struct tcm_class_key *key, __u64 now,
                                            const struct tcm_chain_in *in, __u32 lv, __u32 color,
                                            __u32 op) {
    const struct tcm_policy *lvl = chain_up(pol, i);
    if (!lvl || !f)
        return TCM_RED;
    __u32 mode = color | op | (__u32)i << TCM_LEVEL_SLOT_SHIFT | (i > 0 ? TCM_LEVEL_AWARE : 0) |
                 (f->flags & TCM_FLOW_F_STARTED ? 0 : TCM_LEVEL_FRESH) |
                 (lv & TCM_LV_AGG(i) ? TCM_LEVEL_AGG : 0);
    return meter_color_index(
        chain_ext_level(lvl, f, key, now, (__u64)mode << 32 | chain_level_len(lvl, in)));
}

/* Level @i's bucket (@i > 0), of the parent of level i-1's policy, or NULL; noted in @lv. */
static __always_inline struct tcm_flow *chain_ext_parent(const struct tcm_policy *pol, int i,
                                                         const struct tcm_class_key *key,
                                                         struct tcm_global_counters *g, __u32 *lv) {
    const struct tcm_policy *lvl = chain_up(pol, i);
    __u32 agg;
    if (!lvl)
        return NULL;
    struct tcm_flow *f = flow_find(lvl, key, g, &agg);
    if (f)
        *lv |= TCM_LV_HAS(i) | (agg ? TCM_LV_AGG(i) : 0);
    return f;
}

/* chain_meter_packet for a chain with a warm-up or a quota at any level (TCM_METER_F_EXT_CHAIN
 * on the matched policy), a global function beside it as ext_meter_packet is: the same steps
 * (levels found, locked child to parent, one instant, all or nothing, every level counted by the
 * final colour), each level's decision made by chain_ext_level on copies in the per-CPU scratch
 * and then taken whole or not at all. Its frame and chain_ext_level's must fit under the entry
 * point's with the warm-up's time function: the levels' policies are walked up again where
 * needed (chain_up) rather than kept, and the levels are one word. */
__attribute__((noinline)) int ext_chain_meter_packet(const struct tcm_policy *pol,
                                                     const struct tcm_class_key *key,
                                                     const struct tcm_chain_in *in,
                                                     struct tcm_global_counters *g) {
    struct tcm_flow *lf[TCM_MAX_LEVELS] = {};
    __u32 color, agg, lv;

    if (!pol || !key || !in || !g)
        return TCM_NR_COLORS;
    __u64 now = clock_now_ns(); /* before the locks, as chain_meter_packet's */
    lf[0] = flow_find(pol, key, g, &agg);
    if (!lf[0])
        return TCM_NR_COLORS;
    lv = TCM_LV_HAS(0) | (agg ? TCM_LV_AGG(0) : 0);
    if ((lf[1] = chain_ext_parent(pol, 1, key, g, &lv)))
        if ((lf[2] = chain_ext_parent(pol, 2, key, g, &lv)))
            lf[3] = chain_ext_parent(pol, 3, key, g, &lv);
    if (!chain_lock(lf, lv & TCM_LV_HAS(3)   ? 4
                        : lv & TCM_LV_HAS(2) ? 3
                        : lv & TCM_LV_HAS(1) ? 2
                                             : 1)) {
        g->lock_timeouts++;
        for (int i = 0; i < TCM_MAX_LEVELS; i++) {
            const struct tcm_policy *lvl = chain_up(pol, i);
            if (lvl && (lv & TCM_LV_HAS(i)))
                chain_count(lvl, TCM_RED, in->segs, chain_level_len(lvl, in));
        }
        return TCM_RED; /* never admit what the meters could not check */
    }

    aqm_idle(pol, lf[0], now);
    chain_fleet(pol, lf[0], now);
    if (lv & TCM_LV_HAS(1))
        chain_fleet(chain_up(pol, 1), lf[1], now);
    if (lv & TCM_LV_HAS(2))
        chain_fleet(chain_up(pol, 2), lf[2], now);
    if (lv & TCM_LV_HAS(3))
        chain_fleet(chain_up(pol, 3), lf[3], now);
    color = chain_ext_call(pol, lf[0], 0, key, now, in, lv,
                           in->in_color > TCM_RED ? TCM_GREEN : in->in_color, 0);
    if (lv & TCM_LV_HAS(1))
        color = chain_ext_call(pol, lf[1], 1, key, now, in, lv, color, 0);
    if (lv & TCM_LV_HAS(2))
        color = chain_ext_call(pol, lf[2], 2, key, now, in, lv, color, 0);
    if (lv & TCM_LV_HAS(3))
        color = chain_ext_call(pol, lf[3], 3, key, now, in, lv, color, 0);
    __u32 op = color != TCM_RED ? TCM_LEVEL_COMMIT : TCM_LEVEL_TOUCH;
    chain_ext_call(pol, lf[0], 0, key, now, in, lv, TCM_RED, op);
    if (lv & TCM_LV_HAS(1))
        chain_ext_call(pol, lf[1], 1, key, now, in, lv, TCM_RED, op);
    if (lv & TCM_LV_HAS(2))
        chain_ext_call(pol, lf[2], 2, key, now, in, lv, TCM_RED, op);
    if (lv & TCM_LV_HAS(3))
        chain_ext_call(pol, lf[3], 3, key, now, in, lv, TCM_RED, op);

    __u32 signal = pol->aqm && aqm_step(pol, lf[0], color) ? TCM_METER_SIGNAL : 0;
    chain_done(pol, lf[0], key, in, color);
    if (lv & TCM_LV_HAS(1))
        chain_done(chain_up(pol, 1), lf[1], key, in, color);
    if (lv & TCM_LV_HAS(2))
        chain_done(chain_up(pol, 2), lf[2], key, in, color);
    if (lv & TCM_LV_HAS(3))
        chain_done(chain_up(pol, 3), lf[3], key, in, color);
    return color | signal;
}

/* The packet's meter: through its policy's chain, or ext_meter_packet's or ext_chain_meter_packet's
 * (a warm-up or quota on the way): one bit test for every other packet. */
static __always_inline int chain_or_ext(const struct tcm_policy *pol,
                                        const struct tcm_class_key *key,
                                        const struct tcm_chain_in *in,
                                        struct tcm_global_counters *g) {
    if (pol->meter.flags & (TCM_METER_F_WARM | TCM_METER_F_QUOTA | TCM_METER_F_EXT_CHAIN))
        return pol->parent ? ext_chain_meter_packet(pol, key, in, g)
                           : ext_meter_packet(pol, key, in, g);
    return chain_meter_packet(pol, key, in, g);
}

#endif /* TRICOLOR_CHAIN_H */
