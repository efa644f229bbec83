#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# delayline_check.sh BUILD_DIR [DELAY]: the delay line (tests/tools/delayline.cpp) against
# netem at the same one-way delay (default 10ms): RTT by ping and one CUBIC flow's goodput
# through each. Needs sch_netem: run it in the 6.1 guest,
#   tests/kernels/guest.sh -- tests/bench/delayline_check.sh build
# HOWS ("delayline netem") picks the paths: natively, where the kernel has no netem,
#   HOWS=delayline ID_SUFFIX=_native tests/bench/delayline_check.sh build
# Each prints RESULT name=delay_<how><ID_SUFFIX> one_way= rtt_min_avg_max_ms= goodput_mbit=
# retransmits=.
# Namespaces dlchk-a (198.18.161.1), dlchk-a-m (the wire), dlchk-b (198.18.161.2).
set -euo pipefail
BUILD_DIR=$1
DELAY=${2:-10ms}
SECONDS_EACH=${SECONDS_EACH:-8}
HOWS=${HOWS:-"delayline netem"}
ID_SUFFIX=${ID_SUFFIX:-}
DIR=/run/tricolor-dlchk
. "$(dirname "$0")/../../tools/lab.sh"
cleanup() { lab_down_delayed dlchk-a dlchk-b "$DIR" >/dev/null 2>&1 || true; }
trap cleanup EXIT
for how in $HOWS; do
    cleanup
    d=$DELAY
    [ "$how" = netem ] && d="netem:$DELAY"
    lab_up_delayed dlchk-a dla 198.18.161.1 dlchk-b dlb 198.18.161.2 "$DIR" \
        "$BUILD_DIR/tests/delayline" "$d"
    sleep 0.5
    ip netns exec dlchk-a busybox ping -c 2 198.18.161.2 >/dev/null 2>&1 || true
    rtt=$(ip netns exec dlchk-a busybox ping -c 20 -i 0.1 198.18.161.2 | awk -F'[/ =]+' \
        '/round-trip/{print $(NF-3)"/"$(NF-2)"/"$(NF-1)}')
    ip netns exec dlchk-b iperf3 -s -D -1 --logfile "$DIR/iperf3-s.log"
    sleep 0.3
    out=$(ip netns exec dlchk-a iperf3 -c 198.18.161.2 -t "$SECONDS_EACH" -J)
    read -r mbit retr < <(echo "$out" | python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
print("%.1f" % (e["sum_received"]["bits_per_second"] / 1e6), e["sum_sent"].get("retransmits", 0))')
    echo "RESULT name=delay_${how}${ID_SUFFIX} one_way=$DELAY rtt_min_avg_max_ms=$rtt goodput_mbit=$mbit retransmits=$retr"
done
