#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# policy_bench.sh BUILD_DIR: the control plane at scale, end to end through tricolorctl. A real
# tricolord (its own socket, state and pin directory, no interface) is given POLICIES policies
# (16000 by default) with `tricolorctl apply -f`, then ROUNDS times each: one `policy add` of a
# new policy, one `policy set` of it, one `policy del` of it. Each command's wall time includes
# tricolorctl's start, the socket round trip, the check, the state journal's fsync and the data
# path's atomic switch. The baseline is `tricolorctl status` in the same run (a round trip that
# changes nothing), so the ratio is what a change costs over asking. Prints
#   RESULT name=policy_apply_<N> ms=
#   RESULT name=policy_<add|set|del>_at_<N> median_ms= p90_ms= max_ms= ratio_to_status=
#   RESULT name=policy_status_at_<N> median_ms= p90_ms= max_ms= ratio_to_status=1.00
# and the state file's folding (the journal written whole once changes pause), from the last
# change to the journal gone:
#   RESULT name=policy_state_fold_<N> ms= bytes=
set -euo pipefail
BUILD_DIR=${1:-build}
N=${POLICIES:-16000}
ROUNDS=${ROUNDS:-50}
CTL="$BUILD_DIR/tools/tricolorctl/tricolorctl"
[ -x "$CTL" ] || CTL="$BUILD_DIR/tools/tricolorctl"
[ -x "$CTL" ] || CTL=$(find "$BUILD_DIR" -name tricolorctl -type f -perm -u+x | head -1)
D=$(find "$BUILD_DIR" -name tricolord -type f -perm -u+x | head -1)
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
DIR=$(mktemp -d /run/tricolor-policy-bench.XXXXXX)
PIN=/sys/fs/bpf/tricolor-policy-bench-$$
cleanup() {
    [ -n "${DPID:-}" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null || true
    rm -rf "$DIR" "$PIN"
}
trap cleanup EXIT

python3 - "$N" >"$DIR/policies.yaml" <<'EOF'
import sys
n = int(sys.argv[1])
print("policies:")
for i in range(n):
    print(f"  - {{name: p{i:05d}, algo: srtcm, cir: 10mbit, cbs: 15k, "
          f"match: {{dst: 198.18.{i >> 8}.{i & 255}/32}}}}")
EOF

"$D" --socket "$DIR/sock" --pin-dir "$PIN" --config "$DIR/none.yaml" --state "$DIR/state.yaml" \
    --metrics none --flows 1024 >"$DIR/log" 2>&1 &
DPID=$!
for _ in $(seq 100); do "$CTL" --socket "$DIR/sock" status >/dev/null 2>&1 && break; sleep 0.1; done
ctl() { "$CTL" --socket "$DIR/sock" "$@" >/dev/null; }

now_ms() { echo "${EPOCHREALTIME/./}"; } # microseconds, without a fork
t0=$(now_ms)
ctl apply -f "$DIR/policies.yaml"
t1=$(now_ms)
echo "RESULT name=policy_apply_${N} ms=$(((t1 - t0) / 1000))"

declare -a ADD SET DEL STATUS
for i in $(seq 1 "$ROUNDS"); do
    a=$(now_ms); ctl status; b=$(now_ms); STATUS+=($((b - a)))
    a=$(now_ms)
    ctl policy add "new$i" --algo srtcm --cir 5mbit --cbs 15k --match dst "198.19.1.$((i % 250))/32"
    b=$(now_ms); ADD+=($((b - a)))
    a=$(now_ms); ctl policy set "new$i" --cir 6mbit; b=$(now_ms); SET+=($((b - a)))
    a=$(now_ms); ctl policy del "new$i"; b=$(now_ms); DEL+=($((b - a)))
done
# The set is still whole: N policies.
[ "$("$CTL" --socket "$DIR/sock" -j status | python3 -c 'import json,sys; print(json.load(sys.stdin)["policies"]["used"])')" = "$N" ]

stats() { # name, microseconds...
    local name=$1
    shift
    python3 - "$name" "$N" "$STATUS_MEDIAN" "$@" <<'EOF'
import sys
name, n, status = sys.argv[1], sys.argv[2], float(sys.argv[3])
v = sorted(int(x) / 1000 for x in sys.argv[4:])
med, p90, mx = v[len(v) // 2], v[int(len(v) * 0.9)], v[-1]
print(f"RESULT name=policy_{name}_at_{n} median_ms={med:.2f} p90_ms={p90:.2f} max_ms={mx:.2f} "
      f"ratio_to_status={med / status:.2f}")
EOF
}
STATUS_MEDIAN=$(printf '%s\n' "${STATUS[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int(NR/2)+1]/1000}')
stats status "${STATUS[@]}"
stats add "${ADD[@]}"
stats set "${SET[@]}"
stats del "${DEL[@]}"

# The journal is folded into the state file half a second after the last change: from one
# more change to the journal gone (the pause, the main loop's quarter-second tick, the write).
ctl policy add last --algo srtcm --cir 5mbit --cbs 15k --match dst 198.19.2.1/32
t0=$(now_ms)
for _ in $(seq 500); do [ -e "$DIR/state.yaml.journal" ] || break; sleep 0.005; done
t1=$(now_ms)
[ ! -e "$DIR/state.yaml.journal" ]
grep -q '"name":"last"' "$DIR/state.yaml"
echo "RESULT name=policy_state_fold_${N} ms=$(((t1 - t0) / 1000)) bytes=$(stat -c %s "$DIR/state.yaml")"
