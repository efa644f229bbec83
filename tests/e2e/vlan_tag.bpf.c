// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* vlan_tag.bpf.c: VLAN-tagged traffic on a kernel without 8021q (this test machine's has none):
 * on the host's veth egress, UDP to port 5312 gets an 802.1Q tag (VID 7), which tcpdump on that
 * veth records in the frame; on the namespace's veth ingress the tag is taken off again, so the
 * receiver sees plain UDP. Used by whatif_e2e_test.cpp only. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int vlan_push(struct __sk_buff *skb) {
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    struct iphdr *ip = (void *)(eth + 1);
    struct udphdr *udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) ||
        ip->protocol != IPPROTO_UDP || ip->ihl != 5 || udp->dest != bpf_htons(5312))
        return TC_ACT_OK;
    bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), 7);
    return TC_ACT_OK;
}

SEC("tc")
int vlan_pop(struct __sk_buff *skb) {
    if (skb->vlan_present)
        bpf_skb_vlan_pop(skb);
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
