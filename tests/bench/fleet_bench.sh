#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# fleet_bench.sh BUILD_DIR: fleet-wide limits (docs/spec.md §10) on three hosts (network namespaces,
# each sending through its own veth into its own tricolord) and one real redis-server on
# loopback: green use of the fleet's CIR over 2 s windows while UDP at 2x CIR moves between
# hosts (and the exact never-over check over every pair of samples), exchanges per second per
# host and Redis's CPU, then Redis killed for 5 s and restarted under each fallback mode.
# The driver is the Fleet.DISABLED_Bench case of the e2e binary (tests/e2e/fleet_e2e_test.cpp),
# which cleans up after itself; this prints its BENCH lines.
set -euo pipefail
BUILD_DIR=${1:-build}
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
command -v redis-server >/dev/null || { echo "fleet_bench: redis-server is not installed" >&2; exit 1; }
echo "== fleet: 3 hosts, CIR 8 Mbit/s, CBS 100 kB, exchanges every 50 ms, lease 1 s"
"$BUILD_DIR/tests/e2e_tests" --gtest_also_run_disabled_tests --gtest_filter='Fleet.DISABLED_Bench' |
    tee /tmp/tricolor-fleet-bench.log | grep -E '^BENCH|FAILED|Failure' || true
grep -q '^\[  PASSED  \] 1 test' /tmp/tricolor-fleet-bench.log
