// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* tricolor.bpf.c: the data path's entry points. Each is a few lines around the shared pipeline
 * (lib/pipeline.h): XDP for ingress at the driver, tc (tcx or clsact, either direction) for
 * everything XDP cannot do: skb mark, priority/classid and GSO packets. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"
#include "pipeline.h"
#include "shape.h"

SEC("xdp.frags")
int tricolor_xdp(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct tcm_pkt p = {};

    p.key.ifindex = ctx->ingress_ifindex;
    /* Multi-buffer frames are charged their full length. */
    struct tcm_frame fr = {.len = bpf_xdp_get_buff_len(ctx), .segs = 1};
    return act_xdp(pipeline_run(data, data_end, fr, &p));
}

SEC("tc")
int tricolor_tc(struct __sk_buff *skb) {
    struct tcm_pkt p = {};
    struct tcm_frame fr = {.segs = 1, .skb = skb};

    /* Headers beyond the linear part are pulled in once; 128 bytes hold any header we parse
     * except long IPv6 extension chains, which then count as malformed. */
    if (skb->data_end - skb->data < 128 && skb->len > skb->data_end - skb->data)
        bpf_skb_pull_data(skb, skb->len < 128 ? skb->len : 128);
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;

    p.key.ifindex = skb->ifindex;
    if (skb->vlan_present) {
        /* An offloaded tag is not in the data; it is the outer one. */
        p.key.vlan = skb->vlan_tci & 0x0fff;
        fr.l2_extra = 4;
    }
    if (skb->gso_segs > 1) {
        fr.segs = skb->gso_segs;
        fr.gso = 1;
    }
    fr.len = skb->len;
    return act_tc(skb, pipeline_run(data, data_end, fr, &p));
}

/* --shape sockets (lib/shape.h): a cgroup sock_ops program on the root of cgroup v2 that paces
 * the TCP sockets of policies with `shape: sockets`. */
SEC("sockops")
int tricolor_sockops(struct bpf_sock_ops *skops) {
    struct tcm_sock_shape *ss;
    struct bpf_sock *sk;

    switch (skops->op) {
    case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
    case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
        if (tcm_shape_policies)
            shape_sock_start(skops);
        break;
    case BPF_SOCK_OPS_RTT_CB:
        sk = skops->sk;
        if (!sk)
            break;
        ss = bpf_sk_storage_get(&tcm_sock_shape, sk, 0, 0);
        if (ss && ss->policy_id)
            shape_sock_ack(skops, ss, bpf_sk_storage_get(&tcm_sock_pace, sk, 0, 0),
                           bpf_sk_storage_get(&tcm_sock_cwnd, sk, 0, 0));
        break;
    case BPF_SOCK_OPS_STATE_CB:
        /* args[1]: the new state. */
        if (skops->args[1] == BPF_TCP_FIN_WAIT2 || skops->args[1] == BPF_TCP_TIME_WAIT ||
            skops->args[1] == BPF_TCP_CLOSE)
            shape_sock_stop(skops);
        break;
    }
    return 1;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
