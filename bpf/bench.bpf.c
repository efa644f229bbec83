// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* bench.bpf.c: baselines for the data-path benchmark, measured in the same run: an empty XDP
 * program, one that only reads the clock (the floor every exact meter pays per packet), and a
 * bare hash of 2^20 entries looked up and written in the order the per-flow figures walk theirs
 * (the floor of any per-flow state: what a flow table costs before it meters anything); and two
 * meters to hold the hot path against, a plain eBPF meter and the least an exact one does. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "bench_meters.h"
#include "tricolor_abi.h"

__u64 bench_sink = 0;

SEC("xdp")
int bench_empty(struct xdp_md *ctx) {
    return XDP_PASS;
}

SEC("xdp")
int bench_drop(struct xdp_md *ctx) {
    return XDP_DROP;
}

SEC("xdp")
int bench_clock(struct xdp_md *ctx) {
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
    SEC("xdp") int name(struct xdp_md *ctx) {                                                      \
        __u64 t0 = clocked == 2 ? bpf_ktime_get_ns() : 0;                                          \
        struct name##_key k = {};                                                                  \
        k.w[0] = 0x0a000000 | ((name##_counter++ * 2654435761u) & 0xfffff);                        \
        struct name##_value *v = bpf_map_lookup_elem(&name##_map, &k);                             \
        if (v) {                                                                                   \
            if (locked)                                                                            \
                __sync_val_compare_and_swap((__u32 *)&v->w[0], 0, 1);                              \
            if (clocked)                                                                           \
                v->w[(value_bytes) / 8 > 1] = clocked == 2 ? t0 : bpf_ktime_get_ns();              \
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

/* A green packet's memory work in a flow table of tcm_flow values, by key size, without the
 * rest of the data path (parse, classify, key build, meter arithmetic): the lookup, the flow
 * lock, the clock into the state, a bucket and the green counters written, the unlock. 44 bytes
 * is tcm_flow_key; 20 would hold an IPv6 address or an IPv4 5-tuple with the policy id, 8 an IPv4
 * address with it. @spread 0: one key, the same every packet. @work: 48 dependent rounds of
 * arithmetic (xorshift-multiply: a chain no compiler folds), 1 before the lookup with the key
 * depending on them (as a parse), 2 after it depending on the bucket (as a meter), to show
 * whether such work hides under the misses at 2^20 (docs/datapath.md, "Where the per-flow gap
 * is"). */
volatile __u64 bench_flow_zero = 0;
#define BENCH_FLOW_WORK(x)                                                                         \
    _Pragma("unroll") for (int i_ = 0; i_ < 48; i_++) x = (x ^ (x >> 29)) * 0x5851f42d4c957f2dull;
/* A green packet's work on its flow @f, under the flow's lock: the clock, a bucket, the green
 * counters; @work 2 adds BENCH_FLOW_WORK on the bucket. */
#define BENCH_FLOW_METER(f, work)                                                                  \
    __sync_val_compare_and_swap(&(f)->lock, 0, 1);                                                 \
    (f)->meter.last_ns = bpf_ktime_get_ns();                                                       \
    __u64 c_ = (f)->meter.c_tokens;                                                                \
    if ((work) == 2) {                                                                             \
        BENCH_FLOW_WORK(c_)                                                                        \
    }                                                                                              \
    (f)->meter.c_tokens = c_ - 64;                                                                 \
    (f)->counters.packets[0] += 1;                                                                 \
    (f)->counters.bytes[0] += 64;                                                                  \
    __sync_lock_test_and_set(&(f)->lock, 0);
#define BENCH_FLOW(name, key_bytes, spread, work)                                                  \
    struct name##_key {                                                                            \
        __u32 w[(key_bytes) / 4];                                                                  \
    };                                                                                             \
    struct {                                                                                       \
        __uint(type, BPF_MAP_TYPE_HASH);                                                           \
        __uint(map_flags, BPF_F_NO_PREALLOC);                                                      \
        __uint(max_entries, 1 << 20);                                                              \
        __type(key, struct name##_key);                                                            \
        __type(value, struct tcm_flow);                                                            \
    } name##_map SEC(".maps");                                                                     \
    __u32 name##_counter = 0;                                                                      \
    SEC("xdp") int name(struct xdp_md *ctx) {                                                      \
        __u64 x = ctx->data_end - ctx->data;                                                       \
        if ((work) == 1) {                                                                         \
            BENCH_FLOW_WORK(x)                                                                     \
        }                                                                                          \
        struct name##_key k = {};                                                                  \
        k.w[0] = 1; /* a policy id */                                                              \
        k.w[1] = 0x0a000000 | ((spread) ? name##_counter++ * 2654435761u & 0xfffff : 0);           \
        k.w[1] ^= (__u32)(x & bench_flow_zero);                                                    \
        struct tcm_flow *f = bpf_map_lookup_elem(&name##_map, &k);                                 \
        if (f) {                                                                                   \
            BENCH_FLOW_METER(f, work)                                                              \
        } else {                                                                                   \
            struct tcm_flow fresh = {};                                                            \
            bpf_map_update_elem(&name##_map, &k, &fresh, BPF_NOEXIST);                             \
        }                                                                                          \
        bench_sink += x;                                                                           \
        return XDP_PASS;                                                                           \
    }
BENCH_FLOW(bench_flow_k44, 44, 1, 0)
BENCH_FLOW(bench_flow_k20, 20, 1, 0)
BENCH_FLOW(bench_flow_k8, 8, 1, 0)
BENCH_FLOW(bench_flow_k44_one, 44, 0, 0)
BENCH_FLOW(bench_flow_k20_one, 20, 0, 0)
BENCH_FLOW(bench_flow_k8_one, 8, 0, 0)
BENCH_FLOW(bench_flow_k44_pre, 44, 1, 1)
BENCH_FLOW(bench_flow_k44_pre_one, 44, 0, 1)
BENCH_FLOW(bench_flow_k44_post, 44, 1, 2)
BENCH_FLOW(bench_flow_k44_post_one, 44, 0, 2)

/* BENCH_FLOW's work with the flows in an array of slots probed by our own hash, as the
 * classifier's rule table (tcm_rule_table) holds rules: a keyed NH hash of the 20-byte key's
 * five words (the secret read from memory, as tcm_flow_seed would be) finished by MurmurHash3's
 * mix picks the home slot; the key is compared word by word in the slot itself, which holds the
 * flow's state beside it, where the kernel's hash reads a bucket and then an element elsewhere;
 * a key not found takes the first empty slot probed (cmpxchg on its first word). A measurement
 * of what such a table could cost a packet (docs/datapath.md, "Where the per-flow gap is"), not
 * a design: deletion, tombstones and listing are not modelled. */
struct bench_slot {
    __u32 key[5];
    __u32 pad;
    struct tcm_flow flow;
};
__u32 bench_slot_seed[6] = {0x9e3779b9u, 0x85ebca6bu, 0xc2b2ae35u,
                            0x27d4eb2fu, 0x165667b1u, 0xd3a2646cu};
#define BENCH_SLOT_PROBES 8
#define BENCH_SLOT_NH(a, b, i)                                                                     \
    ((__u64)(__u32)((a) + bench_slot_seed[i]) * (__u32)((b) + bench_slot_seed[(i) + 1]))
/* A packet's key (@spread 0: one key, the same every packet; else the next of 2^20 in a
 * scattered order) and its home hash, @x and @k and @h in the program's scope. */
#define BENCH_SLOT_KEY(name, spread)                                                               \
    __u64 x = ctx->data_end - ctx->data;                                                           \
    __u32 k[5] = {1, 0x0a000000 | ((spread) ? name##_counter++ * 2654435761u & 0xfffff : 0)};      \
    k[1] ^= (__u32)(x & bench_flow_zero);                                                          \
    __u64 h =                                                                                      \
        BENCH_SLOT_NH(k[0], k[1], 0) + BENCH_SLOT_NH(k[2], k[3], 2) + BENCH_SLOT_NH(k[4], 0, 4);   \
    h ^= h >> 33;                                                                                  \
    h *= 0xff51afd7ed558ccdull;                                                                    \
    h ^= h >> 33;
static __always_inline int bench_slot_holds(const struct bench_slot *s, const __u32 *k) {
    return ((s->key[0] ^ k[0]) | (s->key[1] ^ k[1]) | (s->key[2] ^ k[2]) | (s->key[3] ^ k[3]) |
            (s->key[4] ^ k[4])) == 0;
}
/* The end of a slot program: the flow found metered green, the packet passed. */
#define BENCH_SLOT_DONE(f)                                                                         \
    if (f) {                                                                                       \
        BENCH_FLOW_METER(f, 0)                                                                     \
    }                                                                                              \
    bench_sink += x;                                                                               \
    return XDP_PASS;
/* A probe of slot @s for key @k: its flow into @f if it holds @k, or the slot claimed for @k if
 * it is empty (the flow metered from its next packet, as BENCH_FLOW's); 1 ends the probes. */
static __always_inline int bench_slot_visit(struct bench_slot *s, const __u32 *k,
                                            struct tcm_flow **f) {
    if (bench_slot_holds(s, k)) {
        *f = &s->flow;
        return 1;
    }
    if (s->key[0] == 0 && __sync_val_compare_and_swap(&s->key[0], 0, k[0]) == 0) {
        s->key[1] = k[1];
        return 1;
    }
    return 0;
}
/* A table of @nslots slots probed from @home (an expression of h) to @next (of idx), @probes at
 * most. */
#define BENCH_SLOTS_OF(name, spread, nslots, probes, home, next)                                   \
    struct {                                                                                       \
        __uint(type, BPF_MAP_TYPE_ARRAY);                                                          \
        __uint(max_entries, (nslots));                                                             \
        __type(key, __u32);                                                                        \
        __type(value, struct bench_slot);                                                          \
    } name##_map SEC(".maps");                                                                     \
    __u32 name##_counter = 0;                                                                      \
    SEC("xdp") int name(struct xdp_md *ctx) {                                                      \
        BENCH_SLOT_KEY(name, spread)                                                               \
        __u32 idx = (home);                                                                        \
        struct tcm_flow *f = NULL;                                                                 \
        for (__u32 i = 0; i < (probes); i++, idx = (next)) {                                       \
            struct bench_slot *s = bpf_map_lookup_elem(&name##_map, &idx);                         \
            if (!s)                                                                                \
                break;                                                                             \
            if (bench_slot_visit(s, k, &f))                                                        \
                break;                                                                             \
        }                                                                                          \
        BENCH_SLOT_DONE(f)                                                                         \
    }
#define BENCH_SLOTS(name, spread, log2_slots)                                                      \
    BENCH_SLOTS_OF(name, spread, 1u << (log2_slots), BENCH_SLOT_PROBES,                            \
                   (__u32)h & ((1u << (log2_slots)) - 1), (idx + 1) & ((1u << (log2_slots)) - 1))
BENCH_SLOTS(bench_flow_slots, 1, 21)
BENCH_SLOTS(bench_flow_slots_one, 0, 10)

/* BENCH_SLOTS in a table of any size (@nslots; home by multiply-shift, no division) filled to
 * 2^20 / @nslots, up to @probes probed: how a table kept at least two thirds full (memory
 * within 1.5x its flows' slots) would cost a packet. */
#define BENCH_SLOTS_N(name, nslots, probes)                                                        \
    BENCH_SLOTS_OF(name, 1, nslots, probes, (__u32)(((h & 0xffffffffu) * (nslots)) >> 32),         \
                   idx + 1 < (nslots) ? idx + 1 : 0)
BENCH_SLOTS_N(bench_flow_slots_l50, 2097152, 128)
BENCH_SLOTS_N(bench_flow_slots_l67, 1572864, 128)
BENCH_SLOTS_N(bench_flow_slots_l80, 1310720, 128)

/* BENCH_SLOTS's flows behind an index: an open-addressed array of 8-byte entries (a 32-bit
 * fingerprint of the key's hash, the flow's place in a dense store) at most half full, and the
 * flows (key and state, as bench_slot) in a dense store that a daemon could grow a chunk at a
 * time: either one flat array (@chunked 0) or chunks of 4096 in an array of maps (@chunked 1).
 * A packet pays the index's line and then the flow's: what memory that grows with the flows
 * would cost (docs/datapath.md, "The flow table: an index"). A measurement, not a design. */
struct bench_chunk {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, struct bench_slot);
};
#define BENCH_INDEX(name, spread, log2_index, chunked)                                             \
    struct {                                                                                       \
        __uint(type, BPF_MAP_TYPE_ARRAY);                                                          \
        __uint(max_entries, 1u << (log2_index));                                                   \
        __type(key, __u32);                                                                        \
        __type(value, __u64);                                                                      \
    } name##_index SEC(".maps");                                                                   \
    struct {                                                                                       \
        __uint(type, BPF_MAP_TYPE_ARRAY);                                                          \
        __uint(max_entries, (chunked) ? 1 : 1u << 20);                                             \
        __type(key, __u32);                                                                        \
        __type(value, struct bench_slot);                                                          \
    } name##_flat SEC(".maps");                                                                    \
    struct {                                                                                       \
        __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);                                                  \
        __uint(max_entries, 256);                                                                  \
        __type(key, __u32);                                                                        \
        __array(values, struct bench_chunk);                                                       \
    } name##_chunks SEC(".maps");                                                                  \
    __u32 name##_counter = 0, name##_next = 0;                                                     \
    static __always_inline struct bench_slot *name##_entry(__u32 e) {                              \
        if (!(chunked))                                                                            \
            return bpf_map_lookup_elem(&name##_flat, &e);                                          \
        __u32 c = e >> 12, o = e & 4095;                                                           \
        void *chunk = bpf_map_lookup_elem(&name##_chunks, &c);                                     \
        return chunk ? bpf_map_lookup_elem(chunk, &o) : NULL;                                      \
    }                                                                                              \
    SEC("xdp") int name(struct xdp_md *ctx) {                                                      \
        BENCH_SLOT_KEY(name, spread)                                                               \
        __u32 fp = (__u32)(h >> 32) | 1;                                                           \
        struct tcm_flow *f = NULL;                                                                 \
        for (__u32 i = 0; i < 16; i++) {                                                           \
            __u32 idx = ((__u32)h + i) & ((1u << (log2_index)) - 1);                               \
            __u64 *ie = bpf_map_lookup_elem(&name##_index, &idx);                                  \
            if (!ie)                                                                               \
                break;                                                                             \
            __u64 v = *ie;                                                                         \
            if (v == 0) {                                                                          \
                /* Placed in a scrambled order (a bijection of 20 bits): flows come in an          \
                 * order of their own, never the order of the packets measured. */                 \
                __u32 e = __sync_fetch_and_add(&name##_next, 1) & 0xfffff;                         \
                e ^= e >> 10;                                                                      \
                e = (e * 0x5bd1e995u) & 0xfffff;                                                   \
                e ^= e >> 7;                                                                       \
                e = (e * 0x27d4eb2fu) & 0xfffff;                                                   \
                struct bench_slot *s = name##_entry(e);                                            \
                if (s) {                                                                           \
                    s->key[0] = k[0];                                                              \
                    s->key[1] = k[1];                                                              \
                    __sync_val_compare_and_swap(ie, 0, (__u64)e << 32 | fp);                       \
                }                                                                                  \
                break; /* created: metered from its next packet, as BENCH_FLOW's */                \
            }                                                                                      \
            if ((__u32)v != fp)                                                                    \
                continue;                                                                          \
            struct bench_slot *s = name##_entry((__u32)(v >> 32));                                 \
            if (s && bench_slot_holds(s, k)) {                                                     \
                f = &s->flow;                                                                      \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
        BENCH_SLOT_DONE(f)                                                                         \
    }
BENCH_INDEX(bench_flow_index, 1, 21, 0)
BENCH_INDEX(bench_flow_index_chunked, 1, 21, 1)

/* The meters tricolor's hot path is measured against (docs/datapath.md, "Against a plain
 * meter"). Both are two-rate (trTCM-like: a P and a C bucket), colour-blind, 64-bit tokens in
 * bytes, and take no decision beyond green or not.
 *
 * The plain eBPF meter, as P4's PSA eBPF backend (psabpf) meters: a hash keyed by the IPv4 source
 * (the aggregate: one key), its value a spin lock, two token counts, two rates (bytes per second)
 * and the last time; per packet a lookup, the clock, the lock, a refill of each bucket with a
 * 64-bit division, the compares, the unlock. A source not in the table is added (the 2^20-flow
 * figure preloads every source first, as the per-source figures do). */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, 1 << 20);
    __type(key, __u32);
    __type(value, struct plain_meter);
} plain_meters SEC(".maps");

__u32 plain_counter = 0;
/* bench_plain_meter_2e20's keys: 2^20, or this many in the same kind of order (as
 * tcm_bench_flows in lib/testing.h: the footprint's counts). */
const volatile __u32 plain_flows = 1u << 20;
__u64 plain_green = 0;
/* What a new key's buckets get, bytes per second (sizes 1 MB, full); 0: every packet red. */
__u64 plain_fresh_rate = 125000000000ull;

static __always_inline int plain_meter_packet(__u32 src, __u64 len) {
    struct plain_meter *m = bpf_map_lookup_elem(&plain_meters, &src);
    if (!m) {
        /* By default 1 Tbit/s both rates, 1 MB both sizes: every packet green, as tricolor's
         * always-green bench policy. */
        __u64 full = plain_fresh_rate ? 1000000 : 0;
        struct plain_meter fresh = {.p_tokens = full,
                                    .c_tokens = full,
                                    .pir = plain_fresh_rate,
                                    .cir = plain_fresh_rate,
                                    .pbs = 1000000,
                                    .cbs = 1000000,
                                    .last_ns = bpf_ktime_get_ns()};
        bpf_map_update_elem(&plain_meters, &src, &fresh, BPF_NOEXIST);
        return full != 0;
    }
    int green = 0;
    /* Before the lock: no helper may be called while a bpf_spin_lock is held. */
    __u64 now = bpf_ktime_get_ns();
    bpf_spin_lock(&m->lock);
    __u64 delta = 0;
    if (now > m->last_ns) { /* read before the lock: another CPU may have gone later */
        delta = now - m->last_ns;
        m->last_ns = now;
    }
    __u64 p = m->p_tokens + delta * m->pir / 1000000000ull;
    __u64 c = m->c_tokens + delta * m->cir / 1000000000ull;
    p = p > m->pbs ? m->pbs : p;
    c = c > m->cbs ? m->cbs : c;
    if (len <= p && len <= c) {
        p -= len;
        c -= len;
        green = 1;
    }
    m->p_tokens = p;
    m->c_tokens = c;
    bpf_spin_unlock(&m->lock);
    return green;
}

/* One key: the aggregate. */
SEC("xdp")
int bench_plain_meter(struct xdp_md *ctx) {
    plain_green += plain_meter_packet(0x0a000001, ctx->data_end - ctx->data);
    return XDP_PASS;
}

/* 2^20 sources in the per-source figures' scattered order (bench_hash's permutation). */
SEC("xdp")
int bench_plain_meter_2e20(struct xdp_md *ctx) {
    __u32 c = plain_counter++;
    __u32 src = 0x0b000000 | TCM_BENCH_KEY(c, plain_flows);
    plain_green += plain_meter_packet(src, ctx->data_end - ctx->data);
    return XDP_PASS;
}

/* The floor: the least any exact meter does. One array lookup, the same lock, one clock read,
 * one multiply-refill (tokens in bytes << 32 per ns: a rate of 2^32 means 1 byte per ns) and one
 * compare. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct floor_meter);
} floor_meters SEC(".maps");

SEC("xdp")
int bench_floor_meter(struct xdp_md *ctx) {
    __u32 zero = 0;
    struct floor_meter *m = bpf_map_lookup_elem(&floor_meters, &zero);
    if (!m)
        return XDP_PASS;
    __u64 len = (__u64)(ctx->data_end - ctx->data) << 32;
    __u64 now = bpf_ktime_get_ns();
    bpf_spin_lock(&m->lock);
    __u64 t = m->tokens;
    if (now > m->last_ns) {
        t += (now - m->last_ns) * m->rate;
        m->last_ns = now;
    }
    t = t > m->size ? m->size : t;
    if (len <= t) {
        t -= len;
        plain_green++;
    }
    m->tokens = t;
    bpf_spin_unlock(&m->lock);
    return XDP_PASS;
}

/* ---- the real path (tests/bench/xdp_rate_bench.cpp): frames through a veth --------------------
 *
 * The traffic generator, as xdp-trafficgen makes traffic: run through BPF_PROG_TEST_RUN in live
 * frames mode on one UDP frame, it rewrites the source address and sends the frame out of the
 * interface (XDP_TX). gen_mask + 1 sources (a power of two) in the scattered order above: the
 * low bits of an IPv4 source, or the last word of an IPv6 one. */
__u32 gen_mask = 0;
__u32 gen_counter = 0;

/* The frame's IPv4 source, or the last word of its IPv6 source; NULL for anything else. */
static __always_inline __u32 *bench_src_word(void *data, void *end) {
    struct ethhdr *eth = data;

    if ((void *)(eth + 1) > end)
        return NULL;
    if (eth->h_proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        return (void *)(ip + 1) > end ? NULL : &ip->saddr;
    }
    if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = (void *)(eth + 1);
        return (void *)(ip6 + 1) > end ? NULL : &ip6->saddr.in6_u.u6_addr32[3];
    }
    return NULL;
}

SEC("xdp")
int bench_gen(struct xdp_md *ctx) {
    __u32 *src = bench_src_word((void *)(long)ctx->data, (void *)(long)ctx->data_end);
    __u32 low = (gen_counter++ * 2654435761u) & gen_mask;

    if (!src)
        return XDP_ABORTED;
    *src = bpf_htonl((bpf_ntohl(*src) & ~gen_mask) | low);
    return XDP_TX;
}

/* The plain meter on the wire: keyed by the frame's IPv4 source (an IPv6 frame: the last word of
 * its source), green passed, the rest dropped. */
SEC("xdp")
int bench_plain_meter_wire(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u32 *src = bench_src_word(data, end);

    if (!src)
        return XDP_PASS;
    return plain_meter_packet(*src, end - data) ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
