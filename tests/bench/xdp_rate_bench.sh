#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# xdp_rate_bench.sh BUILD_DIR: packets per second through native XDP on one receive CPU, for an
# empty program (pass, drop), the plain eBPF meter (bpf/bench.bpf.c) and tricolor (tricolord,
# tricolorctl), aggregate and per source (2^16 IPv4 and 2^20 IPv6 sources), every packet green
# (passed to the stack) or every packet red (dropped). 64-byte UDP frames from
# tests/bench/xdp_rate_bench.cpp's live-frames sender on CPU 0 through a veth pair
# (namespaces xrbench-tx and xrbench-rx) to the receiver's NAPI thread on CPU 1. ROUNDS rounds of
# every case, alternating, medians printed (the VM's rates drift between minutes); then the
# ratios to the empty program and to the plain meter.
set -euo pipefail
BUILD_DIR=$1
SECONDS_EACH=${SECONDS_EACH:-3}
ROUNDS=${ROUNDS:-3}
DIR=/run/tricolor-xdp-rate
TX=xrbench-tx RX=xrbench-rx
tool="$BUILD_DIR/tests/xdp_rate_bench"
ctl="$BUILD_DIR/tools/tricolorctl"

. "$(dirname "$0")/../../tools/lab.sh"
cleanup() { lab_down "$TX" "$RX" "$DIR"; }
cleanup
trap cleanup EXIT
lab_up "$TX" xrb-tx 198.18.151.1 "$RX" xrb-rx 198.18.151.2 "$DIR"
lab_daemon "$RX" "$BUILD_DIR" "$DIR" --metrics none --flows 2097152
# The daemon's threads on the sender's CPU: its pass over the flow table every 10 s (half a
# second with the 2^20 flows of the per-source rows, userspace/daemon/flow_passes.cpp) would
# otherwise land on the receiving CPU in some rounds and not others, and be counted as the data
# path's. On a router it runs on a housekeeping CPU.
taskset -a -p 1 "$(pgrep -f "tricolord --socket $DIR/")" >/dev/null
echo "CPU: $(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo), kernel $(uname -r)"

# The receiver's NAPI polls in a thread of its own, on CPU 1; the sender runs on CPU 0.
pin_napi() {
    ip netns exec "$RX" sh -c 'echo 1 > /sys/class/net/xrb-rx/threaded'
    local pid
    for pid in $(pgrep '^napi/xrb-rx' || true); do taskset -p 2 "$pid" >/dev/null; done
}

declare -A ROUND_LINES
PROFILE= # set: measure makes a profiled pass instead (profile, below)
# measure NAME FLOWS v4|v6: the program attached now, SECONDS_EACH seconds.
measure() {
    pin_napi
    if [ -n "$PROFILE" ]; then
        profile "$@"
        return
    fi
    local line
    line=$(taskset -c 0 "$tool" run "$TX" xrb-tx "$RX" xrb-rx "$SECONDS_EACH" "$2" "$3" "$1")
    echo "round $round: ${line#RESULT }"
    ROUND_LINES[$1]+="$line"$'\n'
}

bench_prog() { # NAME PROG FLOWS v4|v6 [red]
    "$tool" attach "$RX" xrb-rx "$2" ${5:-}
    measure "$1" "$3" "$4"
    "$tool" detach "$RX" xrb-rx
}

# tricolor: the real daemon, native XDP. Always green: 1 Tbit/s and 1 GiB everywhere, as the
# plain meter's; all red: rates and bursts of 1, red dropped.
green=(--algo trtcm --cir 1tbit --cbs 1g --pir 1tbit --pbs 1g)
red=(--algo trtcm --cir 8bit --cbs 1 --pir 8bit --pbs 1 --red drop)
tricolor() { # NAME FLOWS v4|v6 PER METER...
    local name=$1 flows=$2 fam=$3 per=$4
    shift 4
    local dst=198.19.0.2/32
    [ "$fam" = v6 ] && dst=2001:db8:1::2/128
    "$ctl" policy add bench --match dst "$dst" --per "$per" "$@" >/dev/null 2>&1
    measure "$name" "$flows" "$fam"
    "$ctl" policy del bench >/dev/null
}
for round in $(seq "$ROUNDS"); do
    bench_prog empty_pass bench_empty 1 v4
    bench_prog empty_drop bench_drop 1 v4
    bench_prog plain_meter_aggregate_green bench_plain_meter_wire 1 v4
    bench_prog plain_meter_aggregate_red bench_plain_meter_wire 1 v4 red
    bench_prog plain_meter_2e16_green bench_plain_meter_wire 65536 v4
    bench_prog plain_meter_2e20_green bench_plain_meter_wire 1048576 v6
    "$ctl" attach xrb-rx --xdp-mode native >/dev/null
    tricolor tricolor_aggregate_green 1 v4 aggregate "${green[@]}"
    tricolor tricolor_aggregate_red 1 v4 aggregate "${red[@]}"
    tricolor tricolor_per_src_2e16_green 65536 v4 src "${green[@]}"
    tricolor tricolor_per_src_2e20_green 1048576 v6 src "${green[@]}"
    "$ctl" detach xrb-rx >/dev/null
done

# Where the receiving CPU's time goes in the red rows (the meters' own rate), from perf's
# samples on CPU 1 in one more pass of each, after the measured rounds (the sampling costs the
# pass some rate). A frame dropped in XDP goes back to the page pool of the sender's frames
# through a ring whose producer lock the sender takes too, for each frame the receiver's full
# ring refused: that lock is part of what these rows measure, and grows as the receiver falls
# behind.
profile() { # NAME FLOWS v4|v6: as measure, 4 seconds, perf on the receiving CPU from the 2nd
    local name=$1 data
    data=$(mktemp)
    (sleep 1 && perf record -q -e cpu-clock -C 1 -o "$data" -- sleep 2 >/dev/null 2>&1) &
    taskset -c 0 "$tool" run "$TX" xrb-tx "$RX" xrb-rx 4 "$2" "$3" "$name" >/dev/null
    wait
    perf report -i "$data" --no-children --sort sym --stdio 2>/dev/null | awk -v name="$name" '
        /^ *[0-9.]+%/ {
            share = $1; sub(/%/, "", share); sym = $NF
            if (sym ~ /safe_halt|cpuidle|default_idle|poll_idle/) next
            part = "other"
            if (sym ~ /^bpf_prog_/) part = "program"
            else if (sym ~ /page_pool_|_raw_spin_lock|queued_spin_lock|xdp_return/) part = "page_pool"
            else if (sym ~ /pvclock_|kvm_clock_|ktime_get|read_tsc/) part = "clock"
            else if (sym ~ /bpf_spin_|pvm_|save_fl/) part = "spin_lock_helpers"
            else if (sym ~ /^veth_|napi/) part = "veth"
            sum[part] += share; busy += share
        }
        END {
            if (!busy) exit
            line = "RESULT name=xdp_rate_profile_" name
            n = split("page_pool program clock spin_lock_helpers veth other", order, " ")
            for (i = 1; i <= n; i++)
                line = line sprintf(" %s=%.0f", order[i], 100 * sum[order[i]] / busy)
            print line
        }' || echo "no profile of $name (perf recorded nothing)" >&2
    rm -f "$data"
}
if command -v perf >/dev/null; then
    echo "where the receiving CPU's time goes, red rows (perf samples, percent):"
    PROFILE=1
    bench_prog plain_meter_aggregate_red bench_plain_meter_wire 1 v4 red
    "$ctl" attach xrb-rx --xdp-mode native >/dev/null
    tricolor tricolor_aggregate_red 1 v4 aggregate "${red[@]}"
    "$ctl" detach xrb-rx >/dev/null
    PROFILE=
else
    echo "perf is not installed (Debian: linux-perf): no profile of the red rows" >&2
fi

# The median of each key over the rounds, as one RESULT line a case.
declare -A MPPS
for name in "${!ROUND_LINES[@]}"; do
    line=$(printf '%s' "${ROUND_LINES[$name]}" | python3 -c '
import re, statistics, sys
rows = [dict(re.findall(r"(\w+)=(\S+)", l)) for l in sys.stdin if l.startswith("RESULT")]
keys = ("mpps", "ns_per_packet", "offered_mpps")
med = {k: statistics.median(float(r[k]) for r in rows) for k in keys}
print("RESULT name=%s mpps=%.3f ns_per_packet=%.1f offered_mpps=%.3f rounds=%d" % (
    rows[0]["name"], med["mpps"], med["ns_per_packet"], med["offered_mpps"], len(rows)))')
    echo "$line"
    MPPS[$name]=$(sed -n 's/.* mpps=\([0-9.]*\).*/\1/p' <<<"$line")
done

ratio() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{a / b:.2f}' if b else 'nan')" "$1" "$2"; }
echo "ratios (Mpps against Mpps, same run):"
for pair in tricolor_aggregate_green:plain_meter_aggregate_green \
    tricolor_aggregate_red:plain_meter_aggregate_red \
    tricolor_per_src_2e16_green:plain_meter_2e16_green \
    tricolor_per_src_2e20_green:plain_meter_2e20_green \
    tricolor_aggregate_green:empty_pass tricolor_aggregate_red:empty_drop; do
    a=${pair%%:*} b=${pair##*:}
    echo "RESULT name=xdp_rate_${a}_vs_${b} ratio=$(ratio "${MPPS[$a]}" "${MPPS[$b]}")"
done
