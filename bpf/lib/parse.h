/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* parse.h: bounds-checked header walk shared by the XDP and tc entry points.
 * Ethernet, up to two VLAN tags (802.1Q, 802.1ad), IPv4 with options and fragments, IPv6 with a
 * bounded walk over hop-by-hop, routing, destination-options, fragment and AH headers, then the
 * ports of TCP, UDP, UDP-Lite and SCTP. Every read is checked against data_end; a header that
 * is cut short, or whose lengths contradict each other, makes the packet malformed. */
#ifndef TRICOLOR_PARSE_H
#define TRICOLOR_PARSE_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"

enum tcm_parse_result {
    TCM_PARSE_OK = 0,
    TCM_PARSE_NON_IP = 1,
    TCM_PARSE_MALFORMED = 2,
};

#ifndef IPPROTO_MH
#define IPPROTO_MH 135
#endif
/* No header we read starts further in (six IPv6 extension headers of 2 KiB each end before). */
#define TCM_HDR_OFF_MAX 0x7fff
#define TCM_IPV6_MAX_EXT 6 /* extension headers walked before giving up (malformed) */

struct tcm_pkt {
    struct tcm_class_key key;
    __u32 l3_off;    /* IP header, from the start of the frame */
    __u32 l3_len;    /* IP packet length its header states */
    __u32 l3l4_hlen; /* IP + L4 headers: what each GSO segment repeats */
    __u32 l4_off;    /* 0 when there is no L4 header to rewrite or read */
};

/* A pointer to @len bytes at @off of the packet, or NULL if they are not all there.
 *
 * The verifier gives a packet pointer its range only through the register the bounds check was
 * made on (and copies of it at constant offsets). An optimiser is free to compute data + off
 * twice, or to fold the NULL test into the bounds test; clang 19 checked (data + off) + len in
 * one register and loaded through another copy of data + off, which the verifier refuses. The
 * two barriers make both choices for the compiler: the pointer checked is the pointer returned,
 * and the caller's NULL test is a test of that register. See docs/datapath.md ("Packet
 * access"). */
static __always_inline void *tcm_hdr(void *data, void *data_end, __u32 off, __u32 len) {
    __u8 *hdr;
    void *ret;

    /* The verifier ranges a packet pointer only while its variable offset is provably under
     * 64 KiB; an offset built over an IPv6 extension chain is not, to every compiler. */
    if (off > TCM_HDR_OFF_MAX)
        return NULL;
    hdr = (__u8 *)data + off;
    barrier_var(hdr);
    ret = hdr + len > (__u8 *)data_end ? NULL : hdr;
    barrier_var(ret);
    return ret;
}

struct tcm_vlan_hdr {
    __be16 tci;
    __be16 proto;
};

struct tcm_ipv6_opt_hdr {
    __u8 nexthdr;
    __u8 hdrlen;
};

struct tcm_ipv6_frag_hdr {
    __u8 nexthdr;
    __u8 reserved;
    __be16 frag_off; /* offset << 3 | res | M */
    __be32 id;
};

static __always_inline void parse_map_ipv4(__u32 *dst, __be32 addr) {
    dst[0] = 0;
    dst[1] = 0;
    dst[2] = bpf_htonl(0x0000ffff);
    dst[3] = addr;
}

/* L4: ports for the protocols that have them. @avail is what the IP length leaves. */
static __always_inline int parse_l4(void *data, void *data_end, struct tcm_pkt *p, __u32 off,
                                    __u32 avail) {
    __u32 hlen;

    switch (p->key.proto) {
    case IPPROTO_TCP: {
        struct tcphdr *th = tcm_hdr(data, data_end, off, sizeof(*th));
        if (!th || avail < sizeof(*th))
            return TCM_PARSE_MALFORMED;
        hlen = th->doff * 4;
        if (hlen < sizeof(*th) || hlen > avail || !tcm_hdr(data, data_end, off, hlen))
            return TCM_PARSE_MALFORMED;
        p->key.sport = bpf_ntohs(th->source);
        p->key.dport = bpf_ntohs(th->dest);
        break;
    }
    case IPPROTO_UDP:
    case IPPROTO_UDPLITE: {
        struct udphdr *uh = tcm_hdr(data, data_end, off, sizeof(*uh));
        if (!uh || avail < sizeof(*uh))
            return TCM_PARSE_MALFORMED;
        hlen = sizeof(*uh);
        p->key.sport = bpf_ntohs(uh->source);
        p->key.dport = bpf_ntohs(uh->dest);
        break;
    }
    case IPPROTO_SCTP: {
        __be16 *ports = tcm_hdr(data, data_end, off, 12); /* common header: ports, tag, csum */
        if (!ports || avail < 12)
            return TCM_PARSE_MALFORMED;
        hlen = 12;
        p->key.sport = bpf_ntohs(ports[0]);
        p->key.dport = bpf_ntohs(ports[1]);
        break;
    }
    case IPPROTO_ICMP:
    case IPPROTO_ICMPV6:
        if (!tcm_hdr(data, data_end, off, 8) || avail < 8)
            return TCM_PARSE_MALFORMED;
        p->l3l4_hlen += 8;
        p->l4_off = off;
        return TCM_PARSE_OK;
    default:
        return TCM_PARSE_OK; /* no ports to read, nothing to check */
    }
    p->key.flags |= TCM_KEY_F_PORTS;
    p->l3l4_hlen += hlen;
    p->l4_off = off;
    return TCM_PARSE_OK;
}

static __always_inline int parse_ipv4(void *data, void *data_end, struct tcm_pkt *p,
                                      __u32 frame_len) {
    struct iphdr *ip = tcm_hdr(data, data_end, p->l3_off, sizeof(*ip));
    __u32 ihl, tot_len;
    __u16 frag;

    if (!ip || ip->version != 4)
        return TCM_PARSE_MALFORMED;
    ihl = ip->ihl * 4;
    tot_len = bpf_ntohs(ip->tot_len);
    if (ihl < sizeof(*ip) || tot_len < ihl || tot_len > frame_len - p->l3_off ||
        !tcm_hdr(data, data_end, p->l3_off, ihl))
        return TCM_PARSE_MALFORMED;
    p->l3_len = tot_len;
    p->l3l4_hlen = ihl;
    p->key.dscp = ip->tos >> 2;
    p->key.proto = ip->protocol;
    parse_map_ipv4(p->key.src, ip->saddr);
    parse_map_ipv4(p->key.dst, ip->daddr);

    frag = bpf_ntohs(ip->frag_off);
    if (frag & 0x1fff)
        return TCM_PARSE_OK; /* a later fragment: no L4 header */
    return parse_l4(data, data_end, p, p->l3_off + ihl, tot_len - ihl);
}

static __always_inline int parse_ipv6(void *data, void *data_end, struct tcm_pkt *p,
                                      __u32 frame_len) {
    struct ipv6hdr *ip6 = tcm_hdr(data, data_end, p->l3_off, sizeof(*ip6));
    __u32 off, end;
    __u8 next;

    if (!ip6 || ip6->version != 6)
        return TCM_PARSE_MALFORMED;
    p->l3_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
    if (p->l3_len > frame_len - p->l3_off)
        return TCM_PARSE_MALFORMED;
    p->key.flags |= TCM_KEY_F_IPV6;
    p->key.dscp = ((ip6->priority << 4) | (ip6->flow_lbl[0] >> 4)) >> 2;
    __builtin_memcpy(p->key.src, &ip6->saddr, 16);
    __builtin_memcpy(p->key.dst, &ip6->daddr, 16);

    off = p->l3_off + sizeof(*ip6);
    end = p->l3_off + p->l3_len;
    next = ip6->nexthdr;
#pragma unroll
    for (int i = 0; i < TCM_IPV6_MAX_EXT; i++) {
        switch (next) {
        case IPPROTO_HOPOPTS:
        case IPPROTO_ROUTING:
        case IPPROTO_DSTOPTS:
        case IPPROTO_MH: {
            struct tcm_ipv6_opt_hdr *h = tcm_hdr(data, data_end, off, sizeof(*h));
            if (!h)
                return TCM_PARSE_MALFORMED;
            next = h->nexthdr;
            off += (h->hdrlen + 1) * 8;
            break;
        }
        case IPPROTO_AH: {
            struct tcm_ipv6_opt_hdr *h = tcm_hdr(data, data_end, off, sizeof(*h));
            if (!h)
                return TCM_PARSE_MALFORMED;
            next = h->nexthdr;
            off += (h->hdrlen + 2) * 4;
            break;
        }
        case IPPROTO_FRAGMENT: {
            struct tcm_ipv6_frag_hdr *h = tcm_hdr(data, data_end, off, sizeof(*h));
            if (!h)
                return TCM_PARSE_MALFORMED;
            next = h->nexthdr;
            off += sizeof(*h);
            if (off > end)
                return TCM_PARSE_MALFORMED;
            if (bpf_ntohs(h->frag_off) & 0xfff8) {
                p->key.proto = next; /* a later fragment: no L4 header */
                p->l3l4_hlen = off - p->l3_off;
                return TCM_PARSE_OK;
            }
            break;
        }
        default:
            if (off > end)
                return TCM_PARSE_MALFORMED;
            p->key.proto = next;
            p->l3l4_hlen = off - p->l3_off;
            return parse_l4(data, data_end, p, off, end - off);
        }
        if (off > end)
            return TCM_PARSE_MALFORMED;
    }
    return TCM_PARSE_MALFORMED; /* more extension headers than we walk */
}

/* Fills @p from the frame [data, data_end) whose full length (with any fragments beyond the
 * linear part) is @frame_len. */
static __always_inline int parse_packet(void *data, void *data_end, __u32 frame_len,
                                        struct tcm_pkt *p) {
    struct ethhdr *eth = tcm_hdr(data, data_end, 0, sizeof(*eth));
    __u16 proto;
    __u32 off = sizeof(*eth);

    if (!eth)
        return TCM_PARSE_MALFORMED;
    proto = eth->h_proto;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
            break;
        struct tcm_vlan_hdr *vh = tcm_hdr(data, data_end, off, sizeof(*vh));
        if (!vh)
            return TCM_PARSE_MALFORMED;
        if (i == 0 && !p->key.vlan)
            p->key.vlan = bpf_ntohs(vh->tci) & 0x0fff;
        proto = vh->proto;
        off += sizeof(*vh);
    }
    p->l3_off = off;
    if (proto == bpf_htons(ETH_P_IP))
        return parse_ipv4(data, data_end, p, frame_len);
    if (proto == bpf_htons(ETH_P_IPV6))
        return parse_ipv6(data, data_end, p, frame_len);
    return TCM_PARSE_NON_IP;
}

#endif /* TRICOLOR_PARSE_H */
