/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* shape.h: --shape sockets (docs/spec.md §8), the work of the sock_ops program in
 * tricolor.bpf.c: each TCP socket is classified once, when established, with the data path's own
 * classifier, and the sockets of a policy with `shape: sockets` are paced (SO_MAX_PACING_RATE)
 * around their share of its rate, a little over it while its bucket is at least half full and a
 * little under while not; and how tc tells a local sender of a red drop (shape_tc_drop). Why
 * each part is as it is: docs/tcp.md, "--shape sockets". */
#ifndef TRICOLOR_SHAPE_H
#define TRICOLOR_SHAPE_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "tricolor_abi.h"
#include "maps.h"
#include "classify.h"
#include "flow.h"

#ifndef SOL_SOCKET
#define SOL_SOCKET 1
#endif
/* A full segment on the wire beyond its MSS (IPv4 and TCP headers with timestamps): sizes the
 * cwnd clamp; IPv6's 20 more bytes make the clamp a little loose, which is safe. */
#define TCM_SHAPE_SEG_HEADERS 52

#ifndef SOL_TCP
#define SOL_TCP 6
#endif
#ifndef SO_MAX_PACING_RATE
#define SO_MAX_PACING_RATE 47
#endif
#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* Set by the daemon: how many policies shape sockets (0: the program returns at once), and the
 * ifindexes of the tc egress attachments to classify sockets against. */
__u32 tcm_shape_policies = 0;
__u32 tcm_shape_n_ifaces = 0;
__u32 tcm_shape_ifaces[TCM_SHAPE_MAX_IFACES] = {};

/* The classifier key of the socket's outgoing packets, ifindex left to the caller. */
static __always_inline int shape_sock_key(const struct bpf_sock_ops *skops,
                                          struct tcm_class_key *k) {
    k->proto = IPPROTO_TCP;
    k->flags = TCM_KEY_F_PORTS;
    k->sport = (__u16)skops->local_port;
    k->dport = (__u16)bpf_ntohl(skops->remote_port);
    if (skops->family == AF_INET) {
        k->src[2] = k->dst[2] = bpf_htonl(0x0000ffff);
        k->src[3] = skops->local_ip4;
        k->dst[3] = skops->remote_ip4;
        return 0;
    }
    if (skops->family != AF_INET6)
        return -1;
    k->src[0] = skops->local_ip6[0];
    k->src[1] = skops->local_ip6[1];
    k->src[2] = skops->local_ip6[2];
    k->src[3] = skops->local_ip6[3];
    k->dst[0] = skops->remote_ip6[0];
    k->dst[1] = skops->remote_ip6[1];
    k->dst[2] = skops->remote_ip6[2];
    k->dst[3] = skops->remote_ip6[3];
    /* A dual-stack socket talking IPv4 sends IPv4 packets: keep the mapped form, as parsing
     * does, and no IPv6 flag. */
    if (!(k->src[0] == 0 && k->src[1] == 0 && k->src[2] == bpf_htonl(0x0000ffff)))
        k->flags |= TCM_KEY_F_IPV6;
    return 0;
}

/* The kernel's own structs, as far as the socket's cgroup v2 id, read through BTF with CO-RE
 * (libbpf finds the offsets in the running kernel's BTF): sock_ops has no helper that names a
 * socket's cgroup, and at the established callbacks, which run in softirq, the current task's
 * cgroup is anyone's. */
struct kernfs_node___tcm {
    __u64 id;
} __attribute__((preserve_access_index));
struct cgroup___tcm {
    struct kernfs_node___tcm *kn;
} __attribute__((preserve_access_index));
struct sock_cgroup_data___tcm {
    struct cgroup___tcm *cgroup;
} __attribute__((preserve_access_index));
struct sock___tcm {
    struct sock_cgroup_data___tcm sk_cgrp_data;
} __attribute__((preserve_access_index));

/* The cgroup v2 id of the socket, as bpf_skb_cgroup_id gives it for its packets, or 0. */
static __always_inline __u64 shape_sock_cgroup(const struct bpf_sock_ops *skops) {
    struct bpf_sock *sk = skops->sk;
    if (!sk)
        return 0;
    struct sock___tcm *s = (struct sock___tcm *)bpf_skc_to_tcp_sock(sk);
    if (!s)
        return 0;
    struct cgroup___tcm *cg = s->sk_cgrp_data.cgroup;
    if (!cg)
        return 0;
    struct kernfs_node___tcm *kn = cg->kn;
    return kn ? kn->id : 0;
}

/* The socket's egress cgroup rule in policy version @version, as the tc program finds it for the
 * socket's packets (classify.h); sets tcm_cgroup_bucket as it does. */
static __always_inline struct tcm_cgroup_rule *
shape_sock_cgroup_rule(const struct bpf_sock_ops *skops, __u32 version) {
    return classify_cgroup_by(shape_sock_cgroup(skops), version, TCM_CGROUP_EGRESS);
}

/* The id of the shaping policy the socket falls under on some tc egress attachment, or -1. */
static __always_inline int shape_sock_policy(const struct bpf_sock_ops *skops) {
    struct tcm_class_key k = {};
    __u32 zero = 0;
    struct tcm_runtime *rt = bpf_map_lookup_elem(&tcm_runtime, &zero);
    if (!rt || shape_sock_key(skops, &k) < 0)
        return -1;
    struct tcm_cgroup_rule *cg = shape_sock_cgroup_rule(skops, rt->active_set);
    __u32 rank = cg ? cg->rank : ~0u, cslot = cg ? cg->slot : 0;
    __u32 n = tcm_shape_n_ifaces;
    if (n == 0)
        n = 1; /* no tc egress attachment yet: policies that name no interface still count */
    for (__u32 i = 0; i < TCM_SHAPE_MAX_IFACES && i < n; i++) {
        k.ifindex = tcm_shape_ifaces[i & (TCM_SHAPE_MAX_IFACES - 1)];
        int idx = classify_index(&k, rt->active_set, rank, cslot);
        if (idx < 0)
            continue;
        __u32 slot = idx;
        struct tcm_policy *pol = bpf_map_lookup_elem(&tcm_policy_cfg, &slot);
        if (!pol)
            continue;
        __u32 id = pol->policy_id;
        struct tcm_shape_cfg *cfg = bpf_map_lookup_elem(&tcm_shape_cfg, &id);
        if (cfg && cfg->rate)
            return id & (TCM_MAX_POLICIES - 1);
        return -1; /* the socket's policy does not shape: the first match decides */
    }
    return -1;
}

/* Fills @sp with the bucket the socket's packets are metered in under policy @id of the active
 * set, as the data path finds it (flow.h): the policy's aggregate state or the socket's flow. */
static __always_inline void shape_sock_bucket(const struct bpf_sock_ops *skops, __u32 id,
                                              struct tcm_sock_pace *sp) {
    struct tcm_class_key k = {};
    struct tcm_flow_id fk = {};
    __u32 zero = 0;

    sp->c_half = 0;
    struct tcm_runtime *rt = bpf_map_lookup_elem(&tcm_runtime, &zero);
    if (!rt)
        return;
    __u32 slot = policy_cfg_index(rt->active_set, id); /* a policy's config is at its id */
    struct tcm_policy *pol = bpf_map_lookup_elem(&tcm_policy_cfg, &slot);
    if (!pol || pol->policy_id != id)
        return;
    sp->keyed = pol->per != TCM_PER_AGGREGATE ? TCM_PACE_KEYED : 0;
    if (pol->per == TCM_PER_CGROUP)
        shape_sock_cgroup_rule(skops, rt->active_set); /* the bucket id, for flow_key_of */
    if (sp->keyed && (shape_sock_key(skops, &k) < 0 || flow_key_of(pol, &k, &fk) < 0))
        return;
    __builtin_memcpy(&sp->key, &fk, sizeof(fk));
    sp->c_half = (pol->meter.c_size >> 1) | 1; /* never 0, which means "not set up" */
}

/* Re-reads the socket's share if the count or the configuration moved, then paces it to the
 * bucket: a little over its share while the bucket is at least half full, a little under it
 * while it is not. The bucket's level is what the policer will do to the next packets, so the
 * socket settles where the bucket neither fills (tokens, and rate, wasted) nor empties (a red
 * drop, which a local TCP socket takes as congestion and, with nothing in flight, as a stall
 * until its probe timer). The level is read as of the bucket's last packet, without the lock:
 * a little stale, never torn (one aligned word). One compare per ACK; the divisions happen only
 * when the share changes. */
static __always_inline void shape_sock_repace(struct bpf_sock_ops *skops, struct tcm_sock_shape *ss,
                                              struct tcm_sock_pace *sp, struct tcm_sock_cwnd *cw) {
    __u32 id = (ss->policy_id - 1) & (TCM_MAX_POLICIES - 1);
    struct tcm_shape_cfg *cfg = bpf_map_lookup_elem(&tcm_shape_cfg, &id);
    struct tcm_shape_state *st = bpf_map_lookup_elem(&tcm_shape_state, &id);
    if (!cfg || !st)
        return;
    __u32 gen = st->gen + cfg->gen;
    __u32 rate;
    if (gen != ss->gen) {
        ss->gen = gen;
        __u64 share = cfg->rate;
        __u32 n = st->sockets + (ss->counted == 0 ? 1 : 0);
        if (!cfg->per_socket && n > 1 && n < 0x80000000u)
            share /= n; /* only when the count or the configuration changed */
        __u64 lo = share - (share >> 5), hi = share + (share >> 6);
        /* 0 (no longer shaped) and anything beyond 32 bits: unlimited. */
        __u32 lo32 = (share == 0 || lo >= 0xffffffffull) ? 0xffffffffu : (__u32)lo;
        __u32 hi32 = (share == 0 || hi >= 0xffffffffull) ? 0xffffffffu : (__u32)hi;
        if (!sp) {
            rate = lo32; /* no storage for the bucket: under the share, as a fixed rate */
            goto set;
        }
        sp->rate_lo = lo32;
        sp->rate_hi = hi32;
        shape_sock_bucket(skops, id, sp);
        if (cw) {
            /* The clamp: the full segments half the bucket holds (at least 2). */
            __u64 segs =
                sp->c_half / TCM_TOKENS_PER_BYTE / (skops->mss_cache + TCM_SHAPE_SEG_HEADERS);
            cw->want = sp->c_half ? (segs < 2 ? 2 : segs > 0xffff ? 0xffff : (__u32)segs) : 0;
        }
    }
    if (!sp)
        return;
    rate = sp->rate_lo;
    if (sp->c_half) {
        /* keyed 1: set up by a program whose flow key was 44 bytes; paced under the share
         * until the share is read again. */
        struct tcm_flow *f = sp->keyed == TCM_PACE_KEYED
                                 ? flow_slot_flow(flow_slot_find(&sp->key))
                             : sp->keyed == 0 ? bpf_map_lookup_elem(&tcm_policy_state, &id)
                                              : NULL;
        __u64 tokens = f ? *(volatile __u64 *)&f->meter.c_tokens : 0;
        if (tokens >= sp->c_half)
            rate = sp->rate_hi;
        else if (tokens < sp->c_half >> 1 && rate != 0xffffffffu)
            rate -= rate >> 3; /* under a quarter: refill it faster */
    }
    if (cw) {
        /* A short round trip (TCM_SHAPE_SHORT_RTT_SHIFT): the clamp; a long one, or a socket
         * no longer shaped (its policy gone: want 0; shape off: rate unlimited): none. */
        __u64 srtt = skops->srtt_us >> 3;
        __u32 clamp = cw->want && srtt * sp->rate_lo <= (sp->c_half >> TCM_SHAPE_SHORT_RTT_SHIFT)
                          ? cw->want
                          : 0;
        if (clamp != cw->set) {
            int v = clamp ? (int)clamp : 0x7fffffff;
            cw->set = clamp;
            bpf_setsockopt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, &v, sizeof(v));
        } else if (!clamp && cw->want && sp->rate_lo != 0xffffffffu && skops->total_retrans == 0 &&
                   skops->lost_out == 0 && skops->retrans_out == 0 && skops->sacked_out == 0 &&
                   skops->snd_ssthresh < 0xffff &&
                   (__u64)skops->snd_ssthresh * skops->mss_cache * 1000000 <
                       (__u64)sp->rate_lo * srtt * 2) {
            /* Still shaped (a pace bounds it), cut by local refusals alone (docs/tcp.md,
             * "--shape sockets"): back to slow start. Segments marked lost, SACKed or out for
             * retransmission are the network's word: in fast recovery an ACK can come before the
             * first retransmission counts in total_retrans, and the reset would undo that cut. The
             * setsockopt also lifts a route's "cwnd lock" clamp; a shaped socket's window is
             * ours to bound (the clamp above). */
            struct bpf_tcp_sock *tp = skops->sk ? bpf_tcp_sock(skops->sk) : 0;
            if (tp && tp->delivered_ce == 0) {
                int v = 0x7fffffff;
                bpf_setsockopt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, &v, sizeof(v));
            }
        }
    }
    /* Until the first ten segments are out: a quarter (docs/tcp.md, "--shape sockets"). */
    if (skops->data_segs_out < 10 && rate != 0xffffffffu)
        rate >>= 2;
set:
    if (rate == ss->rate)
        return;
    ss->rate = rate;
    bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate));
}

static __always_inline void shape_sock_start(struct bpf_sock_ops *skops) {
    struct bpf_sock *sk = skops->sk;
    if (!sk)
        return;
    int id = shape_sock_policy(skops);
    if (id < 0)
        return;
    struct tcm_sock_shape *ss =
        bpf_sk_storage_get(&tcm_sock_shape, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
    if (!ss || ss->policy_id)
        return;
    struct tcm_sock_pace *sp =
        bpf_sk_storage_get(&tcm_sock_pace, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
    ss->policy_id = id + 1;
    ss->counted = 0;
    ss->gen = ~0u;
    ss->rate = 0;
    bpf_sock_ops_cb_flags_set(skops, BPF_SOCK_OPS_STATE_CB_FLAG | BPF_SOCK_OPS_RTT_CB_FLAG);
    struct tcm_sock_cwnd *cw =
        bpf_sk_storage_get(&tcm_sock_cwnd, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
    if (cw) {
        cw->want = 0;
        cw->set = 0;
    }
    shape_sock_repace(skops, ss, sp, cw);
    if (cw && cw->set) {
        /* The first flight too: it leaves unpaced. */
        int iw = (int)(cw->set < 10 ? cw->set : 10);
        bpf_setsockopt(skops, SOL_TCP, TCP_BPF_IW, &iw, sizeof(iw));
    }
}

/* On an ACK: a socket that has sent enough joins the count; then its pace. */
static __always_inline void shape_sock_ack(struct bpf_sock_ops *skops, struct tcm_sock_shape *ss,
                                           struct tcm_sock_pace *sp, struct tcm_sock_cwnd *cw) {
    if (!ss->counted && skops->bytes_acked >= TCM_SHAPE_ACTIVE_BYTES) {
        __u32 id = (ss->policy_id - 1) & (TCM_MAX_POLICIES - 1);
        struct tcm_shape_state *st = bpf_map_lookup_elem(&tcm_shape_state, &id);
        if (st) {
            ss->counted = 1;
            __sync_fetch_and_add(&st->sockets, 1);
            __sync_fetch_and_add(&st->gen, 1);
        }
    }
    shape_sock_repace(skops, ss, sp, cw);
}

static __always_inline void shape_sock_stop(struct bpf_sock_ops *skops) {
    struct bpf_sock *sk = skops->sk;
    if (!sk)
        return;
    struct tcm_sock_shape *ss = bpf_sk_storage_get(&tcm_sock_shape, sk, 0, 0);
    if (!ss || !ss->policy_id || ss->counted == 2)
        return;
    __u32 was = ss->counted;
    ss->counted = 2; /* done: never joins again */
    if (was != 1)
        return;
    __u32 id = (ss->policy_id - 1) & (TCM_MAX_POLICIES - 1);
    struct tcm_shape_state *st = bpf_map_lookup_elem(&tcm_shape_state, &id);
    if (!st)
        return;
    __sync_fetch_and_add(&st->sockets, -1);
    __sync_fetch_and_add(&st->gen, 1);
}

/* The verdict for a red packet on tc egress that is to be dropped. A refused transmit
 * (TC_ACT_SHOT: the qdisc layer's NET_XMIT_DROP) is what a local sender should get, with one
 * exception: a paced socket at a short round trip (its window clamped: docs/tcp.md, "--shape
 * sockets") that has nothing else in flight. Refused, it would wait for its zero-window probe, at
 * least 200 ms (four flows starting at once through 16 KiB at RTT ~ 0 all do, together). Such a
 * packet is dropped as a lost one: TCP counts it sent, and its loss probe, two round trips and a
 * couple of milliseconds later, starts an ordinary recovery (a retransmission where the refusal
 * retransmitted nothing). A one-segment packet is refused all the same: with one packet in flight
 * the loss probe waits TCP's minimum RTO, no sooner than the zero-window probe. Under tcx,
 * TC_ACT_STOLEN is not a verdict ("next": the packet would pass); a redirect to no device is
 * dropped in both tcx and clsact and reported to the sender as sent. The packet is red and counted
 * as dropped either way: only what the sender is told differs. */
static __always_inline int shape_tc_drop(struct __sk_buff *skb) {
    if (!tcm_shape_policies || skb->gso_segs < 2)
        return TC_ACT_SHOT;
    struct bpf_sock *sk = skb->sk;
    if (!sk)
        return TC_ACT_SHOT;
    sk = bpf_sk_fullsock(sk);
    if (!sk || sk->protocol != IPPROTO_TCP)
        return TC_ACT_SHOT;
    struct tcm_sock_shape *ss = bpf_sk_storage_get(&tcm_sock_shape, sk, 0, 0);
    struct tcm_sock_cwnd *cw = bpf_sk_storage_get(&tcm_sock_cwnd, sk, 0, 0);
    if (!ss || !ss->policy_id || ss->counted == 2 || !cw || !cw->set)
        return TC_ACT_SHOT;
    struct bpf_tcp_sock *tp = bpf_tcp_sock(sk);
    /* packets_out does not count this packet yet (TCP counts it once it is sent). */
    if (!tp || tp->packets_out != 0)
        return TC_ACT_SHOT;
    return bpf_redirect(0, 0);
}

#endif /* TRICOLOR_SHAPE_H */
