/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* clock.h: where the data path reads the time. Production reads bpf_ktime_get_ns(); a program
 * loaded with tcm_test_clock set reads tcm_test_clock_ns instead, which the replay and the tests
 * write before each BPF_PROG_TEST_RUN. tcm_test_clock is const volatile: libbpf freezes it in
 * .rodata at load time, so the verifier prunes the branch it never takes and production
 * programs pay nothing for the switch. */
#ifndef TRICOLOR_CLOCK_H
#define TRICOLOR_CLOCK_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

const volatile __u8 tcm_test_clock = 0;
__u64 tcm_test_clock_ns = 0;

static __always_inline __u64 clock_now_ns(void) {
    if (tcm_test_clock)
        return tcm_test_clock_ns;
    return bpf_ktime_get_ns();
}

#endif /* TRICOLOR_CLOCK_H */
