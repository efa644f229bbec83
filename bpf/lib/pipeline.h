/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* pipeline.h: parse -> classify -> flow state -> meter -> act -> count, shared by the XDP and tc
 * entry points (tricolor.bpf.c), which supply what differs (struct tcm_frame) and return act_xdp
 * or act_tc of the verdict. */
#ifndef TRICOLOR_PIPELINE_H
#define TRICOLOR_PIPELINE_H

#include "maps.h"
#include "parse.h"
#include "classify.h"
#include "flow.h"
#include "chain.h"
#include "edt.h"
#include "aqm.h"
#include "act.h"
#include "testing.h"

/* What the hook knows of a frame beyond its bytes, filled with designated initialisers. */
struct tcm_frame {
    __u32 len;             /* bytes of the whole frame: an XDP multi-buffer frame's, or skb->len */
    __u32 segs;            /* segments it will leave as (a GSO packet), else 1 */
    __u32 l2_extra;        /* link-layer bytes not in the data (a VLAN tag the NIC took off) */
    __u32 gso;             /* 1: a GSO packet, whose IP length field is not its total */
    struct __sk_buff *skb; /* tc: the packet, for --shape edt; NULL on XDP */
};

/* Parses, classifies, meters, acts on and counts one frame; the caller returns act_xdp or act_tc
 * of what it returns. */
static __always_inline struct tcm_verdict
pipeline_run(void *data, void *data_end, const struct tcm_frame fr, struct tcm_pkt *p) {
    const __u32 frame_len = fr.len, segs = fr.segs, l2_extra = fr.l2_extra, gso = fr.gso;
    struct tcm_verdict v = {};
    __u32 zero = 0;
    struct tcm_global_counters *g = bpf_map_lookup_elem(&tcm_global_stats, &zero);
    struct tcm_runtime *rt = bpf_map_lookup_elem(&tcm_runtime, &zero);
    testing_begin();
    if (!rt)
        return v;
    int res = parse_packet(data, data_end, frame_len, p);

    if (res != TCM_PARSE_OK) {
        if (g && res == TCM_PARSE_NON_IP) {
            g->non_ip_packets++;
            g->non_ip_bytes += frame_len;
        } else if (g) {
            g->malformed_packets++;
            g->malformed_bytes += frame_len;
        }
        v.drop = res == TCM_PARSE_MALFORMED && rt->drop_malformed;
        return v;
    }
    testing_spread(p);
    /* A GSO packet's IP length field describes one segment, or nothing: use what is there. */
    __u32 l3_total = gso ? frame_len - p->l3_off : p->l3_len;

    struct tcm_policy *pol = classify_packet(&p->key, fr.skb, rt->active_set);
    if (!pol) {
        if (g) {
            g->unclassified_packets++;
            g->unclassified_bytes += l3_total;
        }
        return v;
    }
    struct tcm_chain_in in = {
        .l3_total = l3_total,
        .segs = segs,
        .hdr_len = p->l3l4_hlen,
        .l2_len = p->l3_off + l2_extra,
        .in_color = TCM_GREEN,
    };
    if (pol->meter.flags & TCM_METER_F_COLOR_AWARE)
        in.in_color = act_color_of_dscp(pol, p->key.dscp);
    /* Meters the packet through the policy and its parents, and counts it at every level; a
     * policy with shape edt, on tc, through edt.h (a chain of one: apply refuses edt in a
     * hierarchy). */
    int metered = fr.skb && pol->shape == TCM_SHAPE_EDT && !pol->parent
                      ? edt_meter_packet(pol, &p->key, &in, fr.skb)
                      : chain_or_ext(pol, &p->key, &in, g);
    if (metered == TCM_NR_COLORS)
        return v;
    __u32 color = meter_color_index(metered & TCM_METER_COLOR);
    testing_note(pol, color);
    v = act_apply(data, data_end, p, pol, color);
    if (metered & TCM_METER_SIGNAL)
        aqm_signal(data, data_end, p, pol, &v, segs, chain_level_len(pol, &in));
    /* --shape edt: red, and it could not leave within the horizon. Without a branch. */
    v.drop |= (metered & TCM_METER_SHAPE_DROP) >> TCM_METER_SHAPE_DROP_SHIFT;
    return v;
}

#endif /* TRICOLOR_PIPELINE_H */
