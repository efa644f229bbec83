/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* bench_meters.h: the state of the two meters bpf/bench.bpf.c holds the hot path against, shared
 * with tests/bench/datapath_bench.cpp, which sets the floor meter's bucket up. */
#ifndef TRICOLOR_BENCH_METERS_H
#define TRICOLOR_BENCH_METERS_H

#include <linux/bpf.h>
#include <linux/types.h>

/* The plain eBPF meter's state per key (psabpf's layout, in spirit). */
struct plain_meter {
    struct bpf_spin_lock lock;
    __u64 p_tokens, c_tokens;
    __u64 pir, cir; /* bytes per second */
    __u64 pbs, cbs;
    __u64 last_ns;
};

/* The floor meter's one bucket. */
struct floor_meter {
    struct bpf_spin_lock lock;
    __u64 tokens; /* bytes << 32 */
    __u64 rate;   /* bytes << 32 per ns */
    __u64 size;   /* bytes << 32 */
    __u64 last_ns;
};

#endif /* TRICOLOR_BENCH_METERS_H */
