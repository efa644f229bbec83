#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# whatif_bench.sh BUILD_DIR: `tricolorctl whatif` on a capture of PACKETS (10^6) whole UDP packets
# of 1000 to 1500 bytes from 64 sources (over 1 GB of pcap), against `tricolorctl replay -f
# --engine bpf` on the same packets written as a trace (the baseline: the same data path, frames
# built from trace lines). Both print one line a packet; the lines must be identical. Prints
#   RESULT name=whatif_<N> capture_mb= whatif_pps= replay_pps= pps_ratio_to_replay= whatif_rss_mb=
#   RESULT name=whatif_rss_<N/10> whatif_rss_mb=   (a tenth of the capture: memory stays flat)
set -euo pipefail
BUILD_DIR=${1:-build}
N=${PACKETS:-1000000}
CTL="$BUILD_DIR/tools/tricolorctl"
DIR=$(mktemp -d /var/tmp/tricolor-whatif-bench.XXXXXX)
trap 'rm -rf "$DIR"' EXIT

# The packets, as a pcap and as a trace: a bursty 80 Mbit/s on average.
gen() {
    python3 - "$1" "$DIR/w$1.pcap" "$DIR/w$1.trace" <<'EOF'
import random, struct, sys
n, pcap, trace = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rng = random.Random(2697)
zeros = bytes(1500)
with open(pcap, "wb") as p, open(trace, "w") as t:
    p.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))  # nanosecond pcap
    now = 0
    lines = []
    for i in range(n):
        # whatif counts time from the capture's first packet: the trace starts at 0 too.
        if i:
            now += rng.choice((20000, 40000, 80000, 400000))  # ns
        size = rng.randint(1000, 1500)
        src = 1 + rng.randrange(64)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, size, 0, 0, 64, 17, 0,
                         bytes((198, 18, 1, src)), bytes((198, 19, 0, 1)))
        udp = struct.pack("!HHHH", 1000 + src, 7000, size - 20, 0)
        frame = bytes(12) + b"\x08\x00" + ip + udp + zeros[: size - 28]
        sec, ns = divmod(1700000000 * 10**9 + now, 10**9)
        p.write(struct.pack("<IIII", sec, ns, len(frame), len(frame)))
        p.write(frame)
        lines.append(f"{now} {size} 198.18.1.{src} 198.19.0.1 udp {1000 + src} 7000\n")
        if len(lines) >= 65536:
            t.writelines(lines)
            lines.clear()
    t.writelines(lines)
EOF
}
cat >"$DIR/p.yaml" <<'YAML'
policies:
  - {name: per-source, algo: srtcm, cir: 1mbit, cbs: 16k, ebs: 16k, per: src, match: {proto: udp}}
  - {name: other, algo: trtcm, cir: 1mbit, cbs: 16k, pir: 2mbit, pbs: 16k, match: {proto: tcp}}
YAML

# Runs "$@" with stdout to $OUT; prints its wall seconds and its peak RSS (KiB).
measure() {
    python3 - "$@" <<'EOF'
import os, resource, subprocess, sys, time
t = time.monotonic()
with open(os.environ["OUT"], "wb") as out:
    r = subprocess.run(sys.argv[1:], stdout=out)
if r.returncode:
    sys.exit(r.returncode)
print(f"{time.monotonic() - t:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
EOF
}

small=$((N / 10))
gen "$small"
read -r _ small_rss < <(OUT="$DIR/small.out" measure "$CTL" whatif "$DIR/w$small.pcap" \
    -f "$DIR/p.yaml" --packets)
gen "$N"
rm -f "$DIR/w$small.pcap" "$DIR/w$small.trace"
mb=$(($(stat -c %s "$DIR/w$N.pcap") / 1000000))
read -r w_s w_rss < <(OUT="$DIR/whatif.out" measure "$CTL" whatif "$DIR/w$N.pcap" \
    -f "$DIR/p.yaml" --packets)
read -r r_s _ < <(OUT="$DIR/replay.out" measure "$CTL" replay -f "$DIR/p.yaml" --engine bpf \
    "$DIR/w$N.trace")
cmp -s "$DIR/whatif.out" "$DIR/replay.out" || {
    echo "whatif_bench: whatif and replay -f disagree on the same packets" >&2
    exit 1
}
python3 - "$N" "$mb" "$w_s" "$r_s" "$w_rss" "$small" "$small_rss" <<'EOF'
import sys
n, mb, w, r, rss, small, small_rss = sys.argv[1:]
n, w, r = int(n), float(w), float(r)
print(f"RESULT name=whatif_{n} capture_mb={mb} whatif_pps={n / w:.0f} replay_pps={n / r:.0f} "
      f"pps_ratio_to_replay={r / w:.2f} whatif_rss_mb={int(rss) / 1024:.1f}")
print(f"RESULT name=whatif_rss_{small} whatif_rss_mb={int(small_rss) / 1024:.1f}")
EOF
