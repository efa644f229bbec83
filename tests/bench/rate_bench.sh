#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# rate_bench.sh BUILD_DIR: delivered rate over a veth pair with tricolor (tc egress, red
# dropped) against HTB and TBF at the same rate and burst, for iperf3 UDP (twice the rate) and
# TCP, and the CPU each costs, against an unshaped run in the same session. Namespaces
# tcbench-a (sender, 198.18.150.1) and tcbench-b (receiver, 198.18.150.2); cleaned up on exit.
set -euo pipefail
BUILD_DIR=$1
RATE_MBIT=${RATE_MBIT:-50}
# 256 KiB: above the 64 KB TSO super-packets veth hands to tc, which tricolor charges whole
# (every segment with its headers) and so could never pass with a smaller bucket.
BURST=${BURST:-262144}
SECONDS_EACH=${SECONDS_EACH:-5}
DIR=/run/tricolor-bench
A="ip netns exec tcbench-a"
B="ip netns exec tcbench-b"
ctl="$BUILD_DIR/tools/tricolorctl"

. "$(dirname "$0")/../../tools/lab.sh"
cleanup() { lab_down tcbench-a tcbench-b "$DIR"; }
cleanup
trap cleanup EXIT
lab_up tcbench-a tcb-a 198.18.150.1 tcbench-b tcb-b 198.18.150.2 "$DIR"
lab_daemon tcbench-a "$BUILD_DIR" "$DIR" --metrics none
$B iperf3 -s -D --logfile "$DIR/iperf3.log"
sleep 0.5

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }

setup() {
    $A tc qdisc del dev tcb-a root 2>/dev/null || true
    "$ctl" detach tcb-a --hook tc --direction egress >/dev/null 2>&1 || true
    "$ctl" policy del p >/dev/null 2>&1 || true
    case "$1" in
    none) ;;
    tricolor)
        "$ctl" policy add p --algo srtcm --cir "${RATE_MBIT}mbit" --cbs "$BURST" --ebs 0 \
            --length l2 >/dev/null 2>&1
        "$ctl" attach tcb-a --hook tc --direction egress >/dev/null
        ;;
    htb)
        $A tc qdisc add dev tcb-a root handle 1: htb default 10
        $A tc class add dev tcb-a parent 1: classid 1:10 htb rate "${RATE_MBIT}mbit" \
            burst "$BURST" quantum 1514
        ;;
    tbf) $A tc qdisc add dev tcb-a root tbf rate "${RATE_MBIT}mbit" burst "$BURST" latency 50ms ;;
    esac
}

# Prints "delivered_l2_bit_per_s cpu_jiffies". iperf3 reports payload; every method enforces
# on frames (tricolor with --length l2, the qdiscs on skb->len), so payload is scaled to the
# Ethernet frame: UDP 1200 B -> 1242 B; TCP MSS 1448 B (timestamps) -> 1514 B.
run() {
    local proto=$1 out before after
    before=$(busy_jiffies)
    if [ "$proto" = udp ]; then
        out=$($A iperf3 -c 198.18.150.2 -u -b "$((RATE_MBIT * 2))M" -l 1200 -t "$SECONDS_EACH" -J)
        after=$(busy_jiffies)
        echo "$out" | python3 -c 'import json,sys; s=json.load(sys.stdin)["end"]["sum"]; print(s["bits_per_second"] * (1 - s["lost_percent"] / 100) * 1242 / 1200)' | tr '\n' ' '
    else
        out=$($A iperf3 -c 198.18.150.2 -t "$SECONDS_EACH" -J)
        after=$(busy_jiffies)
        echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] * 1514 / 1448)' | tr '\n' ' '
    fi
    echo $((after - before))
}

printf "%-9s %-4s %18s %10s %16s\n" method prot "delivered L2 Mbit/s" "rel. error" "CPU ms per Mbit"
for proto in udp tcp; do
    for method in none tricolor htb tbf; do
        setup "$method"
        read -r bps jiffies < <(run "$proto")
        mbit=$(python3 -c "print(f'{$bps/1e6:.2f}')")
        # CPU time (all CPUs, 10 ms jiffies) per delivered megabit: comparable across methods
        # that deliver different amounts; the unshaped run is the baseline of the same session.
        per=$(python3 -c "print(f'{$jiffies * 10 / max($bps / 1e6 * $SECONDS_EACH, 1e-9):.3f}')")
        if [ "$method" = none ]; then
            printf "%-9s %-4s %18s %10s %16s\n" "$method" "$proto" "$mbit" "-" "$per"
            echo "RESULT name=rate_${proto}_none delivered_mbit=$mbit rel_error=— cpu_ms_per_mbit=$per"
            continue
        fi
        err=$(python3 -c "print(f'{($bps - $RATE_MBIT*1e6) / ($RATE_MBIT*1e6) * 100:+.2f}%')")
        printf "%-9s %-4s %18s %10s %16s\n" "$method" "$proto" "$mbit" "$err" "$per"
        echo "RESULT name=rate_${proto}_${method} delivered_mbit=$mbit rel_error=$err cpu_ms_per_mbit=$per"
    done
done
