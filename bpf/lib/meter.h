/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* meter.h: the token-bucket maths of srTCM (RFC 2697), trTCM (RFC 2698) and RFC 4115, and every
 * choice the data path makes by algorithm, in pure C with no BPF helpers. The same code is
 * compiled into the BPF programs and into the C++ library, so what the tests check in user space
 * is what runs in the kernel. Why nothing rounds, wraps or is credited twice: docs/meters.md,
 * "Why it is exact". */
#ifndef TRICOLOR_METER_H
#define TRICOLOR_METER_H

#include "tricolor_abi.h"

#ifdef __bpf__
#define TCM_METER_INLINE static __always_inline
/* A global function: verified once on its own, for any arguments, not once for every path that
 * reaches it. The warm-up's and the calendar's branches, inlined among the meter's, took Linux
 * 6.12's and 6.18's verifiers past a million instructions with clang 16 and 17. Pointer arguments
 * may be NULL to the verifier, and so are checked. */
#define TCM_METER_GLOBAL __attribute__((noinline))
#else
#define TCM_METER_INLINE static inline
#define TCM_METER_GLOBAL static inline
#endif

/* Adds @add tokens to a bucket of capacity @size; returns the part that did not fit. */
TCM_METER_INLINE __u64 meter_bucket_add(__u64 *tokens, __u64 size, __u64 add) {
    __u64 room = size - *tokens;

    if (add <= room) {
        *tokens += add;
        return 0;
    }
    *tokens = size;
    return add - room;
}

/* One independently refilled bucket (trtcm C and P, rfc4115 C and E). */
TCM_METER_INLINE void meter_bucket_refill(__u64 *tokens, __u64 size, __u64 rate, __u64 fill_ns,
                                          __u64 dt) {
    if (rate == 0)
        return;
    if (dt >= fill_ns)
        *tokens = size;
    else
        meter_bucket_add(tokens, size, dt * rate); /* dt < fill_ns => dt*rate < size */
}

/* Fills both buckets for @dt ns at their rates. */
TCM_METER_INLINE void meter_refill_dt(const struct tcm_meter_config *cfg,
                                      struct tcm_meter_state *st, __u64 dt) {
    if (cfg->algo == TCM_ALGO_SRTCM) {
        /* One token stream at CIR: C first, what overflows C into E. */
        if (dt >= cfg->c_fill_ns) {
            st->c_tokens = cfg->c_size;
            st->e_tokens = cfg->e_size;
            return;
        }
        meter_bucket_add(&st->e_tokens, cfg->e_size,
                         meter_bucket_add(&st->c_tokens, cfg->c_size, dt * cfg->c_rate));
        return;
    }
    if (cfg->flags & TCM_METER_F_COUPLED) {
        /* rfc4115 with CF=1 (MEF 10.3): C at CIR, what overflows C into E, and E at EIR as well.
         * Both streams only add, so capping E once at the end is the continuous model's cap.
         * e_fill_ns is the smaller of EBS/EIR and (CBS+EBS)/CIR: a gap that long fills E, by
         * EIR alone or by what overflows C (and then C is full too). A shorter one has
         * dt*CIR < CBS+EBS (< 2^64, as for srtcm) and dt*EIR < EBS, and every add compares
         * against the room left. */
        if (dt >= cfg->e_fill_ns) {
            st->e_tokens = cfg->e_size;
            meter_bucket_refill(&st->c_tokens, cfg->c_size, cfg->c_rate, cfg->c_fill_ns, dt);
            return;
        }
        meter_bucket_add(&st->e_tokens, cfg->e_size,
                         meter_bucket_add(&st->c_tokens, cfg->c_size, dt * cfg->c_rate));
        if (cfg->e_rate)
            meter_bucket_add(&st->e_tokens, cfg->e_size, dt * cfg->e_rate);
        return;
    }
    meter_bucket_refill(&st->c_tokens, cfg->c_size, cfg->c_rate, cfg->c_fill_ns, dt);
    meter_bucket_refill(&st->e_tokens, cfg->e_size, cfg->e_rate, cfg->e_fill_ns, dt);
}

/* Brings both buckets forward to @now_ns. */
TCM_METER_INLINE void meter_refill(const struct tcm_meter_config *cfg, struct tcm_meter_state *st,
                                   __u64 now_ns) {
    __u64 dt;

    if (now_ns <= st->last_ns)
        return;
    dt = now_ns - st->last_ns;
    st->last_ns = now_ns;
    meter_refill_dt(cfg, st, dt);
}

/* Tokens a packet of @len metered bytes costs. */
TCM_METER_INLINE __u64 meter_cost(const struct tcm_meter_config *cfg, __u32 len) {
    if (cfg->flags & TCM_METER_F_PACKET_MODE)
        return cfg->unit_tokens;
    if (len > TCM_METER_MAX_LEN)
        len = TCM_METER_MAX_LEN; /* still larger than any bucket, and len*8e9 fits */
    return (__u64)len * cfg->unit_tokens;
}

/* Buckets are full when a flow's first packet arrives (docs/spec.md §1), or empty under `start:
 * empty` (docs/spec.md §9): then a new flow earns its burst at its rates like any other. */
TCM_METER_INLINE void meter_start(const struct tcm_meter_config *cfg, struct tcm_meter_state *st,
                                  __u64 now_ns) {
    int empty = (cfg->flags & TCM_METER_F_START_EMPTY) != 0;

    st->last_ns = now_ns;
    /* A fleet's C holds only what the fleet granted (docs/spec.md §10). */
    st->c_tokens = empty || (cfg->flags & TCM_METER_F_FLEET) ? 0 : cfg->c_size;
    st->e_tokens = empty ? 0 : cfg->e_size;
}

/* The colour of a packet of @len metered bytes and incoming colour @in_color on buckets brought
 * forward to its arrival, and its tokens taken. */
TCM_METER_INLINE __u32 meter_take(const struct tcm_meter_config *cfg, struct tcm_meter_state *st,
                                  __u32 len, __u32 in_color) {
    __u64 cost = meter_cost(cfg, len);

    if (in_color > TCM_RED)
        in_color = TCM_GREEN;

    if (cfg->algo == TCM_ALGO_TRTCM) {
        /* e is the peak bucket P. */
        if (in_color == TCM_RED || st->e_tokens < cost)
            return TCM_RED;
        if (in_color == TCM_YELLOW || st->c_tokens < cost) {
            st->e_tokens -= cost;
            return TCM_YELLOW;
        }
        st->e_tokens -= cost;
        st->c_tokens -= cost;
        return TCM_GREEN;
    }

    /* srtcm and rfc4115 mark alike; they differ only in how E refills. */
    if (in_color == TCM_GREEN && st->c_tokens >= cost) {
        st->c_tokens -= cost;
        return TCM_GREEN;
    }
    if (in_color != TCM_RED && st->e_tokens >= cost) {
        st->e_tokens -= cost;
        return TCM_YELLOW;
    }
    return TCM_RED;
}

/* Colours one packet of @len metered bytes arriving at @now_ns with incoming colour @in_color,
 * always colour-aware (a parent in a hierarchy meters the colour from below whatever its own
 * mode, docs/spec.md §9), and takes its tokens. Returns enum tcm_color. */
TCM_METER_INLINE __u32 meter_mark_aware(const struct tcm_meter_config *cfg,
                                        struct tcm_meter_state *st, __u64 now_ns, __u32 len,
                                        __u32 in_color) {
    /* A policy update may have shrunk the buckets: tokens are kept, capped to the new sizes. */
    if (st->c_tokens > cfg->c_size)
        st->c_tokens = cfg->c_size;
    if (st->e_tokens > cfg->e_size)
        st->e_tokens = cfg->e_size;
    meter_refill(cfg, st, now_ns);
    return meter_take(cfg, st, len, in_color);
}

/* As meter_mark_aware, with @in_color ignored unless the meter is colour-aware.
 * Colour-blind marking is colour-aware marking of a green packet, for all three algorithms. */
TCM_METER_INLINE __u32 meter_mark(const struct tcm_meter_config *cfg, struct tcm_meter_state *st,
                                  __u64 now_ns, __u32 len, __u32 in_color) {
    if (!(cfg->flags & TCM_METER_F_COLOR_AWARE))
        in_color = TCM_GREEN;
    return meter_mark_aware(cfg, st, now_ns, len, in_color);
}

/* --shape edt (edt.h): the nanoseconds until a bucket refilling at @rate tokens/ns has gained
 * @need tokens, ceil(need / rate), without a division: @recip is floor(2^64 / rate) (2^64 - 1 at
 * rate 1), computed at configuration time. floor(need * recip / 2^64), taken exactly in 32-bit
 * halves (no 128-bit multiply in BPF), is at most need / rate and more than need / rate - 2, so
 * two compare-and-adds make it exact. No product wraps for need <= 2^31 * 8e9 (meter_cost's
 * clamp) and rate <= 10^12: q * rate <= need, and (q + 1) * rate < need + 10^12 < 2^64. */
TCM_METER_INLINE __u64 meter_wait_ns(__u64 need, __u64 rate, __u64 recip) {
    __u64 al = need & 0xffffffffull, ah = need >> 32, bl = recip & 0xffffffffull, bh = recip >> 32;
    __u64 p1 = al * bh, p2 = ah * bl;
    __u64 mid = ((al * bl) >> 32) + (p1 & 0xffffffffull) + (p2 & 0xffffffffull);
    __u64 q = ah * bh + (p1 >> 32) + (p2 >> 32) + (mid >> 32);

    if (q * rate < need)
        q++;
    if (q * rate < need)
        q++;
    return q;
}

/* --warmup (tricolor_abi.h, struct tcm_warm_config; docs/meters.md, "Warm-up"). */

/* floor(@x / K^2) for x < 2^55, by meter_wait_ns's multiplication: ceil((x + 1) / K^2) - 1. */
TCM_METER_INLINE __u64 meter_div_k2(const struct tcm_warm_config *w, __u64 x) {
    return meter_wait_ns(x + 1, w->k2, w->k2_recip) - 1;
}

/* floor(@x / @d) for x <= TCM_WARM_MAX_K * d: the whole steps before x, found in halvings (no
 * division, no loop: a loop here took Linux 6.12's verifier past its million instructions with
 * some compilers). */
TCM_METER_INLINE __u64 meter_warm_steps(__u64 d, __u64 x) {
    __u64 q = 0;

    if (x >= (q + 16) * d)
        q += 16;
    if (x >= (q + 8) * d)
        q += 8;
    if (x >= (q + 4) * d)
        q += 4;
    if (x >= (q + 2) * d)
        q += 2;
    if (x >= (q + 1) * d)
        q += 1;
    return q;
}

/* The time a warm-up has earned from its start to @x (in 1/K ns, x <= K * D), in 1/K^2 ns: in
 * the j-th step, [(j-1)D, jD), each 1/K ns earns j/K^2 ns, so F(x) = D(1 + ... + (j-1)) +
 * j(x - (j-1)D) = j*x - D*j(j-1)/2, continuous at every edge (j = K + 1 at x = KD gives
 * D*K(K+1)/2, the whole warm-up's). */
TCM_METER_INLINE __u64 meter_warm_earned(__u64 d, __u64 x) {
    __u64 j = meter_warm_steps(d, x) + 1;

    return j * x - d * (j * (j - 1) / 2);
}

/* What a warm-up earns over [@x0, @x1) ns from its start: *whole ns and *frac / K^2 ns more, as
 * if at the full rates. */
struct tcm_warm_earned {
    __u64 whole, frac;
};
TCM_METER_GLOBAL int meter_warm_time(const struct tcm_warm_config *w, __u64 x0, __u64 x1,
                                     struct tcm_warm_earned *out) {
    __u64 d, after = 0, g, q;

    if (!w || !out)
        return 0;
    d = w->d_ns;
    if (x0 >= d) {
        out->whole = x1 - x0;
        out->frac = 0;
        return 0;
    }
    if (x1 > d) {
        after = x1 - d;
        x1 = d;
    }
    g = meter_warm_earned(d, x1 * w->k) - meter_warm_earned(d, x0 * w->k);
    q = meter_div_k2(w, g);
    out->frac = g - q * w->k2;
    out->whole = after > ~0ull - q ? ~0ull : q + after;
    return 0;
}

/* Adds @add / K^2 tokens to a bucket beside the *@rem / K^2 it holds beyond its whole tokens;
 * returns the whole tokens that makes (@add < 2^55). */
TCM_METER_INLINE __u64 meter_warm_carry(const struct tcm_warm_config *w, __u32 *rem, __u64 add) {
    __u64 f = *rem + add, q = f < w->k2 ? 0 : meter_div_k2(w, f);

    *rem = (__u32)(f - q * w->k2);
    return q;
}

/* Brings both buckets forward to @now_ns under a warm-up: the whole time through
 * meter_refill_dt, then what the 1/K^2 ns beyond it earn (at most a rate's worth, so no sum
 * wraps) with each bucket's part-token. A full bucket holds no part: what would take C past
 * its size goes on to E where C's overflow does (srtcm, coupled rfc4115), part-tokens too. */
TCM_METER_INLINE void meter_refill_warm(const struct tcm_meter_config *cfg,
                                        const struct tcm_warm_config *w, struct tcm_meter_state *st,
                                        struct tcm_warm_state *ws, __u64 now_ns) {
    struct tcm_warm_earned earned = {};
    __u64 whole, frac, over, over_rem = 0, e_add;
    int overflows = cfg->algo == TCM_ALGO_SRTCM || (cfg->flags & TCM_METER_F_COUPLED);

    if (now_ns <= st->last_ns)
        return;
    meter_warm_time(w, st->last_ns - ws->start_ns, now_ns - ws->start_ns, &earned);
    whole = earned.whole;
    frac = earned.frac;
    st->last_ns = now_ns;
    meter_refill_dt(cfg, st, whole);

    over = meter_bucket_add(&st->c_tokens, cfg->c_size,
                            meter_warm_carry(w, &ws->c_rem, cfg->c_rate * frac));
    if (st->c_tokens == cfg->c_size) {
        over_rem = ws->c_rem;
        ws->c_rem = 0;
    }
    if (!overflows)
        over = over_rem = 0;
    e_add = cfg->algo == TCM_ALGO_SRTCM ? 0 : cfg->e_rate * frac;
    meter_bucket_add(&st->e_tokens, cfg->e_size,
                     over + meter_warm_carry(w, &ws->e_rem, e_add + over_rem));
    if (st->e_tokens == cfg->e_size)
        ws->e_rem = 0;
}

TCM_METER_INLINE void meter_start_warm(const struct tcm_meter_config *cfg,
                                       struct tcm_meter_state *st, struct tcm_warm_state *ws,
                                       __u64 now_ns) {
    meter_start(cfg, st, now_ns);
    ws->start_ns = now_ns;
    ws->c_rem = ws->e_rem = 0;
}

/* meter_mark_aware under a warm-up (@w->d_ns != 0): a packet a gap of at least D after the one
 * before finds the meter cold, and a warm-up starts with it, once the gap has been earned at
 * the rates of the one before. */
TCM_METER_INLINE __u32 meter_mark_warm_aware(const struct tcm_meter_config *cfg,
                                             const struct tcm_warm_config *w,
                                             struct tcm_meter_state *st, struct tcm_warm_state *ws,
                                             __u64 now_ns, __u32 len, __u32 in_color) {
    int cold = now_ns > st->last_ns && now_ns - st->last_ns >= w->d_ns;

    if (st->c_tokens >= cfg->c_size) {
        st->c_tokens = cfg->c_size;
        ws->c_rem = 0;
    }
    if (st->e_tokens >= cfg->e_size) {
        st->e_tokens = cfg->e_size;
        ws->e_rem = 0;
    }
    meter_refill_warm(cfg, w, st, ws, now_ns);
    if (cold)
        ws->start_ns = now_ns;
    return meter_take(cfg, st, len, in_color);
}

/* The choices the data path's other parts make by algorithm. */

/* --aqm (aqm.h): the reserve of a bucket pair, the tokens left before a packet is red, and the
 * size it drains from. trtcm: P, which alone decides red; srtcm and rfc4115: C and E together. */
TCM_METER_INLINE void meter_reserve(const struct tcm_meter_config *cfg,
                                    const struct tcm_meter_state *st, __u64 *size, __u64 *tokens) {
    if (cfg->algo == TCM_ALGO_TRTCM) {
        *size = cfg->e_size;
        *tokens = st->e_tokens;
    } else {
        *size = cfg->c_size + cfg->e_size;
        *tokens = st->c_tokens + st->e_tokens;
    }
}

/* --shape edt (edt.h): the bucket a packet coloured red for want of tokens waits for, its
 * incoming colour @in_color green or yellow: its *@rate, *@tokens and *@size. trtcm: P at PIR,
 * which a packet of either colour needs. srtcm and rfc4115: C at CIR, for a green packet; a
 * yellow one could use only E, which C's refill does not fill: returns 0, nothing to wait for. */
TCM_METER_INLINE int meter_wait_bucket(const struct tcm_meter_config *cfg,
                                       const struct tcm_meter_state *st, __u32 in_color,
                                       __u64 *rate, __u64 *tokens, __u64 *size) {
    *rate = cfg->c_rate;
    *tokens = st->c_tokens;
    *size = cfg->c_size;
    if (cfg->algo == TCM_ALGO_TRTCM) {
        *rate = cfg->e_rate;
        *tokens = st->e_tokens;
        *size = cfg->e_size;
        return 1;
    }
    return in_color == TCM_GREEN;
}

/* What a fleet policy's lease earned (fleet.h, docs/spec.md §10): @add tokens into C, which holds
 * at most @c_cap (the host's part of CBS, at most c_size) and is cut to it first; under srtcm
 * what overflows C goes into E, as its CIR stream's would. Returns what fit in neither. */
TCM_METER_INLINE __u64 meter_grant(const struct tcm_meter_config *cfg, struct tcm_meter_state *st,
                                   __u64 c_cap, __u64 add) {
    if (c_cap > cfg->c_size)
        c_cap = cfg->c_size;
    if (st->c_tokens > c_cap)
        st->c_tokens = c_cap;
    __u64 over = meter_bucket_add(&st->c_tokens, c_cap, add);
    if (over && cfg->algo == TCM_ALGO_SRTCM) {
        if (st->e_tokens > cfg->e_size)
            st->e_tokens = cfg->e_size;
        over = meter_bucket_add(&st->e_tokens, cfg->e_size, over);
    }
    return over;
}

#ifdef __bpf__
/* A colour as an array index the verifier can prove in bounds. The barrier hides the value from
 * clang, which otherwise proves the check redundant (meter_mark returns 0..2) and drops it,
 * or tests one register and indexes with a copy: Linux 6.1's verifier does not carry a bound
 * from a 32-bit copy back to its source and refused the program ("invalid access to map value,
 * off=80"). The check costs one compare. */
static __always_inline __u32 meter_color_index(__u32 color) {
    asm volatile("" : "+r"(color));
    return color < TCM_NR_COLORS ? color : TCM_RED;
}
#endif /* __bpf__ */

#ifndef __bpf__
/* Configuration time only (it divides): fills @cfg from parameters already validated against
 * the limits in tricolor_abi.h. Rates are in bit/s (packet/s), sizes in bytes (packets).
 * @second_rate/@second_size are EIR/EBS (rfc4115), PIR/PBS (trtcm), or 0/EBS (srtcm). */
TCM_METER_INLINE __u64 meter_fill_ns(__u64 size_tokens, __u64 rate) {
    /* Smallest dt with dt*rate >= size: any gap this long fills the bucket from empty. */
    if (rate == 0)
        return ~0ull;
    return size_tokens / rate + (size_tokens % rate != 0);
}

TCM_METER_INLINE void meter_config_init(struct tcm_meter_config *cfg, __u32 algo, __u32 flags,
                                        __u64 cir, __u64 cbs, __u64 second_rate,
                                        __u64 second_size) {
    __u64 unit = (flags & TCM_METER_F_PACKET_MODE) ? TCM_TOKENS_PER_PACKET : TCM_TOKENS_PER_BYTE;

    cfg->algo = algo;
    cfg->flags = flags;
    cfg->unit_tokens = unit;
    cfg->c_rate = cir;
    cfg->c_size = cbs * unit;
    cfg->e_size = second_size * unit;
    if (algo == TCM_ALGO_SRTCM) {
        cfg->e_rate = 0;
        cfg->c_fill_ns = meter_fill_ns(cfg->c_size + cfg->e_size, cir);
        cfg->e_fill_ns = ~0ull;
    } else {
        cfg->e_rate = second_rate;
        cfg->c_fill_ns = meter_fill_ns(cfg->c_size, cir);
        cfg->e_fill_ns = meter_fill_ns(cfg->e_size, second_rate);
        if (flags & TCM_METER_F_COUPLED) {
            /* E is full once EIR alone fills it, or once CIR has filled C and then E. */
            __u64 both = meter_fill_ns(cfg->c_size + cfg->e_size, cir);
            if (both < cfg->e_fill_ns)
                cfg->e_fill_ns = both;
        }
    }
}

/* floor(2^64 / @d), the reciprocal meter_wait_ns divides by (2^64 - 1 at 1, 0 at 0):
 * floor((2^64 - 1) / d), one more where d divides 2^64. */
TCM_METER_INLINE __u64 meter_recip(__u64 d) {
    if (d <= 1)
        return d ? ~0ull : 0;
    return ~0ull / d + (~0ull % d == d - 1);
}

/* The warm-up of @d_ns in @k steps (validated: TCM_WARM_MIN_K..TCM_WARM_MAX_K, d_ns at most
 * TCM_WARM_MAX_NS); d_ns 0: none. */
TCM_METER_INLINE void meter_warm_config_init(struct tcm_warm_config *w, __u64 d_ns, __u32 k) {
    w->d_ns = d_ns;
    w->k = d_ns ? k : 0;
    w->k2 = w->k * w->k;
    w->k2_recip = meter_recip(w->k2);
}
#endif /* !__bpf__ */

#endif /* TRICOLOR_METER_H */
