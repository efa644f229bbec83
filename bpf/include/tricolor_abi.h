/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* tricolor_abi.h: the one header shared by the BPF programs and the C++ library.
 * Everything that crosses the user/kernel boundary (map values, globals, enums, limits) is
 * defined here once, with plain __u32/__u64 fields and explicit padding, so both compilers
 * agree on the layout without a hand-kept copy. Its names start with tcm_ (TCM_): three-colour
 * marker, the RFCs' own word (srTCM, trTCM). A struct tcm_flow is one bucket state, whether a
 * flow's (per-source policies) or a policy's whole (aggregate ones). Indices stored "plus 1"
 * (a parent, a paced socket's policy) keep 0 for "none" in zero-filled map values. */
#ifndef TRICOLOR_ABI_H
#define TRICOLOR_ABI_H

#include <linux/types.h>

/* Colours, in the order of the RFCs; the value indexes per-colour counters. */
enum tcm_color {
    TCM_GREEN = 0,
    TCM_YELLOW = 1,
    TCM_RED = 2,
    TCM_NR_COLORS = 3,
};

/* The meter algorithms: X(ENUM, name, value). The values are stored in pinned maps and must not
 * change; user space's table of algorithms (userspace/src/meter.cpp) holds the rest of each. */
#define TCM_ALGOS(X)                                                                               \
    X(SRTCM, srtcm, 0)     /* RFC 2697: C at CIR, overflow into E */                               \
    X(TRTCM, trtcm, 1)     /* RFC 2698: P at PIR, C at CIR */                                      \
    X(RFC4115, rfc4115, 2) /* RFC 4115: C at CIR, E at EIR, uncoupled */

enum tcm_algo {
#define TCM_ALGO_ENUM(upper, lower, value) TCM_ALGO_##upper = value,
    TCM_ALGOS(TCM_ALGO_ENUM)
#undef TCM_ALGO_ENUM
};

/* tcm_meter_config.flags */
#define TCM_METER_F_COLOR_AWARE 0x1u
#define TCM_METER_F_PACKET_MODE 0x2u
#define TCM_METER_F_COUPLED 0x4u     /* rfc4115 with MEF 10.3's CF=1: what overflows C goes to E */
#define TCM_METER_F_START_EMPTY 0x8u /* a new flow's buckets start empty, not full */
/* Fleet policy (docs/spec.md §10): the committed bucket C earns at the rate leased from the fleet
 * (the policy's tcm_fleet entry), not at c_rate, which is 0; C starts empty. */
#define TCM_METER_F_FLEET 0x10u
/* --warmup, --quota (docs/spec.md §14): the policy's tcm_policy_ext entry holds the warm-up's and
 * the quota's config, and its buckets' tcm_ext_state their state. Without either bit the data
 * path reads neither: a policy without them pays one bit test. */
#define TCM_METER_F_WARM 0x20u
#define TCM_METER_F_QUOTA 0x40u
/* On a policy with a parent whose chain (itself or a level above) has a warm-up or a quota: the
 * data path meters its packets by ext_chain_meter_packet (chain.h), so that every other chain
 * pays the same one bit test. Set by the daemon with the parent link, read by nothing else. */
#define TCM_METER_F_EXT_CHAIN 0x80u

/* Tokens are counted in nano-units: 10^-9 bit in byte mode, 10^-9 packet in packet mode.
 * A rate of R bit/s (or packet/s) then adds exactly R tokens every nanosecond, so the
 * fluid model's R*dt/(8*10^9) bytes is the integer R*dt with nothing rounded away. */
#define TCM_TOKENS_PER_BYTE 8000000000ull
#define TCM_TOKENS_PER_PACKET 1000000000ull

/* Limits within which every result is exact (docs/spec.md §1). With them the largest quantity the
 * meter ever holds, an srtcm C+E pair of 2 GiB, is 2^31 * 8e9 = 1.72e19 < 2^64. */
#define TCM_METER_MAX_RATE 1000000000000ull /* 1 Tbit/s, or 10^12 packet/s */
#define TCM_METER_MAX_SIZE (1ull << 30)     /* 1 GiB, or 2^30 packets */
/* A metered length above this can never fit any bucket; clamping keeps len * 8e9 < 2^64. */
#define TCM_METER_MAX_LEN (1u << 31)

/* A meter's parameters after validation, precomputed for the per-packet path.
 * Bucket "c" is the committed bucket of every algorithm; bucket "e" is the excess bucket
 * (srtcm, rfc4115) or the peak bucket P (trtcm). */
struct tcm_meter_config {
    __u64 c_rate;      /* tokens/ns into C: CIR */
    __u64 e_rate;      /* tokens/ns into E/P: EIR or PIR; 0 for srtcm (E fills from C) */
    __u64 c_size;      /* capacity of C in tokens: CBS */
    __u64 e_size;      /* capacity of E/P in tokens: EBS or PBS */
    __u64 c_fill_ns;   /* a gap of at least this fills C (srtcm: C and E) from empty */
    __u64 e_fill_ns;   /* the same for E/P (coupled: C and E); unused when nothing refills E */
    __u64 unit_tokens; /* cost of one metered unit: TCM_TOKENS_PER_BYTE or _PER_PACKET */
    __u32 algo;        /* enum tcm_algo */
    __u32 flags;       /* TCM_METER_F_* */
};

/* A bucket pair's state: 24 bytes; with a flow's lock and flags, 32: half a cache line. */
struct tcm_meter_state {
    __u64 last_ns;  /* newest arrival seen; tokens are exact as of this instant */
    __u64 c_tokens; /* 0..c_size */
    __u64 e_tokens; /* 0..e_size */
};

/* --warmup D --cold-factor K (docs/spec.md §14): a meter cold at its first packet and after a
 * gap of at least D fills its buckets at rate * j/K in the j-th of K steps of D/K from the packet
 * that found it cold, then at the full rate. Time is counted in 1/K ns there, so that the steps'
 * edges are whole, and the tokens a step adds in 1/K^2 of a token beyond the whole ones (what a
 * bucket holds of them is kept with its state), so that nothing is rounded: meter.h. */
#define TCM_WARM_MIN_K 2
#define TCM_WARM_MAX_K 16
#define TCM_WARM_MAX_NS (24ull * 3600 * 1000000000) /* K^2 * D in 1/K^2 ns stays below 2^55 */
struct tcm_warm_config {
    __u64 d_ns;     /* D; 0: no warm-up */
    __u64 k2_recip; /* floor(2^64 / K^2): meter_div_k2 divides by multiplying */
    __u32 k;        /* K */
    __u32 k2;       /* K^2 */
};

struct tcm_warm_state {
    __u64 start_ns; /* the packet that found the meter cold */
    __u32 c_rem;    /* C holds c_tokens + c_rem / K^2 tokens (0 when C is full) */
    __u32 e_rem;    /* and E (or P) e_tokens + e_rem / K^2 */
};

/* --quota BYTES/PERIOD (docs/spec.md §14): a meter's green and yellow bytes of the period; once
 * they reach the quota, the over meter (or a drop) decides instead until the period ends
 * (bpf/lib/quota.h). Periods of a fixed length start at anchor_ns + k * period_ns; calendar
 * months (period_ns 0) on month_day at anchor_ns past midnight, UTC. */
#define TCM_QUOTA_F_DROP 0x1u /* over the quota every packet is red */
struct tcm_quota_config {
    __u64 bytes;        /* the quota; 0: none */
    __u64 period_ns;    /* a fixed period; 0: calendar months */
    __u64 period_recip; /* floor(2^64 / period_ns), for meter_wait_ns's division */
    __u64 anchor_ns;    /* fixed: a period starts here; months: the time of day it starts at */
    __u32 month_day;    /* months: the day a period starts, 1 to 28 */
    __u32 flags;        /* TCM_QUOTA_F_* */
    __u32 gen;          /* changed with the periods (period_ns, anchor_ns, month_day): a state of
                           another gen keeps its used bytes, and its period ends anew */
    __u32 epoch;        /* changed when a quota is given anew: a state of another epoch starts
                           from nothing (quota_mark) */
    struct tcm_meter_config over; /* the over meter, unless TCM_QUOTA_F_DROP */
};

struct tcm_quota_state {
    __u64 used;       /* green and yellow bytes of this period */
    __u64 period_end; /* the next reset; 0: no packet yet */
    struct tcm_meter_state over;
    __u32 over_started;
    __u32 gen; /* tcm_quota_config.gen of period_end */
};

/* A meter's warm-up and quota (quota.h, quota_mark): by policy id in tcm_policy_ext. */
struct tcm_policy_ext {
    struct tcm_warm_config warm;   /* d_ns 0: none */
    struct tcm_quota_config quota; /* bytes 0: none */
};

/* What a bucket pair keeps beside its tcm_meter_state for them: in tcm_meter_ext, by the
 * bucket's tcm_flow_id (an aggregate's: the policy id, kind 0). Its own map, so no pinned layout
 * changed, and its entry outlives the flow's: a flow reclaimed idle and made again keeps the
 * quota it used this period (the daemon deletes an entry once its period is over). */
struct tcm_ext_state {
    struct tcm_warm_state warm;
    struct tcm_quota_state quota;
    __u32 started;     /* 0 until a packet reached the meter (not the over meter): it starts then */
    __u32 quota_epoch; /* tcm_quota_config.epoch of quota */
};

/* tcm_meter_ext's capacity: a state per bucket, whose entries outlive their flows for the rest of
 * a period (a source that went quiet keeps its use). Made as used (no preallocation): a cap, not
 * a cost. A bucket that finds no room is red (chain.h). */
#define TCM_EXT_STATES (4 * TCM_DEFAULT_FLOWS)

/* The one entry of tcm_wall: what bpf_ktime_get_ns() (CLOCK_MONOTONIC) lacks of UTC, for the
 * quotas' periods: UTC = the data path's clock + offset_ns (mod 2^64). The daemon writes it at
 * start and again when it moves (a step of the wall clock, a suspend). */
struct tcm_wall {
    __u64 offset_ns;
};

/* Globals of the replay program (bpf/replay.bpf.c), set through the skeleton's mmapped .bss
 * before each BPF_PROG_TEST_RUN. The trace's clock is UTC: the quota's periods read it too. */
struct tcm_replay_io {
    struct tcm_meter_config config;
    struct tcm_meter_state state;
    __u32 in_color;  /* incoming colour of the next packet */
    __u32 out_color; /* colour the program gave it */
    struct tcm_policy_ext ext;
    struct tcm_ext_state ext_state;
};

/* ---- Data path (bpf/tricolor.bpf.c) ------------------------------------------------------- */

#define TCM_MAX_POLICIES 16384    /* policy ids 0..TCM_MAX_POLICIES-1 */
#define TCM_MAX_MASKS 64          /* distinct match shapes in one policy set */
#define TCM_MAX_RULES 131072      /* classifier entries, both sets together */
#define TCM_DEFAULT_FLOWS 1048576 /* per-key flow table capacity unless set at load */
/* The flow table's capacity when tricolord makes it (--flows); it grows 4x when half full, up
 * to TCM_DEFAULT_FLOWS (--max-flows): docs/daemon.md, "The flow table". */
#define TCM_START_FLOWS 16384
/* What tricolord starts its policy configs (slots per set, tcm_policy_cfg) and classifier table
 * (slots per set, tcm_rule_table) at; each grows 4x before a change that needs more, up to
 * TCM_MAX_POLICIES and TCM_RULE_SLOTS (docs/daemon.md, "The flow table"). */
#define TCM_START_POLICY_SLOTS 1024
#define TCM_START_RULE_SLOTS 4096
/* The benchmarks' scattered order over @n keys (tcm_bench_spread in bpf/lib/testing.h, the plain
 * meter in bpf/bench.bpf.c): run @c's key. A multiplier prime to @n permutes the residues mod
 * @n, so every key comes once per @n runs (2654435761 is prime to 2 and 5); a mask where @n is
 * a power of two, as the 2^20 figures have always had it (no 64-bit division). */
#define TCM_BENCH_KEY(c, n)                                                                        \
    (((n) & ((n)-1)) == 0 ? ((__u32)(c)*2654435761u) & ((n)-1)                                     \
                          : (__u32)((__u64)(c)*2654435761u % (n)))
#define TCM_NR_SETS 2 /* policy sets: one active, one being built */
#define TCM_POLICY_NAME_LEN 64
/* Maps are pinned under <pin dir>/abi<N>/. A release that changes any map's layout bumps N and
 * migrates from the old directory deliberately; it never reuses a map it cannot read. */
#define TCM_ABI_VERSION 2
#define TCM_MAX_LEVELS 4     /* a matched policy and up to 3 parents (docs/spec.md §9) */
#define TCM_LOCK_SPINS 65536 /* cmpxchg attempts (~200 us) before a packet gives up a flow lock */

/* What a policy can match, extracted from the packet. IPv4 addresses are stored as IPv4-mapped
 * IPv6 (::ffff:a.b.c.d) so one layout serves both families; ports are in host order so that
 * ranges expand to prefixes. 48 bytes, viewed as 12 words when masked. */
struct tcm_class_key {
    __u32 ifindex;
    __u16 vlan;  /* outer VLAN id, 0 when untagged */
    __u8 dscp;   /* DS field >> 2 */
    __u8 proto;  /* IP protocol (IPv6: the upper-layer header after extensions) */
    __u16 sport; /* host order; 0 when the packet carries no ports */
    __u16 dport;
    __u8 flags; /* TCM_KEY_F_* */
    __u8 pad[3];
    __u32 src[4]; /* network order */
    __u32 dst[4];
};
#define TCM_CLASS_KEY_WORDS 12

#define TCM_KEY_F_IPV6 0x1u /* the packet is IPv6 (addresses are not mapped IPv4) */
#define TCM_KEY_F_PORTS                                                                            \
    0x2u /* sport/dport are the packet's (not a later fragment, not portless)                      \
          */

/* A classifier entry: one mask's masked key in one policy set. */
struct tcm_rule_key {
    __u32 set_mask; /* set << 16 | the mask's id (tcm_mask.id) */
    struct tcm_class_key key;
};
#define TCM_RULE_KEY_WORDS 13

struct tcm_rule {
    __u32 slot; /* the policy's id: its config is tcm_policy_cfg[set * TCM_MAX_POLICIES + slot] */
    __u32 rank; /* total order of the set's policies: lower wins (priority, then specificity).
                 * Sparse, so that one policy can be added between two without renumbering. */
};

/* The classifier's rules, tcm_rule_table (bpf/lib/classify.h): for each set an open-addressed
 * table of TCM_RULE_SLOTS slots (index set * TCM_RULE_SLOTS + i) in an array, so that a probe is
 * an inlined array access and a hash of our own, not a hash map's jhash of 52 bytes and its
 * bucket walk (docs/datapath.md, "Where the time went"). A rule sits in the first free slot at or
 * after its home slot (TCM_RULE_HASH), at most TCM_RULE_PROBES - 1 after it; a lookup stops at
 * an empty slot. Only user space writes it (userspace/src/rule_table.cpp), and only a set no
 * packet reads; deletions shift later slots back, so no slot is ever a tombstone. */
#define TCM_RULE_SLOTS 131072 /* per set: twice the rules a set holds at most */
#define TCM_RULE_PROBES 64
struct tcm_rule_slot {
    struct tcm_rule rule; /* first, and the slot 8-byte aligned: user space replaces a rule with
                             one 8-byte store */
    struct tcm_rule_key key;
    __u32 used; /* 1: holds a rule; 0: empty, ends every probe sequence through it */
} __attribute__((aligned(8)));

/* The home slot of a rule key, its 13 words (set_mask, then the masked class key) given by W
 * (TCM_KEY_MIX is the whole 64-bit hash, which the classification cache's doorkeeper uses too).
 * Pairs of words are added to constants and multiplied (NH, as UMAC hashes: the products are
 * independent, so they overlap in the pipeline), summed, and finished by MurmurHash3's 64-bit
 * mix, so that keys differing in any bit of any word land apart. Not keyed: only the
 * administrator's policies are inserted, and a lookup probes at most TCM_RULE_PROBES slots
 * whatever a packet holds. Shared by the data path and user space: they must agree. */
#define TCM_RULE_NH(W, a, b, ka, kb) ((__u64)(__u32)(W(a) + (ka)) * (__u32)(W(b) + (kb)))
/* @W(i): word i of the key, an expression (the data path masks the packet's words as it reads
 * them, with no copy on a stack its call chain has little of). */
#define TCM_KEY_MIX(W)                                                                             \
    ({                                                                                             \
        __u64 h_ = TCM_RULE_NH(W, 0, 1, 0x9e3779b9u, 0x85ebca6bu) +                                \
                   TCM_RULE_NH(W, 2, 3, 0xc2b2ae35u, 0x27d4eb2fu) +                                \
                   TCM_RULE_NH(W, 4, 5, 0x165667b1u, 0xd3a2646cu) +                                \
                   TCM_RULE_NH(W, 6, 7, 0xfd7046c5u, 0xb55a4f09u) +                                \
                   TCM_RULE_NH(W, 8, 9, 0x7feb352du, 0x846ca68bu) +                                \
                   TCM_RULE_NH(W, 10, 11, 0x68e31da4u, 0xb5297a4du) +                              \
                   (__u64)(__u32)(W(12) + 0x1b873593u) * 0xcc9e2d51u;                              \
        h_ ^= h_ >> 33;                                                                            \
        h_ *= 0xff51afd7ed558ccdull;                                                               \
        h_ ^= h_ >> 33;                                                                            \
        h_ *= 0xc4ceb9fe1a85ec53ull;                                                               \
        h_ ^= h_ >> 33;                                                                            \
        h_;                                                                                        \
    })
#define TCM_RULE_HASH(W) ((__u32)TCM_KEY_MIX(W) & (TCM_RULE_SLOTS - 1))

struct tcm_mask {
    struct tcm_class_key mask;
    __u32 min_rank; /* best rank of any rule under this mask: masks are probed in this order */
    __u32 id;       /* names the mask in its rules' keys: it stays when the probe order changes,
                     * so a change of order rewrites this array, not the rules (0 in maps pinned
                     * by a layout whose rules are keyed by position: Datapath::adopt) */
};

struct tcm_set_info {
    __u32 n_masks;
    __u32 n_policies; /* 1 + the highest slot in use */
};

/* The classification cache: the policy a packet's whole tcm_class_key fell under, so a set of
 * many match shapes costs one lookup per packet instead of one probe per shape. Direct-mapped,
 * per CPU (a flow's packets are on one CPU, RSS): an entry sits at a slot given by the hash of
 * its key and version (TCM_KEY_MIX, as the doorkeeper's) and a later key of that slot replaces
 * it. A hit costs the hash, one array lookup and a compare of the key's words, about what one
 * shape's probe costs, where the LRU hash it replaces cost a jhash of the key and a bucket walk
 * (docs/datapath.md, "Classification as shapes grow"). Each entry names the version of the
 * policies it was computed under (tcm_runtime.active_set) and is used only while that version
 * is active: a policy change never serves the old set. */
struct tcm_class_cache_entry {
    struct tcm_class_key key;
    __u32 version; /* tcm_runtime.active_set when classified */
    __u32 answer;  /* TCM_CLASS_CACHED | (classify_index's answer + 1): 0 is an empty slot */
};
#define TCM_CLASS_CACHED 0x80000000u
/* Slots per CPU, sized at load by the flow table's capacity (each CPU's share of half of it, a
 * power of two), from TCM_CLASS_CACHE_MIN_ENTRIES to TCM_CLASS_CACHE_ENTRIES: about 450 KiB in
 * all at 16384 flows whatever the CPUs (docs/datapath.md, "Classification cache"). */
#define TCM_CLASS_CACHE_ENTRIES 65536
#define TCM_CLASS_CACHE_MIN_ENTRIES 256
/* The cache's doorkeeper (bpf/lib/classify.h): per CPU, a fingerprint of each of this many
 * recent keys that missed the cache once. */
#define TCM_CLASS_DOOR_SLOTS 4096
/* With fewer shapes than this (one) the probe costs no more than the cache (measured:
 * docs/datapath.md); the cache is then neither read nor filled. */
#define TCM_CLASS_CACHE_MIN_MASKS 2

/* Policies that match the sender's cgroup (docs/spec.md §11), in maps of their own beside the
 * classifier's (so no pinned layout changed): the sending socket's cgroup id, with the set, ->
 * the best-ranked such policy. User space expands each pattern to every cgroup it matches and
 * every cgroup below those, and writes a set's entries whole before the set becomes active. */
enum tcm_cgroup_dir {
    TCM_CGROUP_EGRESS = 0,  /* what the cgroup's sockets send: tc (tricolor.bpf.c) */
    TCM_CGROUP_INGRESS = 1, /* what they receive: cgroup_skb ingress (cgroup_in.bpf.c) */
    TCM_CGROUP_NR_DIRS = 2,
};

struct tcm_cgroup_rule_key {
    __u32 set;
    __u32 dir;    /* enum tcm_cgroup_dir */
    __u64 cgroup; /* the cgroup v2 id (its directory's inode number) */
};

struct tcm_cgroup_rule {
    __u32 slot;   /* the policy's id, as tcm_rule.slot */
    __u32 rank;   /* in the same order as tcm_rule.rank: the classifier keeps the better */
    __u64 bucket; /* --per cgroup: the cgroup the pattern matched (the packet's or an ancestor) */
};
#define TCM_MAX_CGROUP_RULES 65536 /* both sets and directions together */

/* What to do with a packet of one colour. */
enum tcm_action_kind {
    TCM_ACT_KIND_PASS = 0,
    TCM_ACT_KIND_DROP = 1,
    TCM_ACT_KIND_DSCP = 2, /* value: DSCP 0..63 */
    TCM_ACT_KIND_MARK = 3, /* tc only; value: skb->mark */
    TCM_ACT_KIND_PRIORITY =
        4, /* tc only; value: skb->priority (a classid MAJ:MIN is MAJ<<16|MIN) */
};

struct tcm_action {
    __u32 kind; /* enum tcm_action_kind */
    __u32 value;
};

/* How a policy splits traffic into buckets. */
enum tcm_per {
    TCM_PER_AGGREGATE = 0,
    TCM_PER_SRC = 1, /* per source address, masked to prefix4/prefix6 */
    TCM_PER_DST = 2,
    TCM_PER_5TUPLE = 3,
    TCM_PER_CGROUP = 4, /* per cgroup its --match cgroup pattern matched (docs/spec.md §11) */
};

enum tcm_length_mode {
    TCM_LEN_L3 = 0, /* the IP packet, as the RFCs define it */
    TCM_LEN_L2 = 1, /* from the Ethernet header */
};

/* A policy's configuration, as the data path reads it. */
struct tcm_policy {
    struct tcm_meter_config meter;
    __u64 color_map[2]; /* colour-aware: incoming colour of DSCP d is bits 2(d%32)..+1 of [d/32] */
    struct tcm_action action[TCM_NR_COLORS];
    __u32 policy_id;  /* stable identity: indexes counters and aggregate state */
    __u8 per;         /* enum tcm_per */
    __u8 prefix4;     /* TCM_PER_SRC/DST: IPv4 prefix length of the key */
    __u8 prefix6;     /* and IPv6 */
    __u8 length_mode; /* enum tcm_length_mode */
    __u32 overhead;   /* bytes added to every packet (and every GSO segment) */
    __u8 aqm;         /* enum tcm_aqm_mode; 0 is off, and what older pinned maps hold here */
    __u8 shape;       /* enum tcm_shape_mode (0 off, as aqm); the data path acts on TCM_SHAPE_EDT */
    __u16 parent;     /* the parent's index in tcm_policy_cfg plus 1, in the same set; 0: none
                         (what older pinned maps hold here) */
    char name[TCM_POLICY_NAME_LEN]; /* not read by the data path: lets a restarted daemon map
                                      names back to ids, keeping their buckets and counters */
};

/* Packets and bytes per colour. */
struct tcm_counters {
    __u64 packets[TCM_NR_COLORS];
    __u64 bytes[TCM_NR_COLORS];
};

/* A flow's identity in full, as user space shows it: what the policy's `per` keeps of its packets;
 * fields the policy's `per` does not use are zero. Not the flow table's key (tcm_flow_id): it is
 * the value of tcm_flow_tuples and what Datapath::flows() lists. */
struct tcm_flow_key {
    __u32 policy_id;
    __u8 proto;
    __u8 pad;
    __u16 sport;
    __u16 dport;
    __u16 pad2;
    __u32 src[4];
    __u32 dst[4];
};

/* The key of the per-flow table (tcm_flow_slots): the policy's id and the kind of key in
 * `head`, and in `w` what the policy's `per` keeps of the packet:
 *   TCM_FLOW_SRC, TCM_FLOW_DST  the address under the policy's prefix, as tcm_class_key holds
 *                               it (16 bytes, IPv4 mapped);
 *   TCM_FLOW_5TUPLE4            IPv4 source, destination, sport | dport << 16, proto;
 *   TCM_FLOW_5TUPLE6            an IPv6 5-tuple's 128-bit keyed hash (tcm_flow_hash6); the tuple
 *                               itself is kept in tcm_flow_tuples for user space;
 *   TCM_FLOW_CGROUP             the bucket id in w[0] (low half) and w[1].
 * 20 bytes, not the 44 of a whole tcm_flow_key: a lookup hashes and compares its key whole, and
 * a key of the IPv6 5-tuple's width would cost every other kind its 24 unused bytes at every
 * packet (docs/datapath.md, "One flow: the key"). Unused words are zero. */
struct tcm_flow_id {
    __u32 head; /* policy id | kind << 24 */
    __u32 w[4];
};
enum tcm_flow_kind {
    TCM_FLOW_SRC = 1,
    TCM_FLOW_DST = 2,
    TCM_FLOW_5TUPLE4 = 3,
    TCM_FLOW_5TUPLE6 = 4,
    TCM_FLOW_CGROUP = 5,
};
#define TCM_FLOW_HEAD(policy, kind) ((__u32)(policy) | (__u32)(kind) << 24)
#define TCM_FLOW_POLICY(head) ((head)&0xffffffu)
#define TCM_FLOW_KIND(head) ((head) >> 24)

/* The secret of tcm_flow_hash6, drawn at random when the pinned maps are created and kept with
 * them (a flow's key must not change when the daemon restarts). */
#define TCM_FLOW_SEED_WORDS 20
struct tcm_flow_seed {
    __u32 k[TCM_FLOW_SEED_WORDS];
};

/* An IPv6 5-tuple's key: two NH hashes (as UMAC's: products of word pairs, each word plus a
 * secret word, summed mod 2^64) with independent secrets, each finished by MurmurHash3's 64-bit
 * mix. For two different tuples and a secret drawn at random, each hash collides with
 * probability at most 2^-32, both at once 2^-64: two flows share a bucket only then (and a
 * shared bucket gives them less, never more). @x: the 10 words (source, destination, ports,
 * proto); @out: the 4 words of w. Shared by the data path and user space: they must agree. */
#define TCM_FLOW_NH(X, k, o)                                                                       \
    ((__u64)(__u32)(X(0) + (k)[(o) + 0]) * (__u32)(X(1) + (k)[(o) + 1]) +                          \
     (__u64)(__u32)(X(2) + (k)[(o) + 2]) * (__u32)(X(3) + (k)[(o) + 3]) +                          \
     (__u64)(__u32)(X(4) + (k)[(o) + 4]) * (__u32)(X(5) + (k)[(o) + 5]) +                          \
     (__u64)(__u32)(X(6) + (k)[(o) + 6]) * (__u32)(X(7) + (k)[(o) + 7]) +                          \
     (__u64)(__u32)(X(8) + (k)[(o) + 8]) * (__u32)(X(9) + (k)[(o) + 9]))
#define TCM_FMIX64(h)                                                                              \
    ({                                                                                             \
        __u64 m_ = (h);                                                                            \
        m_ ^= m_ >> 33;                                                                            \
        m_ *= 0xff51afd7ed558ccdull;                                                               \
        m_ ^= m_ >> 33;                                                                            \
        m_ *= 0xc4ceb9fe1a85ec53ull;                                                               \
        m_ ^ (m_ >> 33);                                                                           \
    })
/* @X(i): word i of the tuple, an expression (no copy on a stack the data path has little of):
 * source (0-3), destination (4-7), sport | dport << 16, proto. @k: the seed's words. */
#define tcm_flow_hash6(X, k, out)                                                                  \
    do {                                                                                           \
        __u64 h1_ = TCM_FMIX64(TCM_FLOW_NH(X, k, 0)), h2_ = TCM_FMIX64(TCM_FLOW_NH(X, k, 10));     \
        (out)[0] = (__u32)h1_;                                                                     \
        (out)[1] = (__u32)(h1_ >> 32);                                                             \
        (out)[2] = (__u32)h2_;                                                                     \
        (out)[3] = (__u32)(h2_ >> 32);                                                             \
    } while (0)
/* Word @i of a tcm_flow_key's (or tcm_class_key's) tuple, for tcm_flow_hash6. */
#define TCM_FLOW_TUPLE_WORD(t, i)                                                                  \
    ((i) < 4    ? (t)->src[(i)&3]                                                                  \
     : (i) < 8  ? (t)->dst[(i)&3]                                                                  \
     : (i) == 8 ? (__u32)(t)->sport | (__u32)(t)->dport << 16                                      \
                : (__u32)(t)->proto)

/* tcm_flows_old and tcm_flows_prev (the flow tables of before): a lock word that says the flow
 * is in tcm_flow_slots now (flow_move_old in bpf/lib/flow.h). */
#define TCM_FLOW_MOVED 2u
/* tcm_flows_moving (.rodata): which tables of before hold flows that move at their next packet. */
#define TCM_MOVING_OLD 1u   /* tcm_flows_old: keyed by the whole tcm_flow_key (44 bytes) */
#define TCM_MOVING_PREV 2u  /* tcm_flows_prev: a hash map keyed by tcm_flow_id */
#define TCM_MOVING_SLOTS 4u /* tcm_flow_slots_prev: a table of slots of another size (a resize) */

#define TCM_FLOW_F_STARTED 0x1u /* buckets filled at the first packet */

/* Capacity of tcm_flow_hot (bpf/lib/hot.h), the flows whose bytes crossed the threshold user
 * space set for `flows --top` (docs/datapath.md, "flows --top at 2^20"), unless set at load. */
#define TCM_FLOW_HOT_ENTRIES 16384

/* A bucket pair with its lock and counters: the value of the flow table and of the
 * aggregate-state array. 32 bytes of state (lock, flags, meter) and 48 of counters. */
struct tcm_flow {
    __u32 lock; /* 0 free, 1 held: taken with cmpxchg, released with xchg */
    __u32 flags;
    struct tcm_meter_state meter;
    struct tcm_counters counters;
};

/* The per-key flow table, tcm_flow_slots (bpf/lib/flow.h): an open-addressed table in an array
 * of slots, each slot a flow's id and its tcm_flow side by side, so that a packet's flow is one
 * array access at its home slot (TCM_SLOT_HOME) where the kernel's hash map reads a bucket and
 * then an element elsewhere (docs/datapath.md, "The flow table"). The slots are any number, at
 * least TCM_SLOT_LOAD_DEN / TCM_SLOT_LOAD_NUM times the flows the table may hold (its capacity:
 * four fifths full at most), so that memory follows the flows (docs/daemon.md, "The flow
 * table"): the probes past a flow's home run on in the lines after it, which cost a packet
 * about what its home's own line does (docs/datapath.md, "The flow table: as full as it may
 * be"). A flow sits in the first free slot at or after its home (wrapping at the end), at most
 * TCM_FLOW_PROBES - 1 after it; a lookup stops at an empty slot. Deleted flows leave their slot
 * dying (no packet finds it, none may take it) and, once no packet can still hold it (an RCU
 * grace period), free: a new flow may take it, a lookup passes over it, so the probe sequences
 * through it stay whole. id.head tells the slot's state: */
#define TCM_SLOT_EMPTY 0u            /* never held a flow: ends every probe sequence */
#define TCM_SLOT_CLAIMED 0xfffffffdu /* a packet is writing the flow it creates here */
#define TCM_SLOT_DYING 0xfffffffeu   /* deleted; packets that found it before may still hold it */
#define TCM_SLOT_FREE 0xffffffffu    /* deleted, and free for a new flow */
#define TCM_SLOT_LIVE(head) ((head) != TCM_SLOT_EMPTY && (head) < TCM_SLOT_CLAIMED)
/* At four fifths full, 76 of a million flows find no free slot within 128 probes, 6527 within
 * 32 (tests/bench/flow_slots_sim.py). */
#define TCM_FLOW_PROBES 128
#define TCM_SLOT_LOAD_NUM 4 /* a table's capacity: 4/5 of its slots */
#define TCM_SLOT_LOAD_DEN 5
struct tcm_flow_slot {
    struct tcm_flow flow;  /* first: a slot's address is its flow's, with no offset that a
                              compiler may add before the lookup's NULL check (the verifier
                              refuses arithmetic on a pointer that may be NULL) */
    struct tcm_flow_id id; /* written before head is set to the flow's (never TCM_SLOT_*) */
    __u32 guard;           /* taken (1) by a packet creating a flow whose home is this slot:
                              two packets of one new flow cannot both create it */
};

/* flow_slot_create's state, in a per-CPU scratch map (tcm_slot_key): never read by user space. */
struct tcm_slot_scratch {
    struct tcm_flow_id id; /* of the flow being made */
    __u32 home;            /* its home slot */
    __u32 idx;             /* the slot being looked at (a map key) */
    __s32 found;           /* the slot of the flow, made by another meanwhile; -1: none */
    __s32 claimed;         /* a free slot claimed for it; -1: none */
    __u32 prev_idx;        /* the slot of the table of before being looked at (a map key) */
    __s32 prev;            /* the flow's slot in the table of before (a resize); -1: none */
};

/* tcm_flow_meta: what the table's layout depends on, kept with its pin (and, for the data path,
 * in its .rodata as tcm_slot_count, tcm_slot_shift and tcm_slot_seed), and the flows it holds. */
#define TCM_SLOT_SEED_WORDS 6
struct tcm_flow_meta {
    __u64 live;     /* flows in the table: added to by the data path, taken from by user space */
    __u32 capacity; /* at most this many live flows (a new one beyond: table_full) */
    __u32 slots;    /* >= capacity * TCM_SLOT_LOAD_DEN / TCM_SLOT_LOAD_NUM, >= TCM_FLOW_PROBES (a
                       power of two >= 2 * capacity in tables made before 2026-11-30) */
    __u32 seed[TCM_SLOT_SEED_WORDS]; /* the secret of TCM_SLOT_HOME */
    __u32 pad[2];
};

/* The home slot of a flow id under @k (the seed) in a table of @n slots, @shift being the bits of
 * n - 1 (TCM_SLOT_SHIFT): an NH hash of its five words under a secret (a packet chooses its
 * flow's id, so it must not be able to choose where it lands: a flood of ids of one home would
 * make every probe long), finished by MurmurHash3's mix, and its low @shift bits scaled to
 * [0, n) by a multiply and a shift, not a division (the per-packet path has none). For n a power
 * of two that is the low bits themselves, as tables made before any number of slots was allowed
 * placed their flows: their pins are read by the same code. Shared by the data path and user
 * space: they must agree. */
#define TCM_SLOT_HOME(id, k, n, shift)                                                             \
    ({                                                                                             \
        __u64 h_ = (__u64)(__u32)((id)->head + (k)[0]) * (__u32)((id)->w[0] + (k)[1]) +            \
                   (__u64)(__u32)((id)->w[1] + (k)[2]) * (__u32)((id)->w[2] + (k)[3]) +            \
                   (__u64)(__u32)((id)->w[3] + (k)[4]) * (__u32)(k)[5];                            \
        h_ ^= h_ >> 33;                                                                            \
        h_ *= 0xff51afd7ed558ccdull;                                                               \
        h_ ^= h_ >> 33;                                                                            \
        (__u32)(((h_ & ((1ull << (shift)) - 1)) * (__u64)(n)) >> (shift));                         \
    })
/* The bits of @n - 1: 2^shift is the least power of two >= @n. */
#define TCM_SLOT_SHIFT(n) ((n) <= 1 ? 0 : 32 - __builtin_clz((__u32)(n)-1))
/* The slot after @i in a table of @n: the probe sequence wraps at the end. */
#define TCM_SLOT_NEXT(i, n) ((i) + 1 < (n) ? (i) + 1 : 0)

/* Per-CPU counters of traffic that no policy metered. */
struct tcm_global_counters {
    __u64 unclassified_packets; /* IP traffic no policy matched */
    __u64 unclassified_bytes;
    __u64 non_ip_packets; /* not IPv4/IPv6 (ARP, LLDP, ...) */
    __u64 non_ip_bytes;
    __u64 malformed_packets; /* truncated or invalid headers */
    __u64 malformed_bytes;
    __u64 table_full;    /* packets of new flows metered in the aggregate bucket: flow table full */
    __u64 lock_timeouts; /* packets coloured red because a flow lock stayed taken */
};

/* Runtime settings: the one entry of the (mmapable, pinned) tcm_runtime map. */
struct tcm_runtime {
    __u32 active_set;     /* the version of the policies: bit 0 is the active set; every switch adds
                             1, so the value also tells one switch from the next (the cache's tag) */
    __u32 drop_malformed; /* 1: drop malformed packets (default: pass and count) */
};

/* ---- TCP through the policer (docs/spec.md §8): --shape and --aqm
 * ---------------------------------- */

enum tcm_shape_mode {
    TCM_SHAPE_OFF = 0,
    TCM_SHAPE_SOCKETS = 1, /* pace the policy's local TCP sockets (cgroup sock_ops) */
    TCM_SHAPE_EDT = 2,     /* departure times on tc egress under fq (bpf/lib/edt.h) */
};

enum tcm_aqm_mode {
    TCM_AQM_OFF = 0,
    TCM_AQM_DROP = 1,
    TCM_AQM_ECN = 2,
};

/* By policy id, written by the daemon: how the policy's local TCP sockets are paced. A new map
 * beside the others (not a field of tcm_policy), so no pinned layout changes. */
struct tcm_shape_cfg {
    __u64 rate;       /* bytes/s as Linux's pacing counts them (TCP payload and header) that put the
                         policy's CIR on the wire, for all its sockets; 0: not shaped */
    __u32 per_socket; /* 1: every socket gets the whole rate (the policy meters per 5-tuple) */
    __u32 gen;        /* bumped by the daemon on every change of rate or per_socket */
};

/* By policy id, written by the sock_ops program: the policy's paced sockets. */
struct tcm_shape_state {
    __u32 sockets; /* established sockets classified into the policy, not yet closed */
    __u32 gen;     /* bumped whenever sockets changes: each socket re-reads its share */
};

/* Socket-local storage of a paced socket. */
struct tcm_sock_shape {
    __u32 policy_id; /* + 1: 0 in a socket that is not paced */
    __u32 gen;       /* tcm_shape_state.gen + tcm_shape_cfg.gen when the share was last set */
    __u32 counted;   /* 0 not yet active, 1 in tcm_shape_state.sockets, 2 done */
    __u32 rate;      /* the share set, bytes/s (SO_MAX_PACING_RATE) */
};

/* Socket-local storage of a paced socket, beside tcm_sock_shape (a map of its own, so that
 * map's pinned layout stays): the bucket the socket's packets are metered in and the two rates
 * its pacing switches between as that bucket's level crosses half (shape.h). */
#define TCM_PACE_KEYED 2u /* tcm_sock_pace.keyed: the key is a tcm_flow_id */
struct tcm_sock_pace {
    struct tcm_flow_id key; /* the socket's flow in tcm_flow_slots when keyed */
    __u8 pad[24];           /* where a key of 44 bytes ended (the pinned layout) */
    __u32 keyed;   /* TCM_PACE_KEYED: the bucket is key's flow; 0: tcm_policy_state[policy];
                    * 1: set up by a program of the 44-byte key, read as not set up */
    __u64 c_half;  /* half the bucket's CBS, in tokens; 0: not set up */
    __u32 rate_lo; /* share - share/32: the bucket is under half full */
    __u32 rate_hi; /* share + share/64: the bucket is at least half full */
};

/* Socket-local storage of a paced socket, a map of its own (the two above keep their pinned
 * layouts): the congestion-window clamp of a socket whose round trip is short beside its
 * bucket (docs/tcp.md, "--shape sockets"). */
struct tcm_sock_cwnd {
    __u32 want; /* the clamp, in segments, for this socket's share of the bucket; 0: not set up */
    __u32 set;  /* the clamp in force: 0 none (the socket's round trip is long enough) */
};

/* Per-CPU by policy id: what the signal (--aqm) and the shaper did. */
struct tcm_tcp_counters {
    __u64 aqm_marked_packets; /* CE set on a packet that would have passed */
    __u64 aqm_marked_bytes;
    __u64 aqm_dropped_packets; /* dropped early: would have passed */
    __u64 aqm_dropped_bytes;
    __u64 shape_delayed_packets; /* edt: given a later departure time */
    __u64 shape_delayed_bytes;
    __u64 shape_dropped_packets; /* edt: beyond the horizon */
    __u64 shape_dropped_bytes;
};

/* --shape edt: a packet that could leave only later than this after now is dropped. A time, not
 * bytes: what a sender feels is delay. 100 ms is a long RTT's worth of queue. A local TCP sender
 * is held back by TCP small queues (which count what waits in fq: about 1 ms at its own pacing
 * rate, at most 1 MiB) and by the delay itself, which raises its RTT; it meets the horizon only
 * when it overshoots (slow start). The horizon bounds what senders that do not back off (UDP,
 * forwarded traffic) can queue, and keeps a bucket's clock at most 100 ms ahead of now (fq's
 * own horizon is 10 s). */
#define TCM_EDT_HORIZON_NS 100000000ull

/* By policy id, written by the daemon: --shape edt's reciprocal of the rate that refills the
 * bucket a red packet waits for (CIR; trtcm PIR), in tokens/ns: floor(2^64 / rate), 0 if none. */
struct tcm_edt_cfg {
    __u64 recip;
};

/* A paced socket counts as active in its policy's share once this much was acknowledged. */
#define TCM_SHAPE_ACTIVE_BYTES (16 * 1024)

/* A paced socket's round trip is short, and its congestion window clamped (bpf/lib/shape.h),
 * when its share sends under a sixteenth of half its bucket in one smoothed RTT:
 * srtt_us * share (bytes/s) <= c_half >> 17, since c_half counts 8e9 tokens per byte and
 * 8e9 / 1e6 / 2^17 ~ 1/16. Why a sixteenth: docs/datapath.md, "What the headers' comments point
 * to". The test reads it too (tests/e2e/shape_e2e_test.cpp). */
#define TCM_SHAPE_SHORT_RTT_SHIFT 17

/* Up to this many tc egress interfaces are tried when a socket is classified (a policy may
 * match an interface; a socket does not know which one its packets will leave by). */
#define TCM_SHAPE_MAX_IFACES 8

/* More tokens than any C and E can hold together (2 GiB): a gap a lease needs at least
 * fill_ns to earn this fills them, and a shorter one earns dt * rate < TCM_FLEET_FULL + rate,
 * exactly, with no overflow. */
#define TCM_FLEET_FULL (2 * TCM_METER_MAX_SIZE * TCM_TOKENS_PER_BYTE)

/* By policy id, in the mmapable tcm_fleet array: a fleet policy's lease (docs/fleet.md). C earns
 * tokens at the leased rate from from_ns (before that, at prev_rate from prev_from_ns), never past
 * until_ns, and holds at most cap. User space is the only writer of the lease: it makes seq odd,
 * writes, makes it even again; the data path (under the aggregate bucket's lock) uses a lease it
 * read between two equal, even loads of seq, and otherwise earns nothing at this packet (the next
 * one earns the time missed: accrued_ns stays). The data path is the only writer of accrued_ns
 * spilled and cut_seen. No division on the packet's path: fill_ns (TCM_FLEET_FULL/rate, rounded
 * up) is user space's. until_ns is written alone, outside seq: past it (data-path clock) C is empty
 * and earns nothing, so a host whose daemon died or lost Redis spends no fleet tokens after its
 * lease (but a packet that read the clock before until_ns and waited for the lock past it: the
 * lock's spin, ~200 us at most, which the tenth of a lease user space stops early covers). */
struct tcm_fleet_lease {
    __u64 seq;
    __u64 rate;      /* tokens per ns (bit/s, or packet/s in packet mode) */
    __u64 from_ns;   /* data-path clock */
    __u64 fill_ns;   /* smallest dt with dt * rate >= TCM_FLEET_FULL; ~0 when rate is 0 */
    __u64 prev_rate; /* the lease before this one, earned from prev_from_ns to from_ns */
    __u64 prev_from_ns;
    __u64 prev_fill_ns;
    __u64 cap;        /* tokens: C holds at most this (the host's part of CBS) */
    __u64 until_ns;   /* 0: none (a fallback's own lease) */
    __u64 cut;        /* user space bumps it (with the lease) to empty C: a lease that starts
                         anew keeps nothing of the one before */
    __u64 cut_seen;   /* data path: the cut last acted on */
    __u64 accrued_ns; /* data path: C has earned up to here */
    __u64 spilled;    /* data path: tokens earned beyond cap (srtcm: beyond E too) */
    __u64 pad;
};

/* The sizes the comments above state, and the layouts user space and the data path share:
 * checked by both compilers, so a field added in one place cannot go unnoticed. */
#ifdef __cplusplus
#define TCM_ABI_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define TCM_ABI_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
TCM_ABI_ASSERT(sizeof(struct tcm_meter_state) == 24, "tcm_meter_state: 24 bytes");
TCM_ABI_ASSERT(sizeof(struct tcm_class_key) == 4 * TCM_CLASS_KEY_WORDS,
               "tcm_class_key: 48 bytes, masked as 12 words");
TCM_ABI_ASSERT(sizeof(struct tcm_rule_key) == 4 * TCM_RULE_KEY_WORDS, "tcm_rule_key: 13 words");
TCM_ABI_ASSERT(sizeof(struct tcm_rule_slot) == 64, "tcm_rule_slot: one cache line");
TCM_ABI_ASSERT(__builtin_offsetof(struct tcm_rule_slot, rule) == 0, "tcm_rule_slot: rule first");
TCM_ABI_ASSERT((TCM_RULE_SLOTS & (TCM_RULE_SLOTS - 1)) == 0, "TCM_RULE_SLOTS: a power of two");
TCM_ABI_ASSERT(TCM_RULE_SLOTS >= TCM_MAX_RULES / TCM_NR_SETS * 2, "a set's table half empty");
TCM_ABI_ASSERT(sizeof(struct tcm_counters) == 48, "tcm_counters: 48 bytes");
TCM_ABI_ASSERT(sizeof(struct tcm_flow) == 32 + 48, "tcm_flow: 32 bytes of state, 48 of counters");
TCM_ABI_ASSERT(sizeof(struct tcm_policy) == 184, "tcm_policy: the pinned layout");
TCM_ABI_ASSERT(sizeof(struct tcm_ext_state) == 72, "tcm_ext_state: no hidden padding");
TCM_ABI_ASSERT(sizeof(struct tcm_policy_ext) == 136, "tcm_policy_ext: no hidden padding");
TCM_ABI_ASSERT(sizeof(struct tcm_edt_cfg) == 8, "tcm_edt_cfg: one reciprocal");
TCM_ABI_ASSERT(sizeof(struct tcm_flow_key) == 44, "tcm_flow_key: 44 bytes, no hidden padding");
TCM_ABI_ASSERT(sizeof(struct tcm_flow_id) == 20, "tcm_flow_id: 20 bytes, no hidden padding");
TCM_ABI_ASSERT(TCM_MAX_POLICIES <= 1 << 24, "a policy id fits tcm_flow_id's head below its kind");
TCM_ABI_ASSERT(sizeof(struct tcm_flow_slot) == 104, "tcm_flow_slot: tcm_flow, id, guard");
TCM_ABI_ASSERT(__builtin_offsetof(struct tcm_flow_slot, flow) == 0, "tcm_flow_slot: flow first");
TCM_ABI_ASSERT(sizeof(struct tcm_flow_meta) == 48, "tcm_flow_meta: 48 bytes");
TCM_ABI_ASSERT(TCM_FLOW_HEAD(TCM_MAX_POLICIES - 1, TCM_FLOW_CGROUP) < TCM_SLOT_CLAIMED &&
                   TCM_FLOW_HEAD(0, TCM_FLOW_SRC) != TCM_SLOT_EMPTY,
               "a flow's head (kind 1-5) is never one of TCM_SLOT_*");
TCM_ABI_ASSERT(sizeof(struct tcm_sock_pace) == 64, "tcm_sock_pace: 64 bytes");
TCM_ABI_ASSERT(sizeof(struct tcm_sock_cwnd) == 8, "tcm_sock_cwnd: 8 bytes");
TCM_ABI_ASSERT(sizeof(struct tcm_fleet_lease) == 112, "tcm_fleet_lease: 112 bytes");

#endif /* TRICOLOR_ABI_H */
