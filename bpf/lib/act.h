/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* act.h: what happens to a packet of each colour. DSCP rewrites keep the ECN bits and, for
 * IPv4, patch the header checksum incrementally (RFC 1624); transport checksums do not cover
 * the DS field, so nothing else changes. */
#ifndef TRICOLOR_ACT_H
#define TRICOLOR_ACT_H

#include "parse.h"

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
    __u16 *first = (__u16 *)ip; /* version/ihl and tos: the word the checksum sees */
    __u16 old = *first;
    ip->tos = (ip->tos & 0x3) | (dscp << 2);
    __u16 new = *first;
    /* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') */
    __u32 sum = (__u16)~ip->check;
    sum += (__u16)~old;
    sum += new;
    ip->check = ~act_csum_fold(sum);
    return 0;
}

#endif /* TRICOLOR_ACT_H */
