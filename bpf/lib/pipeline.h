/* pipeline.h: parse -> classify -> flow state -> meter -> act -> count, shared by the XDP and
 * tc entry points. The context-specific parts (frame length, GSO, skb fields, verdicts) are
 * passed in by the caller. */
#ifndef TRICOLOR_PIPELINE_H
#define TRICOLOR_PIPELINE_H

#include "maps.h"
#include "parse.h"
#include "classify.h"
#include "flow.h"
#include "act.h"

/* Benchmark only: spread each run's IPv4 source over 2^20 addresses (10.0.0.0/12) in a
 * scattered order, so one BPF_PROG_TEST_RUN with a repeat count walks a table of a million
 * flows. Frozen in .rodata at load, so production programs do not contain it. */
const volatile __u8 tc_bench_spread_src = 0;
__u32 tc_bench_counter = 0;

/* What the entry point must do after the pipeline. */
struct tc_verdict {
    __u32 drop;
    __u32 kind; /* enum tc_action_kind of the colour's action */
    __u32 value;
};

/* The metered length: the IP packet (or the frame, in l2 mode) plus the policy's overhead,
 * for each of @segs GSO segments (1 for a plain packet), each with its own headers. */
static __always_inline __u32 tc_metered_len(const struct tc_policy *pol, const struct tc_pkt *p,
                                            __u32 l3_total, __u32 segs, __u32 l2_extra) {
    __u32 len = l3_total + (segs - 1) * p->l3l4_hlen;
    if (pol->length_mode == TC_LEN_L2)
        len += segs * (p->l3_off + l2_extra);
    return len + segs * pol->overhead;
}

/* --aqm: the early signal on a packet that would pass: CE if the policy says ecn and the packet
 * is ECN-capable, else a drop (aqm.h has the law). Counted per policy apart from the colours,
 * which stay what the meter said. */
static __always_inline void tc_aqm_signal(void *data, void *data_end, const struct tc_pkt *p,
                                          const struct tc_policy *pol, struct tc_verdict *v,
                                          __u32 segs, __u32 len) {
    __u32 id = pol->policy_id;
    struct tc_tcp_counters *t = bpf_map_lookup_elem(&tc_tcp_stats, &id);
    if (pol->aqm == TC_AQM_ECN && tc_set_ce(data, data_end, p) == 0) {
        if (t) {
            t->aqm_marked_packets += segs;
            t->aqm_marked_bytes += len;
        }
        return;
    }
    v->drop = 1;
    if (t) {
        t->aqm_dropped_packets += segs;
        t->aqm_dropped_bytes += len;
    }
}

/* @l3_total: the IP bytes of the whole (possibly GSO) packet; @segs: segments it will be. */
static __always_inline struct tc_verdict tc_pipeline(void *data, void *data_end, __u32 frame_len,
                                                     struct tc_pkt *p, __u32 segs, __u32 l2_extra,
                                                     __u32 gso) {
    struct tc_verdict v = {};
    __u32 zero = 0;
    struct tc_global_counters *g = bpf_map_lookup_elem(&tc_global_stats, &zero);
    struct tc_runtime *rt = bpf_map_lookup_elem(&tc_runtime, &zero);
    if (!rt)
        return v;
    int res = tc_parse(data, data_end, frame_len, p);

    if (res != TC_PARSE_OK) {
        if (g && res == TC_PARSE_NON_IP) {
            g->non_ip_packets++;
            g->non_ip_bytes += frame_len;
        } else if (g) {
            g->malformed_packets++;
            g->malformed_bytes += frame_len;
        }
        v.drop = res == TC_PARSE_MALFORMED && rt->drop_malformed;
        return v;
    }
    if (tc_bench_spread_src) {
        /* An odd multiplier permutes the residues mod 2^20: every source once per 2^20 runs. */
        __u32 n = (tc_bench_counter++ * 2654435761u) & 0xfffff;
        p->key.src[3] = bpf_htonl(0x0a000000 | n);
    }
    /* A GSO packet's IP length field describes one segment, or nothing: use what is there. */
    __u32 l3_total = gso ? frame_len - p->l3_off : p->l3_len;

    struct tc_policy *pol = tc_classify(&p->key, rt->active_set & 1);
    if (!pol) {
        if (g) {
            g->unclassified_packets++;
            g->unclassified_bytes += l3_total;
        }
        return v;
    }
    __u32 len = tc_metered_len(pol, p, l3_total, segs, l2_extra);
    __u32 in_color = TC_GREEN;
    if (pol->meter.flags & TC_METER_F_COLOR_AWARE)
        in_color = tc_color_of_dscp(pol, p->key.dscp);
    int metered = tc_flow_meter_packet(pol, &p->key, len, in_color);
    if (metered == TC_NR_COLORS)
        return v;
    __u32 color = tc_color_index(metered & 0xff);

    __u32 id = pol->policy_id;
    struct tc_counters *c = bpf_map_lookup_elem(&tc_policy_stats, &id);
    if (c) {
        c->packets[color] += segs;
        c->bytes[color] += len;
    }
    v.kind = pol->action[color].kind;
    v.value = pol->action[color].value;
    v.drop = v.kind == TC_ACT_KIND_DROP;
    if (v.kind == TC_ACT_KIND_DSCP)
        tc_set_dscp(data, data_end, p, v.value);
    if (metered & TC_METER_SIGNAL)
        tc_aqm_signal(data, data_end, p, pol, &v, segs, len);
    return v;
}

#endif /* TRICOLOR_PIPELINE_H */
