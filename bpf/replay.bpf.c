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

SEC("xdp.frags")
int tricolor_replay(struct xdp_md *ctx) {
    __u64 now_ns = clock_now_ns();
    __u64 frame_len = bpf_xdp_get_buff_len(ctx);
    __u32 len = frame_len > TCM_ETH_HLEN ? (__u32)(frame_len - TCM_ETH_HLEN) : 0;

    replay.out_color = quota_mark(&replay.config, &replay.ext, &replay.state, &replay.ext_state,
                                  now_ns, now_ns, len, replay.in_color, 0);
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
