#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# run.sh BUILD_DIR [SECONDS [NAME...]]: each libFuzzer harness of BUILD_DIR (built with
# TRICOLOR_FUZZ=ON), or those named, for SECONDS (default 30), starting from the checked-in
# corpus (tests/fuzz/corpus/NAME). What it adds to the corpus stays in BUILD_DIR/fuzz/corpus/NAME;
# an input that broke a property or crashed is saved in BUILD_DIR/fuzz/crashes/NAME (check it in
# under tests/fuzz/corpus/NAME once fixed: the suite replays it in every build), and so is one
# slower than 10 s (slow-unit-*, counted apart: not a failure). Prints a line per harness,
#   RESULT name=fuzz_NAME seconds=S execs=N cov=C crashes=K slow=L
# and exits 1 if any harness found anything.
set -euo pipefail
BUILD=$(readlink -f "$1")
SECS=${2:-30}
shift $(($# < 2 ? $# : 2))
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=(units trace config control capture)
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
rc=0
for name in "${NAMES[@]}"; do
    bin="$BUILD/tests/fuzz/${name}_fuzz"
    [ -x "$bin" ] || { echo "run.sh: no $bin (configure with -DTRICOLOR_FUZZ=ON)" >&2; exit 2; }
    work="$BUILD/fuzz/corpus/$name" crashes="$BUILD/fuzz/crashes/$name" log="$BUILD/fuzz/$name.log"
    mkdir -p "$work" "$crashes"
    status=0
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$bin" -max_total_time="$SECS" -print_final_stats=1 -max_len=4096 -timeout=20 \
        -rss_limit_mb=4096 -artifact_prefix="$crashes/" "$work" "$REPO/tests/fuzz/corpus/$name" \
        >"$log" 2>&1 || status=$?
    execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
    cov=$(grep -oE ' cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || true)
    # slow-unit-*: an input that took over 10 s (kept to look at, not a failure).
    found=$(find "$crashes" -type f ! -name 'slow-unit-*' | wc -l)
    slow=$(find "$crashes" -type f -name 'slow-unit-*' | wc -l)
    echo "RESULT name=fuzz_$name seconds=$SECS execs=${execs:-0} cov=${cov:-0} crashes=$found" \
        "slow=$slow"
    if [ "$status" -ne 0 ] || [ "$found" -ne 0 ]; then
        echo "fuzz: $name found something (exit $status); its log: $log" >&2
        tail -30 "$log" >&2
        rc=1
    fi
done
exit $rc
