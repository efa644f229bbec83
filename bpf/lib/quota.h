/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* quota.h: a meter's volume quota over periods (docs/spec.md §14), in pure C with no BPF
 * helpers, compiled into the BPF programs and the C++ library as meter.h is. While the bytes a
 * meter coloured green or yellow this period are below the quota, the meter decides (and a
 * packet that takes them past it counts whole); from then until the period ends, the over
 * meter does, or every packet is red. */
#ifndef TRICOLOR_QUOTA_H
#define TRICOLOR_QUOTA_H

#include "tricolor_abi.h"
#include "meter.h"

#define TCM_NS_PER_DAY 86400000000000ull

/* Days since 1970-01-01 of a date of the proleptic Gregorian calendar (H. Hinnant's
 * days_from_civil), for @y >= 1970. */
TCM_METER_INLINE __u64 quota_days(__u64 y, __u32 m, __u32 d) {
    y -= m <= 2;
    __u64 era = y / 400, yoe = y - era * 400;
    __u64 doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    __u64 doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* The year and month of day @z since 1970-01-01 (civil_from_days). */
TCM_METER_INLINE void quota_civil(__u64 z, __u64 *y, __u32 *m) {
    z += 719468;
    __u64 era = z / 146097, doe = z - era * 146097;
    __u64 yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    __u64 doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    __u64 mp = (5 * doy + 2) / 153;
    *m = (__u32)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* The end of the period that holds @now: the first reset after it. Once a period, not once a
 * packet: a fixed period divides by multiplying (meter_wait_ns); a month reads the calendar,
 * whose divisions are by constants. ~0 when the next reset is past 2^64 ns (never). */
TCM_METER_GLOBAL __u64 quota_next_reset(const struct tcm_quota_config *q, __u64 now) {
    if (!q)
        return ~0ull;
    if (q->period_ns) {
        __u64 p = q->period_ns, a = q->anchor_ns, k;

        if (now >= a) {
            /* floor((now - a) / p) + 1 periods from the anchor: the end is at most now + p. */
            if (p > ~0ull - now)
                return ~0ull;
            k = meter_wait_ns(now - a + 1, p, q->period_recip);
            return a + k * p;
        }
        /* Before the anchor: the period [a - c*p, a - (c-1)*p) with c = ceil((a - now) / p). */
        k = meter_wait_ns(a - now, p, q->period_recip);
        return a - (k - 1) * p;
    }
    __u64 y;
    __u32 m;
    quota_civil(now / TCM_NS_PER_DAY, &y, &m);
    for (int i = 0; i < 2; i++) {
        __u64 b = quota_days(y, m, q->month_day) * TCM_NS_PER_DAY + q->anchor_ns;
        if (b > now)
            return b;
        if (++m > 12) {
            m = 1;
            y++;
        }
    }
    return ~0ull; /* not reached: next month's reset is after now */
}

/* Starts a new period if @now is past the one the state holds. Returns whether the quota is
 * used (then the over meter decides). */
TCM_METER_INLINE int quota_used(const struct tcm_quota_config *q, struct tcm_quota_state *qs,
                                __u64 now) {
    if (!qs->period_end || now >= qs->period_end) {
        qs->used = 0;
        qs->period_end = quota_next_reset(q, now);
    } else if (qs->gen != q->gen) {
        qs->period_end = quota_next_reset(q, now); /* the periods changed: what was used stays */
    }
    qs->gen = q->gen;
    return qs->used >= q->bytes;
}

/* The meter's colour @color for a packet of @len bytes, counted against the quota. */
TCM_METER_INLINE void quota_count(struct tcm_quota_state *qs, __u32 len, __u32 color) {
    if (color != TCM_RED)
        qs->used += len;
}

/* The colour of a packet over the quota, @in_color as the over meter sees it. */
TCM_METER_INLINE __u32 quota_over(const struct tcm_quota_config *q, struct tcm_quota_state *qs,
                                  __u64 now, __u32 len, __u32 in_color) {
    if (q->flags & TCM_QUOTA_F_DROP)
        return TCM_RED;
    if (!qs->over_started) {
        meter_start(&q->over, &qs->over, now);
        qs->over_started = 1;
    }
    return meter_mark_aware(&q->over, &qs->over, now, len, in_color);
}

/* A meter with its warm-up (@x->warm.d_ns != 0) and its quota (@x->quota.bytes != 0): the colour
 * of a packet of @len bytes arriving at @now (the meter's clock) and @wall (UTC: the quota's
 * periods), @in_color as it came. Colour-blind meters see green, unless @aware (a parent in a
 * hierarchy, docs/spec.md §9). The meter starts at the first packet that reaches it, not at one
 * the over meter took. One function for the C++ meter, the replay and the data path. */
TCM_METER_INLINE __u32 quota_mark(const struct tcm_meter_config *cfg,
                                  const struct tcm_policy_ext *x, struct tcm_meter_state *st,
                                  struct tcm_ext_state *xs, __u64 now, __u64 wall, __u32 len,
                                  __u32 in_color, int aware) {
    __u32 color;

    if (in_color > TCM_RED)
        in_color = TCM_GREEN;
    if (xs->quota_epoch != x->quota.epoch) {
        __builtin_memset(&xs->quota, 0, sizeof(xs->quota));
        xs->quota_epoch = x->quota.epoch;
    }
    if (x->quota.bytes && quota_used(&x->quota, &xs->quota, wall))
        return quota_over(
            &x->quota, &xs->quota, now, len,
            aware || (x->quota.over.flags & TCM_METER_F_COLOR_AWARE) ? in_color : (__u32)TCM_GREEN);
    if (!xs->started) {
        meter_start_warm(cfg, st, &xs->warm, now);
        xs->started = 1;
    }
    if (!aware && !(cfg->flags & TCM_METER_F_COLOR_AWARE))
        in_color = TCM_GREEN;
    if (x->warm.d_ns)
        color = meter_mark_warm_aware(cfg, &x->warm, st, &xs->warm, now, len, in_color);
    else
        color = meter_mark_aware(cfg, st, now, len, in_color);
    if (x->quota.bytes)
        quota_count(&xs->quota, len, color);
    return color;
}

#ifndef __bpf__
TCM_METER_INLINE void quota_config_init(struct tcm_quota_config *q, __u64 bytes, __u64 period_ns,
                                        __u64 anchor_ns, __u32 month_day) {
    q->bytes = bytes;
    q->period_ns = period_ns;
    q->period_recip = meter_recip(period_ns);
    q->anchor_ns = anchor_ns;
    q->month_day = month_day;
}
#endif /* !__bpf__ */

#endif /* TRICOLOR_QUOTA_H */
