/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* act.h: what happens to a packet of each colour, in one place: the colour's action written to
 * the packet (act_apply: a DSCP rewrite) and to what the hook returns (act_xdp, act_tc: the
 * verdict, skb->mark, skb->priority), and the bit writes --aqm's signal needs (act_set_ce).
 * DSCP and CE rewrites keep the rest of the byte and, for IPv4, patch the header checksum
 * incrementally (RFC 1624); transport checksums do not cover the DS field. */
#ifndef TRICOLOR_ACT_H
#define TRICOLOR_ACT_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"
#include "parse.h"
#include "shape.h"

/* Incoming colour of a DSCP under the policy's colour map (colour-aware policies). */
static __always_inline __u32 act_color_of_dscp(const struct tcm_policy *pol, __u8 dscp) {
    __u64 word = pol->color_map[(dscp >> 5) & 1];
    return (word >> (2 * (dscp & 31))) & 3;
}

static __always_inline __u16 act_csum_fold(__u32 sum) {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return (__u16)sum;
}

/* The IPv4 header's TOS byte set to @tos, its checksum patched (RFC 1624 eqn. 3:
 * HC' = ~(~HC + ~m + m'), m the 16-bit word holding version/IHL and TOS). */
static __always_inline void act_set_ipv4_tos(struct iphdr *ip, __u8 tos) {
    __u16 *first = (__u16 *)ip;
    __u16 old = *first;
    ip->tos = tos;
    __u16 new = *first;
    __u32 sum = (__u16)~ip->check;
    sum += (__u16)~old;
    sum += new;
    ip->check = ~act_csum_fold(sum);
}

/* Rewrites the DS field of the packet at @p->l3_off; the frame was parsed, so the header is
 * there, but the verifier needs the bounds again. */
static __always_inline int act_set_dscp(void *data, void *data_end, const struct tcm_pkt *p,
                                        __u8 dscp) {
    if (p->key.flags & TCM_KEY_F_IPV6) {
        __be32 *word = tcm_hdr(data, data_end, p->l3_off & 0xff, 4);
        if (!word)
            return -1;
        __u32 host = bpf_ntohl(*word);
        host = (host & ~(0x3fu << 22)) | ((__u32)(dscp & 0x3f) << 22);
        *word = bpf_htonl(host);
        return 0;
    }
    struct iphdr *ip = tcm_hdr(data, data_end, p->l3_off & 0xff, sizeof(struct iphdr));
    if (!ip)
        return -1;
    act_set_ipv4_tos(ip, (ip->tos & 0x3) | (dscp << 2));
    return 0;
}

/* Sets CE on an ECN-capable packet (ECT(0) or ECT(1)); the IPv4 header checksum is patched
 * (RFC 1624), IPv6 has none. Returns 0 if marked, -1 if the packet is not ECN-capable. */
static __always_inline int act_set_ce(void *data, void *data_end, const struct tcm_pkt *p) {
    if (p->key.flags & TCM_KEY_F_IPV6) {
        __be32 *word = tcm_hdr(data, data_end, p->l3_off & 0xff, 4);
        if (!word)
            return -1;
        __u32 host = bpf_ntohl(*word);
        if (((host >> 20) & 3) == 0)
            return -1;
        *word = bpf_htonl(host | (3u << 20));
        return 0;
    }
    struct iphdr *ip = tcm_hdr(data, data_end, p->l3_off & 0xff, sizeof(struct iphdr));
    if (!ip || (ip->tos & 3) == 0)
        return -1;
    act_set_ipv4_tos(ip, ip->tos | 3);
    return 0;
}

/* What the hook does with the packet once act_apply has done the rest. */
struct tcm_verdict {
    __u32 drop;
    __u32 kind; /* enum tcm_action_kind of the colour's action */
    __u32 value;
};

/* Applies the action of @pol for @color to the packet (a DSCP rewrite); returns the rest, for
 * act_xdp or act_tc. */
static __always_inline struct tcm_verdict act_apply(void *data, void *data_end,
                                                    const struct tcm_pkt *p,
                                                    const struct tcm_policy *pol, __u32 color) {
    struct tcm_verdict v;

    v.kind = pol->action[color].kind;
    v.value = pol->action[color].value;
    v.drop = v.kind == TCM_ACT_KIND_DROP;
    if (v.kind == TCM_ACT_KIND_DSCP)
        act_set_dscp(data, data_end, p, v.value);
    return v;
}

/* XDP's verdict (XDP has no skb to mark). */
static __always_inline int act_xdp(struct tcm_verdict v) {
    return v.drop ? XDP_DROP : XDP_PASS;
}

/* tc's verdict, and the colour's mark or priority on the skb. How a drop is told to a local
 * sender is shape.h's choice (shape_tc_drop). */
static __always_inline int act_tc(struct __sk_buff *skb, struct tcm_verdict v) {
    if (v.drop)
        return shape_tc_drop(skb);
    if (v.kind == TCM_ACT_KIND_MARK)
        skb->mark = v.value;
    else if (v.kind == TCM_ACT_KIND_PRIORITY)
        skb->priority = v.value;
    return TC_ACT_OK;
}

#endif /* TRICOLOR_ACT_H */
