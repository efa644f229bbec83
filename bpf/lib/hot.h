/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* hot.h: the heavy hitters of the flow table, kept as the data path runs, so that
 * `tricolorctl flows --top K` needs no walk of 2^20 flows: the one packet that takes a flow's
 * bytes (green + yellow + red) from below the threshold T user space set to T or more puts the
 * flow's key in tcm_flow_hot. A packet pays a subtraction and a compare per level. Why T is read
 * after the flow's lock is released: docs/datapath.md, "flows --top at 2^20". */
#ifndef TRICOLOR_HOT_H
#define TRICOLOR_HOT_H

#include "maps.h"
#include "flow.h"

/* The threshold; UINT64_MAX (the value at load) keeps nothing. In .data rather than a pinned
 * map: it belongs to this program and its tcm_flow_hot, and no pinned layout has to change
 * for it. */
__u64 tcm_hot_threshold SEC(".data") = ~0ull;
/* Inserts into tcm_flow_hot that failed (the map full): user space then walks the table. */
__u64 tcm_hot_overflow = 0;

/* Records the flow of @key under @pol (one level of a chain) as a heavy hitter. A global
 * function, whose key is built in a per-CPU scratch slot (tcm_hot_key) by the inlined
 * flow_id_fill, not on a stack and not through flow_key_of: it is called from the deepest
 * frame of a chain (entry point, chain_meter_packet, here), and Linux 6.1 refuses a chain of
 * frames over 512 bytes, each rounded up to 32. With clang 18 and 19 the key on this stack and
 * a fourth frame for flow_key_of come to 544. */
__attribute__((noinline)) int hot_note(const struct tcm_policy *pol,
                                       const struct tcm_class_key *key) {
    __u32 zero = 0;
    __u8 one = 1;

    if (!pol || !key || pol->per == TCM_PER_AGGREGATE)
        return 0;
    struct tcm_flow_id *fk = bpf_map_lookup_elem(&tcm_hot_key, &zero);
    if (!fk)
        return 0;
    __builtin_memset(fk, 0, sizeof(*fk));
    if (flow_id_fill(pol, key, fk) < 0)
        return 0;
    /* A full flow table meters a new flow in the policy's aggregate bucket: no flow to list. */
    if (flow_slot_lookup(fk) < 0)
        return 0;
    if (bpf_map_update_elem(&tcm_flow_hot, fk, &one, BPF_ANY))
        __sync_fetch_and_add(&tcm_hot_overflow, 1);
    return 0;
}

/* After the flow's lock is released: @total is its bytes after this packet's @len, read under
 * the lock. total - T < len (unsigned) holds exactly when total - len < T <= total: one compare,
 * and never true while T is UINT64_MAX. */
static __always_inline void hot_check(const struct tcm_policy *pol, const struct tcm_class_key *key,
                                      __u64 total, __u32 len) {
    if (total - *(volatile __u64 *)&tcm_hot_threshold < len)
        hot_note(pol, key);
}

#endif /* TRICOLOR_HOT_H */
