#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# hot_profile.sh: where a green packet's time goes, by part: perf's cpu-clock samples (no
# hardware counters needed, so it works on a VM) while datapath_bench repeats one figure
# (TRICOLOR_BENCH_SPIN), summed by the function they fell in and grouped:
#   entry      the entry point: parse, the pipeline's lookups, act (tricolor_xdp)
#   classify   classify_index and its probes
#   meter      chain_meter_packet: the flow's lookup, lock, meter and counters
#   hash       the flow table's lookup (per-flow figures: flow_slot_get and the other
#              flow_slot_ functions), hash-map lookups (the plain meter's)
#   clock      bpf_ktime_get_ns (read_tsc and its callers; kvm-clock's pvclock read in a guest)
#   lock       bpf_spin_lock/unlock (the baseline meters), with the interrupt save and restore
#              they make (pvm_irq_* on a paravirtualised guest)
#   baseline   the baseline programs' own code (bench_*)
#   harness    BPF_PROG_TEST_RUN's loop
#   other      the rest (other processes, idle excluded)
# Prints, per figure and part, "RESULT name=profile_<figure>_<part> share=<percent of the busy
# samples>" (tests/bench/figures.py takes them into the docs like every benchmark's).
#   tests/bench/hot_profile.sh [FIGURE...]   (default: green_aggregate_xdp plain_meter_aggregate
#                                             green_per_src_1_flow)
# Root (BPF_PROG_TEST_RUN, perf -a); BUILD_DIR as tricolor.sh's.
set -euo pipefail
BUILD_DIR=${BUILD_DIR:-build}
bench="$BUILD_DIR/tests/datapath_bench"
command -v perf >/dev/null || {
    echo "hot_profile: perf is not installed (Debian: linux-perf); nothing measured" >&2
    exit 0
}
[ -x "$bench" ] || {
    echo "hot_profile: $bench not built" >&2
    exit 1
}
figures=("$@")
[ ${#figures[@]} -gt 0 ] || figures=(green_aggregate_xdp plain_meter_aggregate green_per_src_1_flow)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for fig in "${figures[@]}"; do
    # Sampled from the line that says the figure runs (the data paths loaded and verified) for
    # 4 of its 8 seconds: a fixed wait sampled the verifier on a slow host, idle on a fast one.
    TRICOLOR_BENCH_ONLY=hot TRICOLOR_BENCH_SPIN=$fig TRICOLOR_BENCH_SPIN_SECONDS=8 "$bench" \
        >"$tmp/spin.out" &
    pid=$!
    for _ in $(seq 600); do
        grep -q '^spinning' "$tmp/spin.out" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    grep -q '^spinning' "$tmp/spin.out" || {
        echo "hot_profile: $fig did not start" >&2
        exit 1
    }
    sleep 1
    perf record -q -e cpu-clock -F 10000 -a -o "$tmp/perf.data" -- sleep 4 >/dev/null 2>&1
    wait "$pid"
    perf report -i "$tmp/perf.data" --no-children --sort sym --stdio 2>/dev/null |
        awk -v fig="$fig" '
        /^ *[0-9.]+%/ {
            share = $1; sub(/%/, "", share); sym = $NF
            if (sym ~ /safe_halt|cpuidle|default_idle|poll_idle/) next
            part = "other"
            if (sym ~ /_tricolor_xdp$|_tricolor_tc$|bpf_xdp_get_buff_len/) part = "entry"
            else if (sym ~ /classify_index|classify_probe/) part = "classify"
            else if (sym ~ /chain_meter_packet|chain_level_mark|flow_lock_try|tcm_fleet_fold|hot_note/) part = "meter"
            else if (sym ~ /flow_slot_|flow_key_of|htab_map_hash|lookup_nulls_elem_raw|__htab_map_lookup_elem|memcmp/) part = "hash"
            else if (sym ~ /read_tsc|ktime_get_mono_fast_ns|bpf_ktime_get_ns|pvclock_|kvm_clock_/) part = "clock"
            else if (sym ~ /spin_lock|spin_unlock|pvm_irq_/) part = "lock"
            else if (sym ~ /_bench_/) part = "baseline"
            else if (sym ~ /bpf_test_run|bpf_test_timer|local_bh_enable|bpf_dispatcher/) part = "harness"
            sum[part] += share; busy += share
        }
        END {
            n = split("entry classify meter hash clock lock baseline harness other", order, " ")
            for (i = 1; i <= n; i++)
                if (100 * sum[order[i]] / busy >= 0.5)
                    printf "RESULT name=profile_%s_%s share=%.0f\n", fig, order[i], 100 * sum[order[i]] / busy
        }'
done
