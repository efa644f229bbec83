#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# tcp_bench.sh BUILD_DIR: TCP through tricolor (docs/spec.md §8) against HTB and TBF, same run.
# CUBIC flows (iperf3; CC below) from tcpb-a (198.18.170.1, the sender) to tcpb-b (198.18.170.2) through
# a wire with a one-way delay of RTT/2 (tests/tools/delayline in tcpb-a-m; RTT 0 is the same
# relay without delay); a tricolord in each end namespace. Each case prints
#   RESULT name=tcp_rtt<R>_cbs<K>k_<mode>_f<N> goodput_mbit= pct_cir= retransmits= jain=
# where goodput is iperf3's received payload rate, pct_cir its share of CIR, and jain Jain's
# fairness index over the N flows' goodputs. Modes:
#   police   tricolor, srtcm CIR/CBS, EBS 0, red dropped, on tc egress of the sender (hard)
#   sockets  the same policy with --shape sockets (the sender's sockets paced)
#   edt      the same policy with --shape edt under fq on the sender's egress (needs sch_fq:
#            not in MODES by default; MODES=edt under tests/kernels/guest.sh)
#   htb      an HTB class at CIR with burst CBS on the sender's egress
#   tbf      TBF at CIR with burst CBS
#   xdp      the hard policer on XDP ingress of the receiver (a remote sender)
#   aqm_drop the same with --aqm drop; aqm_ecn with --aqm ecn (the sender negotiates ECN)
# Environment: RATE_MBIT (20), SECONDS_EACH (8), RTTS ("0 20 100", ms; 100 is the delay line at
# 50 ms each way), CBS_LIST ("16 64", KiB),
# FLOWS_LIST ("1 4"), MODES ("htb tbf police sockets xdp aqm_drop aqm_ecn"), CC (the senders'
# congestion control, cubic), ID_SUFFIX (appended to every RESULT name, so that a second
# matrix, e.g. CC=bbr ID_SUFFIX=_bbr or longer runs, keeps its own ids), TSV (a file to append
# the rows to, for tests/bench/tcp_plot.py), STATS (non-empty: print the policy's counters to
# stderr after each case), DELAY_HOW (delayline, or netem where sch_netem exists: the 6.1
# guest; RTT 0 is then netem with no delay).
set -euo pipefail
BUILD_DIR=$1
RATE_MBIT=${RATE_MBIT:-20}
SECONDS_EACH=${SECONDS_EACH:-8}
RTTS=${RTTS:-"0 20 100"}
CBS_LIST=${CBS_LIST:-"16 64"}
FLOWS_LIST=${FLOWS_LIST:-"1 4"}
MODES=${MODES:-"htb tbf police sockets xdp aqm_drop aqm_ecn"}
CC=${CC:-cubic}
ID_SUFFIX=${ID_SUFFIX:-}
TSV=${TSV:-}
DELAY_HOW=${DELAY_HOW:-delayline}
case "$DELAY_HOW" in
delayline | netem) ;;
*) echo "tcp_bench.sh: DELAY_HOW must be delayline or netem, not '$DELAY_HOW'" >&2; exit 2 ;;
esac
DIR=/run/tricolor-tcpbench
DIR_B=/run/tricolor-tcpbench-b
A="ip netns exec tcpb-a"
ctl="$BUILD_DIR/tools/tricolorctl"
ctl_a() { "$ctl" --socket "$DIR/tricolor.sock" "$@"; }
ctl_b() { "$ctl" --socket "$DIR_B/tricolor.sock" "$@"; }

. "$(dirname "$0")/../../tools/lab.sh"
cleanup() {
    lab_down_delayed tcpb-a tcpb-b "$DIR" >/dev/null 2>&1 || true
    umount "$DIR_B/bpf" 2>/dev/null || true
    rm -rf "$DIR_B"
}
trap cleanup EXIT

setup() { # MODE CBS_BYTES
    $A tc qdisc del dev tcpb0 root 2>/dev/null || true
    ctl_a policy del p >/dev/null 2>&1 || true
    ctl_b policy del p >/dev/null 2>&1 || true
    local pol=(p --algo srtcm --cir "${RATE_MBIT}mbit" --cbs "$2" --ebs 0
        --match dst 198.18.170.2/32 --match proto tcp)
    case "$1" in
    police) ctl_a policy add "${pol[@]}" >/dev/null ;;
    sockets) ctl_a policy add "${pol[@]}" --shape sockets >/dev/null ;;
    edt)
        $A tc qdisc replace dev tcpb0 root fq
        ctl_a policy add "${pol[@]}" --shape edt >/dev/null
        ;;
    xdp) ctl_b policy add "${pol[@]}" >/dev/null ;;
    aqm_drop) ctl_b policy add "${pol[@]}" --aqm drop >/dev/null ;;
    aqm_ecn) ctl_b policy add "${pol[@]}" --aqm ecn >/dev/null ;;
    htb)
        $A tc qdisc add dev tcpb0 root handle 1: htb default 10
        $A tc class add dev tcpb0 parent 1: classid 1:10 htb rate "${RATE_MBIT}mbit" burst "$2"
        ;;
    tbf) $A tc qdisc add dev tcpb0 root tbf rate "${RATE_MBIT}mbit" burst "$2" latency 100ms ;;
    esac
}

# Prints "goodput_bps retransmits jain".
run() { # FLOWS
    $A iperf3 -C "$CC" -c 198.18.170.2 -P "$1" -t "$SECONDS_EACH" -J | python3 -c '
import json, sys
d = json.load(sys.stdin)
e = d["end"]
rates = [s["receiver"]["bits_per_second"] for s in e["streams"]]
jain = sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates)) if any(rates) else 0
print(e["sum_received"]["bits_per_second"], e["sum_sent"].get("retransmits", 0), f"{jain:.3f}")'
}

printf "%-6s %-6s %-8s %-5s %14s %8s %8s %6s\n" RTT CBS mode flows "goodput Mbit/s" "% CIR" retrans jain
for rtt in $RTTS; do
    cleanup
    delay="$((rtt * 500))us"
    [ "$DELAY_HOW" = netem ] && delay="netem:$delay"
    lab_up_delayed tcpb-a tcpb0 198.18.170.1 tcpb-b tcpb1 198.18.170.2 "$DIR" \
        "$BUILD_DIR/tests/delayline" "$delay"
    lab_daemon tcpb-a "$BUILD_DIR" "$DIR" --metrics none
    mkdir -p "$DIR_B/bpf"
    mount -t bpf bpf "$DIR_B/bpf"
    lab_daemon tcpb-b "$BUILD_DIR" "$DIR_B" --metrics none
    ctl_a attach tcpb0 --hook tc --direction egress >/dev/null
    ctl_b attach tcpb1 >/dev/null
    # The sender asks for ECN (the receiver's default, 2, accepts it): only ECT packets can be
    # marked; without ECN --aqm ecn drops as --aqm drop does.
    $A sysctl -qw net.ipv4.tcp_ecn=1
    ip netns exec tcpb-b iperf3 -s -D --logfile "$DIR/iperf3.log"
    sleep 0.5
    for cbs in $CBS_LIST; do
        for mode in $MODES; do
            for flows in $FLOWS_LIST; do
                setup "$mode" "$((cbs * 1024))"
                read -r bps retr jain < <(run "$flows")
                # STATS=1: the policy's colour counters after the run (diagnostics).
                if [ -n "${STATS:-}" ]; then
                    case "$mode" in
                    police | sockets | edt) ctl_a stats p >&2 || true ;;
                    xdp | aqm_*) ctl_b stats p >&2 || true ;;
                    esac
                fi
                mbit=$(python3 -c "print(f'{$bps/1e6:.2f}')")
                pct=$(python3 -c "print(f'{$bps/($RATE_MBIT*1e6)*100:.1f}')")
                printf "%-6s %-6s %-8s %-5s %14s %8s %8s %6s\n" "${rtt}ms" "${cbs}k" "$mode" \
                    "$flows" "$mbit" "$pct" "$retr" "$jain"
                echo "RESULT name=tcp_rtt${rtt}_cbs${cbs}k_${mode}_f${flows}$ID_SUFFIX" \
                    "goodput_mbit=$mbit" \
                    "pct_cir=$pct retransmits=$retr jain=$jain"
                # An if, not `[ ] &&`: as the loop's last command a false test would be the
                # script's exit status, and ./tricolor.sh bench (set -e) would stop there.
                if [ -n "$TSV" ]; then
                    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$rtt" "$cbs" "$mode" "$flows" "$pct" \
                        "$retr" "$jain" >>"$TSV"
                fi
            done
        done
    done
done
