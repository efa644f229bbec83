// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* bench.bpf.c: baselines for the data-path benchmark, measured in the same run: an empty XDP
 * program, one that only reads the clock (the floor every exact meter pays per packet), and a
 * bare hash of 2^20 entries looked up and written in the order the per-flow figures walk theirs
 * (the floor of any per-flow state: what a flow table costs before it meters anything). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 bench_sink = 0;

SEC("xdp")
int bench_empty(struct xdp_md *ctx)
{
    return XDP_PASS;
}

SEC("xdp")
int bench_clock(struct xdp_md *ctx)
{
    bench_sink += bpf_ktime_get_ns();
    return XDP_PASS;
}

/* Hashes of 2^20 entries, looked up and written in the order the per-flow figures walk theirs
 * (the same permutation as lib/testing.h's tcm_bench_spread: every key once per 2^20 runs). The
 * bare one, an IPv4 source -> a counter, is the floor of any per-flow state; the others vary one
 * thing at a time towards tcm_flows (44-byte key, 80-byte value, not preallocated), to show
 * where a flow's cost goes. Writing the value's first and last words touches all its lines. */
#define BENCH_HASH(name, key_bytes, value_bytes, flags, locked, clocked)                           \
    struct name##_key {                                                                            \
        __u32 w[(key_bytes) / 4];                                                                  \
    };                                                                                             \
    struct name##_value {                                                                          \
        __u64 w[(value_bytes) / 8];                                                                \
    };                                                                                             \
    struct {                                                                                       \
        __uint(type, BPF_MAP_TYPE_HASH);                                                           \
        __uint(map_flags, flags);                                                                  \
        __uint(max_entries, 1 << 20);                                                              \
        __type(key, struct name##_key);                                                            \
        __type(value, struct name##_value);                                                        \
    } name##_map SEC(".maps");                                                                     \
    __u32 name##_counter = 0;                                                                      \
    SEC("xdp") int name(struct xdp_md *ctx)                                                        \
    {                                                                                              \
        __u64 t0 = clocked == 2 ? bpf_ktime_get_ns() : 0;                                          \
        struct name##_key k = {};                                                                  \
        k.w[0] = 0x0a000000 | ((name##_counter++ * 2654435761u) & 0xfffff);                        \
        struct name##_value *v = bpf_map_lookup_elem(&name##_map, &k);                             \
        if (v) {                                                                                   \
            if (locked)                                                                            \
                __sync_val_compare_and_swap((__u32 *)&v->w[0], 0, 1);                              \
            if (clocked)                                                                           \
                v->w[(value_bytes) / 8 > 1] = clocked == 2 ? t0 : bpf_ktime_get_ns();               \
            v->w[0] += 2;                                                                          \
            v->w[(value_bytes) / 8 - 1] += 1;                                                      \
            if (locked)                                                                            \
                __sync_lock_test_and_set((__u32 *)&v->w[0], 0);                                    \
        } else {                                                                                   \
            struct name##_value one = {};                                                          \
            bpf_map_update_elem(&name##_map, &k, &one, BPF_NOEXIST);                               \
        }                                                                                          \
        return XDP_PASS;                                                                           \
    }

BENCH_HASH(bench_hash_2e20, 4, 8, BPF_F_NO_PREALLOC, 0, 0) /* the bare baseline */
/* One change at a time: the flow key's size; a flow's meter state; its counters too, which is
 * tcm_flows' layout; the same preallocated; the flow lock (cmpxchg, xchg); the clock. */
BENCH_HASH(bench_hash_k44_v8, 44, 8, BPF_F_NO_PREALLOC, 0, 0)
BENCH_HASH(bench_hash_k44_v32, 44, 32, BPF_F_NO_PREALLOC, 0, 0)
BENCH_HASH(bench_hash_k44_v80, 44, 80, BPF_F_NO_PREALLOC, 0, 0)
BENCH_HASH(bench_hash_k44_v80_prealloc, 44, 80, 0, 0, 0)
BENCH_HASH(bench_hash_k44_v80_locked, 44, 80, BPF_F_NO_PREALLOC, 1, 0)
BENCH_HASH(bench_hash_k44_v80_locked_clock, 44, 80, BPF_F_NO_PREALLOC, 1, 1)
BENCH_HASH(bench_hash_k44_v80_clock_first, 44, 80, BPF_F_NO_PREALLOC, 1, 2)
BENCH_HASH(bench_hash_2e20_clock, 4, 8, BPF_F_NO_PREALLOC, 0, 1)

char LICENSE[] SEC("license") = "Dual BSD/GPL";
