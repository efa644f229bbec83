#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# police_bench.sh BUILD_DIR: tricolor against the kernel's own policer, act_police, on the same
# traffic and the same hook (tc ingress of a veth end): UDP offered at twice the rate, the same
# with the policer reconfigured (to identical parameters) every second, and one TCP flow.
# Needs a kernel with act_police and cls_matchall (Debian's 6.1: ./tricolor.sh bench runs this
# inside the 6.1 guest). Times under QEMU's TCG are not speeds: compare rates and counts.
# Namespaces tcpol-a (sender, 198.18.160.1) and tcpol-b (receiver, 198.18.160.2).
set -euo pipefail
BUILD_DIR=$(readlink -f "$1")
RATE_MBIT=${RATE_MBIT:-8}
BURST=${BURST:-32768} # bytes
SECONDS_EACH=${SECONDS_EACH:-6}
FRAME=1000                                          # bytes on the wire (Ethernet header on)
PAYLOAD=$((FRAME - 14 - 20 - 8))                    # UDP payload of such a frame
PPS=$((RATE_MBIT * 1000000 * 2 / (FRAME * 8)))      # twice the rate
COUNT=$((PPS * SECONDS_EACH))
DIR=/run/tricolor-police
A="ip netns exec tcpol-a"
B="ip netns exec tcpol-b"
ctl="$BUILD_DIR/tools/tricolorctl"
udp="$BUILD_DIR/tests/udp_tool"

modprobe act_police && modprobe cls_matchall && modprobe sch_ingress ||
    { echo "police_bench: this kernel has no act_police/cls_matchall" >&2; exit 1; }
. "$(dirname "$(readlink -f "$0")")/../../tools/lab.sh"
cleanup() { lab_down tcpol-a tcpol-b "$DIR"; }
cleanup
trap cleanup EXIT
lab_up tcpol-a tcp-a 198.18.160.1 tcpol-b tcp-b 198.18.160.2 "$DIR"
# Plain frames on both hooks: no GRO/GSO aggregation for either policer to see.
$A ethtool -K tcp-a tso off gso off >/dev/null 2>&1 || true
$B ethtool -K tcp-b gro off >/dev/null 2>&1 || true
lab_daemon tcpol-b "$BUILD_DIR" "$DIR" --metrics none

police_on() {
    $B tc qdisc add dev tcp-b clsact
    $B tc actions add action police rate "${RATE_MBIT}mbit" burst "$BURST" conform-exceed drop/ok index 7
    $B tc filter add dev tcp-b ingress matchall action police index 7
}
police_reconfigure() {
    $B tc actions replace action police rate "${RATE_MBIT}mbit" burst "$BURST" conform-exceed drop/ok index 7
}
police_off() {
    $B tc qdisc del dev tcp-b clsact 2>/dev/null || true
    $B tc actions flush action police 2>/dev/null || true
}
# "conform exceed" packet counts of the police action.
police_counts() {
    $B tc -s -j actions get action police index 7 | python3 -c '
import json, sys
a = next(e for e in json.load(sys.stdin) if "actions" in e)["actions"][0]
s = a["stats"]
print(s["packets"] - s["drops"], s["drops"])'
}
tricolor_on() {
    "$ctl" policy add p --algo srtcm --cir "${RATE_MBIT}mbit" --cbs "$BURST" --ebs 0 \
        --length l2 >/dev/null
    "$ctl" attach tcp-b --hook tc --direction ingress >/dev/null
}
tricolor_reconfigure() { "$ctl" policy set p --cir "${RATE_MBIT}mbit" --cbs "$BURST" >/dev/null; }
tricolor_off() {
    "$ctl" detach tcp-b --hook tc --direction ingress >/dev/null 2>&1 || true
    "$ctl" policy del p >/dev/null 2>&1 || true
    $B tc qdisc del dev tcp-b clsact 2>/dev/null || true
}
tricolor_counts() {
    "$ctl" -j stats p | python3 -c '
import json, sys
p = json.load(sys.stdin)["policies"][0]
print(p["green"]["packets"] + p["yellow"]["packets"], p["red"]["packets"])'
}

# udp METHOD RECONFIGURE: offered twice the rate; prints "received_frames seconds conform exceed".
udp() {
    local method=$1 reconf=$2 out recv sent secs
    $B "$udp" recv 198.18.160.2 9000 $((SECONDS_EACH + 4)) >"$DIR/recv" &
    local rpid=$!
    sleep 1
    $A "$udp" send 198.18.160.2 9000 "$COUNT" "$PAYLOAD" "$PPS" >"$DIR/send" &
    local spid=$!
    if [ "$reconf" = 1 ]; then
        for _ in $(seq $((SECONDS_EACH - 1))); do
            sleep 1
            "${method}_reconfigure"
        done
    fi
    wait $spid
    wait $rpid || true
    recv=$(awk '/^packets/{print $2}' "$DIR/recv")
    secs=$(awk '/^sent/{print $4}' "$DIR/send")
    echo "$recv $secs $("${method}_counts")"
}

tcp() {
    $B iperf3 -s -1 -D --logfile "$DIR/iperf3-s.log" >/dev/null
    sleep 0.5
    $A iperf3 -c 198.18.160.2 -t "$SECONDS_EACH" -J >"$DIR/tcp.json" 2>/dev/null || true
    python3 - "$DIR/tcp.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["end"]
print(f'{e["sum_received"]["bits_per_second"] / 1e6:.2f} {e["sum_sent"].get("retransmits", 0)}')
PY
}

printf "%-9s %-16s %10s %12s %10s %10s %9s\n" policer case "frames in" "bound" "excess" \
    "conf/exc" "rate"
for method in police tricolor; do
    for reconf in 0 1; do
        "${method}_on"
        read -r recv secs pass drop < <(udp "$method" "$reconf")
        # What an exact policer admits over the stream: the burst plus the rate times its length.
        bound=$(python3 -c "print(($BURST + $RATE_MBIT * 1e6 / 8 * $secs) / $FRAME)")
        excess=$(python3 -c "print(f'{($recv - $bound) / $bound * 100:+.1f}%')")
        rate=$(python3 -c "print(f'{$recv * $FRAME * 8 / $secs / 1e6:.2f}')")
        case_name=udp-2x
        [ "$reconf" = 1 ] && case_name=udp-2x-reconf
        printf "%-9s %-16s %10s %12.1f %10s %10s %9s\n" "$method" "$case_name" "$recv" "$bound" \
            "$excess" "$pass/$drop" "$rate"
        echo "RESULT name=police_${case_name}_${method} frames=$recv bound=$bound excess=$excess conform=$pass exceed=$drop mbit=$rate seconds=$secs"
        "${method}_off"
    done
    "${method}_on"
    read -r mbit retr < <(tcp)
    printf "%-9s %-16s %10s %12s %10s %10s %9s\n" "$method" tcp "-" "-" "-" "retr $retr" "$mbit"
    echo "RESULT name=police_tcp_${method} mbit=$mbit retransmits=$retr"
    "${method}_off"
done
