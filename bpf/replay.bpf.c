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
#include "clock.h"

#define TCM_ETH_HLEN 14

struct tcm_replay_io replay = {};

SEC("xdp.frags")
int tricolor_replay(struct xdp_md *ctx) {
    __u64 now_ns = clock_now_ns();
    __u64 frame_len = bpf_xdp_get_buff_len(ctx);
    __u32 len = frame_len > TCM_ETH_HLEN ? (__u32)(frame_len - TCM_ETH_HLEN) : 0;

    __u32 in = replay.config.flags & TCM_METER_F_COLOR_AWARE ? replay.in_color : TCM_GREEN;

    if (!replay.started) {
        meter_start_warm(&replay.config, &replay.state, &replay.warm_state, now_ns);
        replay.started = 1;
    }
    if (replay.warm.d_ns)
        replay.out_color = meter_mark_warm_aware(&replay.config, &replay.warm, &replay.state,
                                                 &replay.warm_state, now_ns, len, in);
    else
        replay.out_color = meter_mark_aware(&replay.config, &replay.state, now_ns, len, in);
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
