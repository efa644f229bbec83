#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# fleet_bench.sh BUILD_DIR: fleet-wide limits (docs/spec.md §10) on three hosts (network namespaces,
# each sending through its own veth into its own tricolord) and one real redis-server on
# loopback: green use of the fleet's CIR over 2 s windows while UDP at 2x CIR moves between
# hosts (and the exact never-over check over every pair of samples), exchanges per second per
# host and Redis's CPU, then Redis killed for 5 s and restarted under each fallback mode.
# The driver is the Fleet.DISABLED_Bench case of the e2e binary (tests/e2e/fleet_e2e_test.cpp),
# which cleans up after itself; this prints its BENCH and RESULT lines:
#   RESULT name=fleet_use seconds= min_pct= mean_pct= min_after_move_pct= never_over= pairs=
#   RESULT name=fleet_load exchanges_per_s_per_host= redis_cpu_pct= evalsha_usec_per_call=
#          failed= fallbacks=
#   RESULT name=fleet_redis_down_<share|closed|open> gap_s= gap_pct= back_ms= next_2s_pct=
# Then the script's own cost: redis-benchmark -c 50 runs EVALSHA of userspace/src/fleet.lua for
# one fleet policy from NODES (1000, then 10000) distinct nodes against a redis-server in
# namespace tcfleet-r (its loopback only), and prints
#   RESULT name=fleet_script_<N>_nodes exchanges_per_s= usec_per_call= hosts_at_50ms=
#          hosts_at_200ms=
# where hosts_at_P is how many host-policies one such Redis serves at a period of P ms.
# Then the same against a Redis Cluster of three masters, a replica each, in that namespace
# (redis-benchmark --cluster: one policy per master, 1000 nodes each), and prints
#   RESULT name=fleet_cluster_3_masters exchanges_per_s= per_master_per_s= usec_per_call=
#          cpu_pct_per_master= hosts_per_master_at_50ms=
# usec_per_call the masters' mean (INFO commandstats: wall time, so it grows when the masters
# wait for a core), cpu_pct_per_master their mean CPU over the run; hosts_per_master_at_50ms =
# per_master_per_s / cpu_pct_per_master * 0.05 s: the host-policies one master serves at the
# default period with a core of its own (here six redis-servers and the client share two).
# Environment: SCRIPT_REQUESTS (200000 exchanges per node count); SCRIPT_ONLY=1 leaves out the
# three hosts (the script's cost alone, in a minute).
set -euo pipefail
BUILD_DIR=${1:-build}
SCRIPT_REQUESTS=${SCRIPT_REQUESTS:-200000}
LUA="$(dirname "$(readlink -f "$0")")/../../userspace/src/fleet.lua"
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
command -v redis-server >/dev/null || { echo "fleet_bench: redis-server is not installed" >&2; exit 1; }
if [ "${SCRIPT_ONLY:-0}" != 1 ]; then
    echo "== fleet: 3 hosts, CIR 24 Mbit/s, CBS 64 KiB and 1 MiB, exchanges every 50 ms, lease 1 s"
    "$BUILD_DIR/tests/e2e_tests" --gtest_also_run_disabled_tests \
        --gtest_filter='Fleet.DISABLED_Bench' |
        tee /tmp/tricolor-fleet-bench.log | grep -E '^BENCH|^RESULT|FAILED|Failure' || true
    grep -q '^\[  PASSED  \] 1 test' /tmp/tricolor-fleet-bench.log
fi

echo "== fleet script: redis-benchmark -c 50, EVALSHA of fleet.lua, one policy, N nodes"
NS=tcfleet-r
R="ip netns exec $NS"
DIR=/run/tricolor-fleet-bench
cleanup() {
    if [ -f "$DIR/redis.pid" ]; then kill "$(cat "$DIR/redis.pid")" 2>/dev/null || true; fi
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$DIR"
}
cleanup
trap cleanup EXIT
mkdir -p "$DIR"
ip netns add "$NS"
$R ip link set lo up
$R redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --pidfile "$DIR/redis.pid" --dir "$DIR" --logfile "$DIR/redis.log"
for _ in $(seq 50); do $R redis-cli ping >/dev/null 2>&1 && break; sleep 0.1; done
sha=$($R redis-cli script load "$(cat "$LUA")")
[[ "$sha" =~ ^[0-9a-f]{40}$ ]] || { echo "fleet_bench: SCRIPT LOAD failed: $sha" >&2; exit 1; }
# One policy: CIR 8 Mbit/s, CBS 100 kB; every node runs no lease yet and offers 10 kbit/s,
# lease 1 s, the fair shares computed anew every 50 ms (the default period).
ARGS=(8000000 100000 0 0 0 10000 1000000 0 50000)
KEYS=('tricolor:{b}:lease' 'tricolor:{b}:hosts' 'tricolor:{b}:seen' 'tricolor:{b}:bucket')
for nodes in 1000 10000; do
    $R redis-cli flushall >/dev/null
    # One exchange by hand: the script answers {rate, cap, hosts, ...}, not an error.
    $R redis-cli evalsha "$sha" 4 "${KEYS[@]}" node:check "${ARGS[@]}" | grep -qv ERR ||
        { echo "fleet_bench: EVALSHA failed" >&2; exit 1; }
    $R redis-cli config resetstat >/dev/null
    rps=$($R redis-benchmark -c 50 -n "$SCRIPT_REQUESTS" -r "$nodes" --csv \
        evalsha "$sha" 4 "${KEYS[@]}" 'node:__rand_int__' "${ARGS[@]}" |
        awk -F'"' 'NR == 2 {print $4}')
    usec=$($R redis-cli info commandstats | sed -n 's/.*cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')
    read -r at50 at200 < <(python3 -c "r = $rps; print(f'{r * 0.05:.0f} {r * 0.2:.0f}')")
    echo "RESULT name=fleet_script_${nodes}_nodes exchanges_per_s=${rps%.*} usec_per_call=$usec" \
        "hosts_at_50ms=$at50 hosts_at_200ms=$at200"
done

echo "== fleet script on a Redis Cluster: 3 masters, a replica each, redis-benchmark --cluster -c 50"
PORTS=(7000 7001 7002 7003 7004 7005)
for p in "${PORTS[@]}"; do
    $R redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file "$DIR/nodes-$p.conf" --cluster-node-timeout 2000 \
        --repl-diskless-sync-delay 0 --save '' --appendonly no --daemonize yes \
        --pidfile "$DIR/redis-$p.pid" --dir "$DIR" --logfile "$DIR/redis-$p.log"
done
cleanup_cluster() {
    for p in "${PORTS[@]}"; do
        [ -f "$DIR/redis-$p.pid" ] && kill "$(cat "$DIR/redis-$p.pid")" 2>/dev/null || true
    done
    cleanup
}
trap cleanup_cluster EXIT
for p in "${PORTS[@]}"; do
    for _ in $(seq 50); do $R redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
$R redis-cli --cluster create $(printf '127.0.0.1:%s ' "${PORTS[@]}") --cluster-replicas 1 \
    --cluster-yes >"$DIR/create.log" 2>&1 ||
    { echo "fleet_bench: redis-cli --cluster create failed" >&2; cat "$DIR/create.log" >&2; exit 1; }
for _ in $(seq 100); do
    $R redis-cli -p 7000 cluster info | grep -q cluster_state:ok && break
    sleep 0.1
done
masters=()
for p in "${PORTS[@]}"; do
    $R redis-cli -p "$p" role | head -1 | grep -q master && masters+=("$p")
done
[ ${#masters[@]} = 3 ] || { echo "fleet_bench: ${#masters[@]} masters, not 3" >&2; exit 1; }
# Until every master has its replica in sync (before that, redis-benchmark --cluster sees the
# replicas as masters without slots).
for p in "${masters[@]}"; do
    for _ in $(seq 100); do
        $R redis-cli -p "$p" info replication | grep -q 'slave0:.*state=online' && break
        sleep 0.1
    done
done
for p in "${masters[@]}"; do
    [ "$($R redis-cli -p "$p" script load "$(cat "$LUA")")" = "$sha" ] ||
        { echo "fleet_bench: SCRIPT LOAD on $p failed" >&2; exit 1; }
    $R redis-cli -p "$p" config resetstat >/dev/null
done
ticks() { awk '{print $14 + $15}' "/proc/$(cat "$DIR/redis-$1.pid")/stat"; }
declare -A t0
for p in "${masters[@]}"; do t0[$p]=$(ticks "$p"); done
start=$(date +%s.%N)
# redis-benchmark --cluster replaces {tag} with a tag of each master's slots.
rps=$($R redis-benchmark --cluster -p "${masters[0]}" -c 50 -n "$SCRIPT_REQUESTS" -r 1000 --csv \
    evalsha "$sha" 4 'tricolor:{tag}:lease' 'tricolor:{tag}:hosts' 'tricolor:{tag}:seen' \
    'tricolor:{tag}:bucket' \
    'node:__rand_int__' "${ARGS[@]}" | awk -F'"' '/^"evalsha/ {print $4}')
secs=$(python3 -c "import time; print(time.time() - $start)")
usecs=() cpus=()
for p in "${masters[@]}"; do
    usecs+=("$($R redis-cli -p "$p" info commandstats |
        sed -n 's/.*cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')")
    cpus+=("$(( $(ticks "$p") - ${t0[$p]} ))")
done
python3 - "$rps" "$secs" "$(getconf CLK_TCK)" "${usecs[*]}" "${cpus[*]}" <<'PY'
import sys
rps, secs, hz = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
usec = [float(u) for u in sys.argv[4].split()]
cpu = [float(c) / hz / secs * 100 for c in sys.argv[5].split()]
u = sum(usec) / len(usec)
c = sum(cpu) / len(cpu)
print(f"RESULT name=fleet_cluster_3_masters exchanges_per_s={rps:.0f} "
      f"per_master_per_s={rps / 3:.0f} usec_per_call={u:.1f} cpu_pct_per_master={c:.0f} "
      f"hosts_per_master_at_50ms={rps / 3 / (c / 100) * 0.05:.0f}")
PY
