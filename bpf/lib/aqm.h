/* aqm.h: --aqm drop|ecn, an early congestion signal for TCP senders a policer cannot pace
 * (SPEC §8). The law, per bucket pair:
 *
 *   reserve R: srtcm and rfc4115 C+E (the tokens left before red), trtcm P; S its size.
 *   deficit D = S - R after the packet was metered; level = how many eighths of S it is (0..8).
 *   The signal zone starts at half: levels 4, 5, 6 and 7 each send ONE signal, to the first
 *   packet that would pass (not red, its colour's action not drop) at or past that level.
 *   The bucket remembers the deepest level it signalled (3 bits of the flow's flags); it re-arms
 *   level by level as the reserve refills, so a bucket that fills back above half sends nothing
 *   until it drains past half again.
 *
 * So a drain sends at most four signals, spaced by S/8 of deficit, whatever the packet rate:
 * one for a single flow to react to (a CE mark, or a loss, takes an RTT to act on; CUBIC cuts
 * by 30%), and more, deeper, for aggregates of several flows or for a flow that did not slow
 * down. Unlike random early drop on the level, the number of signals per drain is fixed, not
 * proportional to the packet rate (which, at 1500-byte packets and tens of Mbit/s, drowned the
 * sender in signals: it halves on the first and the rest are lost retransmissions); unlike
 * PCN-style marking of every packet past a threshold, classic ECN senders are not halved every
 * RTT. Early-dropped packets keep the tokens their colour took: the buckets and every colour
 * are exactly §1's with or without --aqm, and what passes is a subset of what would have.
 * A full bucket never signals (D = 0 is level 0). The cost on a packet of a policy without
 * --aqm is one load and one branch. */
#ifndef TRICOLOR_AQM_H
#define TRICOLOR_AQM_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"
#include "parse.h"
#include "act.h"

/* Per CPU by policy id: the counters of --aqm and --shape edt. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, TC_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tc_tcp_counters);
} tc_tcp_stats SEC(".maps");

/* tc_flow.flags bits 24..26: the deepest level (4..7) signalled since the bucket was above half;
 * 0 when armed. */
#define TC_FLOW_AQM_SHIFT 24
#define TC_FLOW_AQM_MASK (7u << TC_FLOW_AQM_SHIFT)

/* Returned by tc_flow_meter_packet with the colour: send the early signal on this packet. */
#define TC_METER_SIGNAL 0x100

/* Called with the flow locked, after the packet was metered and coloured @color. Returns 1 if
 * this packet carries the signal. */
static __always_inline int tc_aqm_step(const struct tc_policy *pol, struct tc_flow *f,
                                       __u32 color) {
    const struct tc_meter_config *m = &pol->meter;
    __u64 size, tokens;

    if (m->algo == TC_ALGO_TRTCM) {
        size = m->e_size;
        tokens = f->meter.e_tokens;
    } else {
        size = m->c_size + m->e_size;
        tokens = f->meter.c_tokens + f->meter.e_tokens;
    }
    __u64 deficit = size > tokens ? size - tokens : 0;
    __u64 eighth = size >> 3; /* sizes fit 2^64 / 8 with room: no overflow in 7 * eighth */
    __u32 level = 0;
    if (deficit >= 4 * eighth) {
        level = 4;
        if (deficit >= 5 * eighth)
            level = 5;
        if (deficit >= 6 * eighth)
            level = 6;
        if (deficit >= 7 * eighth)
            level = 7;
    }
    __u32 done = (f->flags & TC_FLOW_AQM_MASK) >> TC_FLOW_AQM_SHIFT;
    if (level <= done) {
        if (level < done) /* refilling: re-arm the levels above */
            f->flags = (f->flags & ~TC_FLOW_AQM_MASK) | (level << TC_FLOW_AQM_SHIFT);
        return 0;
    }
    /* Deeper than signalled: this packet signals, if it is one that would pass. */
    if (color == TC_RED || pol->action[color].kind == TC_ACT_KIND_DROP)
        return 0;
    f->flags = (f->flags & ~TC_FLOW_AQM_MASK) | (level << TC_FLOW_AQM_SHIFT);
    return 1;
}

/* Sets CE on an ECN-capable packet (ECT(0) or ECT(1)); the IPv4 header checksum is patched
 * (RFC 1624), IPv6 has none. Returns 0 if marked, -1 if the packet is not ECN-capable. */
static __always_inline int tc_set_ce(void *data, void *data_end, const struct tc_pkt *p) {
    if (p->key.flags & TC_KEY_F_IPV6) {
        __be32 *word = TC_HDR(data, data_end, p->l3_off & 0xff, 4);
        if (!word)
            return -1;
        __u32 host = bpf_ntohl(*word);
        if (((host >> 20) & 3) == 0)
            return -1;
        *word = bpf_htonl(host | (3u << 20));
        return 0;
    }
    struct iphdr *ip = TC_HDR(data, data_end, p->l3_off & 0xff, sizeof(struct iphdr));
    if (!ip || (ip->tos & 3) == 0)
        return -1;
    __u16 *first = (__u16 *)ip;
    __u16 old = *first;
    ip->tos |= 3;
    __u16 new = *first;
    __u32 sum = (__u16)~ip->check;
    sum += (__u16)~old;
    sum += new;
    ip->check = ~tc_csum_fold(sum);
    return 0;
}

#endif /* TRICOLOR_AQM_H */
