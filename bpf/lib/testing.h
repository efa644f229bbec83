/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* testing.h: what the tests, `replay --engine bpf` and the benchmark switch on in the data path,
 * beside the test clock (clock.h). The switches are const volatile: libbpf freezes them in
 * .rodata at load, and the verifier removes the branches a program loaded without them never
 * takes, so the production program runs none of this. The globals stay in the production object
 * because those users load that object (Datapath sets them through its skeleton): the benchmark
 * measures the program that runs. */
#ifndef TRICOLOR_TESTING_H
#define TRICOLOR_TESTING_H

#include <bpf/bpf_endian.h>

#include "tricolor_abi.h"
#include "clock.h"
#include "parse.h"

/* Benchmark only: spread each run's source (1) or destination (2) address over 2^20 values (its
 * low 20 bits XORed with a counter's permutation) in a scattered order, so one BPF_PROG_TEST_RUN
 * with a repeat count walks a table of a million flows, IPv4 or IPv6; over tcm_bench_flows
 * values if that is set otherwise (the footprint's 10^3 and 10^5 flows). */
const volatile __u8 tcm_bench_spread = 0;
const volatile __u32 tcm_bench_flows = 1u << 20;
__u32 tcm_bench_counter = 0;

/* Testing mode only (tcm_test_clock): the last packet's matched policy id + 1 (0: none) and
 * colour, so the replay and the tests read the verdict of the real program. */
__u32 tcm_test_last_policy = 0;
__u32 tcm_test_last_color = 0;

/* A packet's start: nothing matched yet. */
static __always_inline void testing_begin(void) {
    if (tcm_test_clock)
        tcm_test_last_policy = 0;
}

/* The benchmark's address of this run, in place of the parsed packet's. */
static __always_inline void testing_spread(struct tcm_pkt *p) {
    if (tcm_bench_spread) {
        __u32 c = tcm_bench_counter++;
        __u32 n = bpf_htonl(TCM_BENCH_KEY(c, tcm_bench_flows));
        if (tcm_bench_spread == 1)
            p->key.src[3] ^= n;
        else
            p->key.dst[3] ^= n;
    }
}

/* The packet matched @pol and was coloured @color. */
static __always_inline void testing_note(const struct tcm_policy *pol, __u32 color) {
    if (tcm_test_clock) {
        tcm_test_last_policy = pol->policy_id + 1;
        tcm_test_last_color = color;
    }
}

#endif /* TRICOLOR_TESTING_H */
