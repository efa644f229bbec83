#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# shape_long_rtt.sh SOURCE_DIR BUILD_DIR: the lab for Shape.LocalRefusalsDoNotEndSlowStart
# (shape_e2e_test.cpp). Four CUBIC flows (iperf3) from tcpl-a to tcpl-b through a 100 ms round
# trip (the delay line, tools/lab.sh) under --shape sockets, CIR 20 Mbit/s, CBS 16 KiB, on tc
# egress of the sender. About five seconds in, it prints one line per data socket (over 64 KB
# acknowledged; iperf3's control connection sends less), its best of five snapshots
#   socket ssthresh=N mss=M rtt_us=R     (N = 0: none, still unbounded)
# and then "red N", the policy's red packets (the refusals the sockets met).
set -euo pipefail
SRC=$1
BUILD=$2
DIR=/run/tricolor-e2e-longrtt
A="ip netns exec tcpl-a"
. "$SRC/tools/lab.sh"
cleanup() { lab_down_delayed tcpl-a tcpl-b "$DIR" >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup
lab_up_delayed tcpl-a tcpl0 198.18.172.1 tcpl-b tcpl1 198.18.172.2 "$DIR" \
    "$BUILD/tests/delayline" 50000us
lab_daemon tcpl-a "$BUILD" "$DIR" --metrics none
ctl() { "$BUILD/tools/tricolorctl" --socket "$DIR/tricolor.sock" "$@"; }
ctl attach tcpl0 --hook tc --direction egress >/dev/null
ctl policy add p --algo srtcm --cir 20mbit --cbs 16384 --ebs 0 \
    --match dst 198.18.172.2/32 --match proto tcp --shape sockets >/dev/null
ip netns exec tcpl-b iperf3 -s -D
# The server listens when its port does (a fixed sleep raced a slow start of iperf3).
for _ in $(seq 100); do
    [ -n "$(ip netns exec tcpl-b ss -Hltn 'sport = :5201')" ] && break
    sleep 0.05
done
$A iperf3 -C cubic -c 198.18.172.2 -P 4 -t 7 >/dev/null &
sleep 4.5
# Five snapshots 150 ms apart; each socket (by its local port) reports its best one, so a socket
# caught in one moment of a real cut and its recovery is not taken for one that stays cut.
for _ in 1 2 3 4 5; do
    $A ss -Htin dst 198.18.172.2
    echo
    sleep 0.15
done | python3 -c '
import re, sys
best = {}
text = sys.stdin.read()
# ss -Hti prints a socket and its info on two lines: join each socket with its info.
for m in re.finditer(r"^\S+\s+\d+\s+\d+\s+\S+:(\d+)\s+\S+\s*\n(.*)$", text, re.M):
    port, line = m.group(1), m.group(2)
    acked = re.search(r"bytes_acked:(\d+)", line)
    if not acked or int(acked.group(1)) < 65536:
        continue
    ss = re.search(r"\sssthresh:(\d+)", line)  # not rcv_ssthresh
    ssthresh = int(ss.group(1)) if ss else 0
    row = (ssthresh, int(re.search(r"\bmss:(\d+)", line).group(1)),
           int(float(re.search(r"\brtt:([\d.]+)", line).group(1)) * 1000))
    old = best.get(port)
    if old is None or old[0] != 0 and (ssthresh == 0 or ssthresh > old[0]):
        best[port] = row
for port in sorted(best):
    print("socket ssthresh=%d mss=%d rtt_us=%d" % best[port])'
echo "red $(ctl -j stats p | python3 -c 'import json,sys; print(json.load(sys.stdin)["policies"][0]["red"]["packets"])')"
wait
