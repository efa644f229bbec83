#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# whatif_plot.sh BUILD_DIR: the picture of docs/whatif.md. tcpdump records 20 s of iperf3 UDP
# through the veth lab (two senders: a steady 30 Mbit/s and one switching between 10 and 60
# Mbit/s every few seconds), whatif runs it through a 50 Mbit/s srTCM with a 64 KiB burst and
# writes the plot (docs/whatif.svg), asks for the CBS and the CIR that keep red under 1%, and
# headless Chromium takes a screenshot of the plot (docs/whatif.png). Prints the table and
#   RESULT name=whatif_lab red_pct= suggest_cir_bps= suggest_cbs_bytes=
#   (suggest_cbs_bytes=none when no burst can do it)
set -euo pipefail
BUILD_DIR=${1:-build}
CTL="$BUILD_DIR/tools/tricolorctl"
. tools/lab.sh
DIR=/run/tricolor-whatif-plot
A="ip netns exec twp-a" B="ip netns exec twp-b"
cleanup() { lab_down twp-a twp-b "$DIR"; }
cleanup >/dev/null 2>&1 || true
trap cleanup EXIT
lab_up twp-a twp-a0 198.18.120.1 twp-b twp-b0 198.18.120.2 "$DIR"
$B iperf3 -s -D -p 5401 --logfile "$DIR/s1.log"
$B iperf3 -s -D -p 5402 --logfile "$DIR/s2.log"
$B tcpdump -i twp-b0 -s 96 -w "$DIR/lab.pcap" --time-stamp-precision=nano -U udp 2>/dev/null &
dump=$!
sleep 1
$A iperf3 -c 198.18.120.2 -p 5401 -u -b 30M -l 1200 -t 20 >/dev/null 2>&1 &
for rate in 10M 60M 10M 60M 10M; do
    $A iperf3 -c 198.18.120.2 -p 5402 -u -b "$rate" -l 1200 -t 4 >/dev/null 2>&1
done
wait %2 2>/dev/null || true
sleep 0.5
kill -INT "$dump"
wait "$dump" || true
cat >"$DIR/p.yaml" <<'YAML'
policies:
  - {name: uplink, algo: srtcm, cir: 50mbit, cbs: 64k, ebs: 0, match: {proto: udp}}
YAML
"$CTL" whatif "$DIR/lab.pcap" -f "$DIR/p.yaml" --flows 2 --plot docs/whatif.svg | tee "$DIR/table"
red=$("$CTL" -j whatif "$DIR/lab.pcap" -f "$DIR/p.yaml" |
    python3 -c 'import json,sys; p=json.load(sys.stdin)["policies"][0]; print("%.2f" % (100*p["red_share"]))')
cir=$("$CTL" -j whatif "$DIR/lab.pcap" -f "$DIR/p.yaml" --suggest cir --red-at-most 1% |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["value"])')
cbs=$("$CTL" -j whatif "$DIR/lab.pcap" -f "$DIR/p.yaml" --suggest cbs --red-at-most 1% 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["value"])' 2>/dev/null || echo none)
echo "RESULT name=whatif_lab red_pct=$red suggest_cir_bps=$cir suggest_cbs_bytes=$cbs"
if command -v chromium >/dev/null; then
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1100,450 \
        --screenshot="$PWD/docs/whatif.png" "file://$PWD/docs/whatif.svg" >/dev/null 2>&1
    echo "whatif_plot: docs/whatif.png"
fi
