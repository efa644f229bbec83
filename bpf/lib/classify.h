/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* classify.h: tuple-space search. Policies with the same match shape (mask) share one hash;
 * a packet probes one lookup per shape of the active set, in order of the best rank under each
 * shape, and stops once no later shape can beat what it found. The probe loop runs under
 * bpf_loop so the verifier checks its body once, whatever the number of shapes. With many
 * shapes, a cache of whole keys (tcm_class_cache) answers a packet of a known key in one lookup. */
#ifndef TRICOLOR_CLASSIFY_H
#define TRICOLOR_CLASSIFY_H

#include "maps.h"
#include "parse.h"

/* This load's sizes, powers of two set by user space before the load (Datapath::load): a policy
 * set's configs (tcm_policy_cfg holds two sets of them) and a set's slots in tcm_rule_table. Both
 * grow (by a load with bigger maps) as policies and rules are added, so that a host with few
 * does not pay for the most. */
const volatile __u32 tcm_policy_slots = TCM_MAX_POLICIES;
const volatile __u32 tcm_rule_slots = TCM_RULE_SLOTS;
/* The classification cache's slots per CPU (a power of two), as tcm_class_cache is sized. */
const volatile __u32 tcm_class_cache_slots = TCM_CLASS_CACHE_ENTRIES;

/* The index in tcm_policy_cfg of slot @slot of set @set. */
static __always_inline __u32 policy_cfg_index(__u32 set, __u32 slot) {
    const __u32 n = tcm_policy_slots; /* volatile: read once */
    return (set & 1) * n + (slot & (n - 1));
}

struct tcm_probe_ctx {
    const struct tcm_class_key *key;
    __u32 set;
    __u32 n_masks;
    __u32 best_rank;
    __u32 best_slot;
};

/* Word @i of the rule key of @key under mask @m in set @set. */
#define CLASSIFY_WORD(i)                                                                           \
    ((i) == 0 ? (set & 1) << 16 | m->id                                                            \
              : ((const __u32 *)key)[(i)-1] & ((const __u32 *)&m->mask)[(i)-1])

/* The rule of @key under mask @m in set @set's table, or NULL: the slots from the home of the
 * masked key on, to the first empty one (tricolor_abi.h). The masked words are computed where
 * they are used, not copied to a stack. A bounded loop, not unrolled: the verifier walks its
 * body once per slot, on few paths (its caller is a bpf_loop callback, checked once). */
static __always_inline struct tcm_rule *classify_rule(__u32 set, const struct tcm_class_key *key,
                                                      const struct tcm_mask *m) {
    __u32 home = TCM_RULE_HASH(CLASSIFY_WORD);
    const __u32 mask = tcm_rule_slots - 1; /* volatile: read once, not at each probe */
    const __u32 base = set & 1 ? mask + 1 : 0;

    for (__u32 i = 0; i < TCM_RULE_PROBES; i++) {
        __u32 idx = base + ((home + i) & mask);
        struct tcm_rule_slot *s = bpf_map_lookup_elem(&tcm_rule_table, &idx);
        if (!s || !s->used)
            return NULL;
        const __u32 *sw = (const __u32 *)&s->key;
        __u32 diff = 0;
#pragma unroll
        for (int k = 0; k < TCM_RULE_KEY_WORDS; k++)
            diff |= sw[k] ^ CLASSIFY_WORD(k);
        if (!diff)
            return &s->rule;
    }
    return NULL;
}
#undef CLASSIFY_WORD

static __always_inline long classify_probe_mask(__u32 i, void *arg) {
    struct tcm_probe_ctx *ctx = arg;

    if (i >= ctx->n_masks)
        return 1;
    __u32 idx = (ctx->set & 1) * TCM_MAX_MASKS + (i & (TCM_MAX_MASKS - 1));
    struct tcm_mask *m = bpf_map_lookup_elem(&tcm_masks, &idx);
    if (!m || m->min_rank > ctx->best_rank)
        return 1; /* shapes are sorted: nothing later can win */
    struct tcm_rule *r = classify_rule(ctx->set, ctx->key, m);
    if (r && r->rank < ctx->best_rank) {
        ctx->best_rank = r->rank;
        ctx->best_slot = r->slot;
    }
    return 0;
}

static long classify_probe_next_mask(__u32 i, void *arg) {
    return classify_probe_mask(i + 1, arg);
}

/* Word @i of the cache's and the doorkeeper's key: the version, then the class key's 12 words. */
#define CLASSIFY_CACHE_WORD(i) ((i) == 0 ? version : ((const __u32 *)key)[(i)-1])

/* The cache's slot for @key under @version, on this CPU, and in @h the hash that placed it
 * (its low bits place the key in the doorkeeper, its high bits in the cache). */
static __always_inline struct tcm_class_cache_entry *
classify_cache_slot(const struct tcm_class_key *key, __u32 version, __u64 *h) {
    *h = TCM_KEY_MIX(CLASSIFY_CACHE_WORD);
    __u32 slot = (__u32)(*h >> 32) & (tcm_class_cache_slots - 1);
    return bpf_map_lookup_elem(&tcm_class_cache, &slot);
}
#undef CLASSIFY_CACHE_WORD

/* Whether slot @c holds @key's answer under @version. */
static __always_inline int classify_cache_holds(const struct tcm_class_cache_entry *c,
                                                const struct tcm_class_key *key, __u32 version) {
    const __u32 *cw = (const __u32 *)&c->key, *kw = (const __u32 *)key;
    __u32 diff = (c->version ^ version) | (~c->answer & TCM_CLASS_CACHED);
#pragma unroll
    for (int k = 0; k < TCM_CLASS_KEY_WORDS; k++)
        diff |= cw[k] ^ kw[k];
    return !diff;
}

/* Whether the key of hash @h, which missed the cache, goes into it: on its second miss, as
 * TinyLFU's doorkeeper admits. A flood of new keys (spoofed sources) seen once would otherwise
 * replace, in a cache that keeps one key a slot, the keys of the flows that come back; a key
 * seen twice is likely to be seen again, and the first miss costs the probes alone.
 * docs/datapath.md, "Classification as shapes grow". */
static __always_inline int classify_door(__u64 h) {
    __u32 slot = (__u32)h & (TCM_CLASS_DOOR_SLOTS - 1), fp = (__u32)(h >> 32) | 1;
    __u32 *d = bpf_map_lookup_elem(&tcm_class_door, &slot);
    if (!d)
        return 0;
    if (*d == fp) {
        *d = 0;
        return 1;
    }
    *d = fp;
    return 0;
}

/* The index in tcm_policy_cfg of the policy @key falls under in policy version @version (its
 * bit 0 is the set), or -1. @rank and @slot: what the packet's cgroup rule found (~0u: none);
 * an address rule wins over it only with a better rank.
 * A global function, verified once on its own rather than once for every parser path that
 * reaches it (see chain_meter_packet). It costs a call; inlined, Linux 6.1 refuses the
 * pipeline with the --aqm signal and hierarchies. */
__attribute__((noinline)) int classify_index(const struct tcm_class_key *key, __u32 version,
                                             __u32 rank, __u32 slot) {
    __u32 set = version & 1;
    if (!key)
        return -1;
    struct tcm_set_info *info = bpf_map_lookup_elem(&tcm_sets, &set);
    if (!info)
        return -1;
    struct tcm_probe_ctx ctx = {
        .key = key, .set = set, .n_masks = info->n_masks, .best_rank = rank, .best_slot = slot};
    /* Many shapes: the answer of an earlier packet with the same key, if it was found in this
     * version of the policies. A packet that read an older version caches under that older
     * version, which no later packet reads: the switch itself invalidates the cache. Keys are
     * addresses only: a packet a cgroup rule found is answered without the cache. */
    struct tcm_class_cache_entry *c = NULL;
    __u64 h = 0;
    if (ctx.n_masks >= TCM_CLASS_CACHE_MIN_MASKS && rank == ~0u) {
        c = classify_cache_slot(key, version, &h);
        if (c && classify_cache_holds(c, key, version))
            return (int)(c->answer & ~TCM_CLASS_CACHED) - 1;
    }
    /* The first shape inline: most policy sets have one or two, and a bpf_loop call costs more
     * than a probe. */
    if (ctx.n_masks == 0 || classify_probe_mask(0, &ctx) == 0)
        if (ctx.n_masks > 1)
            bpf_loop(TCM_MAX_MASKS - 1, classify_probe_next_mask, &ctx, 0);
    int index = ctx.best_rank == ~0u ? -1 : (int)policy_cfg_index(set, ctx.best_slot);
    if (c && classify_door(h)) {
        __builtin_memcpy(&c->key, key, sizeof(c->key));
        c->version = version;
        c->answer = TCM_CLASS_CACHED | (__u32)(index + 1);
    }
    return index;
}

/* The cgroup rule of @dir for the cgroup @cgroup_of_ names in policy version @version_, if the
 * set has any cgroup rules; NULL otherwise. @cgroup_of_ is evaluated only then: a set without
 * cgroup policies reads no socket's cgroup. Sets tcm_cgroup_bucket for flow_id_fill either way. */
#define classify_cgroup_by(cgroup_of_, version_, dir_)                                             \
    ({                                                                                             \
        __u32 zero_ = 0, set_ = (version_)&1, at_ = set_ * TCM_CGROUP_NR_DIRS + (dir_);            \
        __u64 *bucket_ = bpf_map_lookup_elem(&tcm_cgroup_bucket, &zero_);                          \
        __u32 *n_ = bpf_map_lookup_elem(&tcm_cgroup_sets, &at_);                                   \
        struct tcm_cgroup_rule *r_ = NULL;                                                         \
        if (n_ && *n_) {                                                                           \
            struct tcm_cgroup_rule_key k_ = {.set = set_, .dir = (dir_), .cgroup = (cgroup_of_)};  \
            if (k_.cgroup)                                                                         \
                r_ = bpf_map_lookup_elem(&tcm_cgroup_rules, &k_);                                  \
        }                                                                                          \
        if (bucket_)                                                                               \
            *bucket_ = r_ ? r_->bucket : 0;                                                        \
        r_;                                                                                        \
    })

/* The cgroup rule of @dir for @skb's socket; none without a socket. On XDP (@skb NULL, known
 * where this is inlined) no map is read and tcm_cgroup_bucket is left as it is: only a cgroup
 * policy reads it (flow_id_fill, per cgroup), and only a cgroup rule finds a cgroup policy (a
 * cgroup match has no address rule: userspace/src/rules.cpp), which XDP never does. Two lookups
 * fewer on XDP's every packet. */
static __always_inline struct tcm_cgroup_rule *classify_cgroup(struct __sk_buff *skb, __u32 version,
                                                               __u32 dir) {
    if (!skb)
        return NULL;
    return classify_cgroup_by(bpf_skb_cgroup_id(skb), version, dir);
}

/* The config of the policy @key (sent by @skb's socket, if known) falls under in policy version
 * @version, or NULL. */
static __always_inline struct tcm_policy *classify_packet(const struct tcm_class_key *key,
                                                          struct __sk_buff *skb, __u32 version) {
    struct tcm_cgroup_rule *cg = classify_cgroup(skb, version, TCM_CGROUP_EGRESS);
    int idx = classify_index(key, version, cg ? cg->rank : ~0u, cg ? cg->slot : 0);
    if (idx < 0)
        return NULL;
    __u32 i = idx;
    return bpf_map_lookup_elem(&tcm_policy_cfg, &i);
}

#endif /* TRICOLOR_CLASSIFY_H */
