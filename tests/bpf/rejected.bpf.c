// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
/* rejected.bpf.c: a program every kernel's verifier refuses (an unbounded index into a map
 * value), so the tests can check what a user reads when the verifier says no. The refusal comes
 * after a long walk the verifier accepts (its log runs to tens of KiB, as a real data path's
 * does), so the test also shows the place reported is where the verifier stopped, not where its
 * log began. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64[2]);
} rejected_values SEC(".maps");

SEC("xdp")
int rejected_prog(struct xdp_md *ctx) {
    __u32 key = 0;
    __u64 *v = bpf_map_lookup_elem(&rejected_values, &key);
    __u64 sum = 0;
    if (!v)
        return XDP_PASS;
#pragma unroll
    for (int k = 0; k < 128; k++) {
        sum += v[k & 1] * (k + 1);
        barrier_var(sum);
    }
    __u32 i = ctx->data_end - ctx->data;     /* any length: out of bounds for the verifier */
    return v[i] + sum ? XDP_DROP : XDP_PASS; /* the refused line: load_error_test.cpp */
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
