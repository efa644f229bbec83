// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* replay.bpf.c: the meter as BPF bytecode, for `tricolorctl replay --engine bpf`.
 * The replay synthesizes, for each traced packet, a frame of a 14-byte Ethernet header followed
 * by the traced number of bytes, sets the test clock and the incoming colour, and runs this
 * program with BPF_PROG_TEST_RUN. xdp.frags lets frames up to 64 KiB arrive as multi-buffer
 * XDP, whose full length the program meters, as the data path does. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"
#include "meter.h"
#include "quota.h"
#include "clock.h"

#define TCM_ETH_HLEN 14

struct tcm_replay_io replay = {};

/* The meter's own decision, warm-up and all. */
static __always_inline __u32 replay_meter(__u64 now_ns, __u32 len, __u32 in_color) {
    __u32 in = replay.config.flags & TCM_METER_F_COLOR_AWARE ? in_color : TCM_GREEN;

    if (!replay.started) {
        meter_start_warm(&replay.config, &replay.state, &replay.warm_state, now_ns);
        replay.started = 1;
    }
    if (replay.warm.d_ns)
        return meter_mark_warm_aware(&replay.config, &replay.warm, &replay.state,
                                     &replay.warm_state, now_ns, len, in);
    return meter_mark_aware(&replay.config, &replay.state, now_ns, len, in);
}

SEC("xdp.frags")
int tricolor_replay(struct xdp_md *ctx) {
    __u64 now_ns = clock_now_ns();
    __u64 frame_len = bpf_xdp_get_buff_len(ctx);
    __u32 len = frame_len > TCM_ETH_HLEN ? (__u32)(frame_len - TCM_ETH_HLEN) : 0;

    if (!replay.quota.bytes) {
        replay.out_color = replay_meter(now_ns, len, replay.in_color);
    } else if (quota_used(&replay.quota, &replay.quota_state, now_ns)) {
        replay.out_color =
            quota_over(&replay.quota, &replay.quota_state, now_ns, len, replay.in_color);
    } else {
        replay.out_color = replay_meter(now_ns, len, replay.in_color);
        quota_count(&replay.quota_state, len, replay.out_color);
    }
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
