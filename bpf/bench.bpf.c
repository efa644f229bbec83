// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* bench.bpf.c: baselines for the data-path benchmark, measured in the same run: an empty XDP
 * program, and one that only reads the clock (the floor every exact meter pays per packet). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 bench_sink = 0;

SEC("xdp")
int bench_empty(struct xdp_md *ctx)
{
    return XDP_PASS;
}

SEC("xdp")
int bench_clock(struct xdp_md *ctx)
{
    bench_sink += bpf_ktime_get_ns();
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
