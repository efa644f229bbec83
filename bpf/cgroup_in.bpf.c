// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* cgroup_in.bpf.c: what a cgroup's sockets receive (docs/spec.md §11), metered by a cgroup_skb
 * ingress program on the root of cgroup v2: tc ingress runs before the socket is known, and this
 * hook runs once it is. A program apart from tricolor.bpf.c, loaded only while an ingress cgroup
 * policy exists (each load of the data path verifies every program of its object), and given
 * tricolor.bpf.c's maps: the same policies, buckets and counters. A colour can pass or drop here
 * (the hook cannot rewrite the packet), and --aqm ecn marks CE with the kernel's helper. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"
#include "parse.h"
#include "classify.h"
#include "chain.h"
#include "act.h"

SEC("cgroup_skb/ingress")
int tricolor_cgroup_in(struct __sk_buff *skb) {
    __u32 zero = 0;
    struct tcm_runtime *rt = bpf_map_lookup_elem(&tcm_runtime, &zero);
    if (!rt)
        return 1;
    /* Read once: the rule and the config must come from the same set. */
    __u32 version = *(volatile __u32 *)&rt->active_set;
    struct tcm_cgroup_rule *r = classify_cgroup(skb, version, TCM_CGROUP_INGRESS);
    if (!r)
        return 1;
    __u32 idx = policy_cfg_index(version, r->slot);
    struct tcm_policy *pol = bpf_map_lookup_elem(&tcm_policy_cfg, &idx);
    if (!pol)
        return 1;

    /* The data starts at the IP header. Parsed for what each segment of a GRO packet repeats,
     * the DS field, and the flow keys of parents that are per address. */
    struct tcm_pkt p = {};
    p.key.ifindex = skb->ifindex;
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    int res = TCM_PARSE_NON_IP;
    if (skb->protocol == bpf_htons(ETH_P_IP))
        res = parse_ipv4(data, data_end, &p, skb->len);
    else if (skb->protocol == bpf_htons(ETH_P_IPV6))
        res = parse_ipv6(data, data_end, &p, skb->len);
    struct tcm_chain_in in = {
        .l3_total = skb->len,
        .segs = skb->gso_segs > 1 ? skb->gso_segs : 1,
        .hdr_len = res == TCM_PARSE_OK ? p.l3l4_hlen : 0,
        .in_color = TCM_GREEN,
    };
    if (pol->meter.flags & TCM_METER_F_COLOR_AWARE)
        in.in_color = act_color_of_dscp(pol, p.key.dscp);
    int metered = chain_or_ext(pol, &p.key, &in, bpf_map_lookup_elem(&tcm_global_stats, &zero));
    if (metered == TCM_NR_COLORS)
        return 1;
    __u32 color = meter_color_index(metered & TCM_METER_COLOR);
    if (pol->action[color].kind == TCM_ACT_KIND_DROP)
        return 0;
    if (metered & TCM_METER_SIGNAL) {
        __u32 id = pol->policy_id;
        __u32 len = chain_level_len(pol, &in);
        struct tcm_tcp_counters *t = bpf_map_lookup_elem(&tcm_tcp_stats, &id);
        if (pol->aqm == TCM_AQM_ECN && bpf_skb_ecn_set_ce(skb)) {
            if (t) {
                t->aqm_marked_packets += in.segs;
                t->aqm_marked_bytes += len;
            }
            return 1;
        }
        if (t) {
            t->aqm_dropped_packets += in.segs;
            t->aqm_dropped_bytes += len;
        }
        return 0;
    }
    return 1;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
