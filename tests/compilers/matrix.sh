#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# matrix.sh: the compiler matrix. The BPF objects built by each clang of CLANGS, each loaded on
# this kernel and on each guest kernel of KERNELS (tests/kernels/guest.sh), and the BPF suite
# run with each compiler's objects on this kernel.
#
#   tests/compilers/matrix.sh BUILD_DIR
#
# Debian 12 ships clang 14, 15 and 16; Debian 13 ships 17, 18 and 19: those run inside the
# Debian 13 root of tests/distros/root.sh, compiling the same sources. The C++ is built once in
# BUILD_DIR/compilers; each compiler then rebuilds only the objects, their skeletons and the
# four files that embed them (the build takes the BPF compiler as -DBPF_CLANG=...). Prints RESULT
# lines (load_*, bpf_suite_*); exits 1 when any object is refused or any suite fails.
#   CLANGS="14 15 16 17 18 19"  the compilers whose objects are built and loaded
#   SUITE_CLANGS="..."          those whose objects the BPF suite also runs with (default: all;
#                               tricolor.sh leaves out 14 and 19, whose suites ./tricolor.sh test
#                               and test-distros run)
#   KERNELS="linux-image-..."   guest kernels to load on (tests/kernels/guest.sh; default none)
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
BUILD=$(readlink -f "${1:?usage: matrix.sh BUILD_DIR}")
CLANGS=${CLANGS:-14 15 16 17 18 19}
SUITE_CLANGS=${SUITE_CLANGS-$CLANGS} # empty: no suite, loads only
KERNELS=${KERNELS:-}
DIR=$BUILD/compilers
OBJS=$DIR/objects
ROOT_SH=$REPO/tests/distros/root.sh
rc=0
mkdir -p "$DIR" "$OBJS"
rm -f "$DIR/suites.txt"

# The clang of version $1 as one path: the host's, or a wrapper that runs Debian 13's.
clang_path() {
    local v=$1 w
    if command -v "clang-$v" >/dev/null; then
        command -v "clang-$v"
        return
    fi
    w=$DIR/clang-$v-debian13
    printf '#!/bin/sh\nexec %q --bind %q -- clang-%s "$@"\n' "$ROOT_SH" "$DIR" "$v" >"$w"
    chmod +x "$w"
    "$w" --version >/dev/null 2>&1 || { echo "matrix.sh: no clang-$v here or in Debian 13's root" >&2; return 1; }
    echo "$w"
}

cd "$REPO"
for v in $CLANGS; do
    cc=$(clang_path "$v") || { rc=1; continue; }
    ver=$("$cc" --version | sed -n 's/.*clang version \([0-9.]*\).*/\1/p' | head -1)
    echo "== clang $v ($ver): build the BPF objects and the BPF suite"
    # Make does not rebuild on a changed command line: the objects go, and with them what embeds them.
    rm -f "$DIR"/bpf/*.bpf.o "$DIR"/tests/*.bpf.o
    case " $SUITE_CLANGS " in
    *" $v "*) targets=(bpf_tests control_replay bench_skel_gen) ;; # control_replay: a bpf case
    *) targets=(tricolor_dp_skel_gen tricolor_cgin_skel_gen replay_skel_gen bench_skel_gen) ;;
    esac
    if ! cmake -S "$REPO" -B "$DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBPF_CLANG="$cc" >/dev/null ||
        ! cmake --build "$DIR" -j "$(nproc)" --target "${targets[@]}" >"$DIR/build-clang$v.log" 2>&1; then
        echo "matrix.sh: clang $v: build failed (log: $DIR/build-clang$v.log)" >&2
        tail -20 "$DIR/build-clang$v.log" >&2
        echo "RESULT name=bpf_suite_clang$v clang=$ver passed=0 failed=build" | tee -a "$DIR/suites.txt"
        rc=1
        continue
    fi
    mkdir -p "$OBJS/clang$v"
    cp "$DIR"/bpf/*.bpf.o "$DIR"/tests/*.bpf.o "$OBJS/clang$v/" 2>/dev/null
    rm -f "$OBJS/clang$v/rejected.bpf.o" # refused on purpose (the load-error test)
    if [ "${targets[0]}" != bpf_tests ]; then
        echo "RESULT name=bpf_suite_clang$v clang=$ver passed=elsewhere failed=elsewhere" |
            tee -a "$DIR/suites.txt"
        continue
    fi
    out=$(ctest --test-dir "$DIR" -L '^bpf$' 2>&1)
    echo "$out" | grep -E 'tests passed|\(Failed\)|\(SEGFAULT\)|\(Timeout\)' >&2
    total=$(echo "$out" | sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p')
    failed=$(echo "$out" | sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1/p')
    echo "RESULT name=bpf_suite_clang$v clang=$ver passed=$(( ${total:-0} - ${failed:-0} )) failed=${failed:-?}" |
        tee -a "$DIR/suites.txt"
    [ "${failed:-1}" = 0 ] || rc=1
done

# Each kernel's load lines, then one line per compiler for docs/platforms.md's table.
LOADS=$DIR/loads.txt
: >"$LOADS"
echo "== every object of every compiler, loaded on $(uname -r)"
"$REPO/tests/compilers/load_objects.sh" "$BUILD/tests/load_check" "$OBJS" | tee -a "$LOADS"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
for k in $KERNELS; do
    echo "== every object of every compiler, loaded on $k (QEMU)"
    "$REPO/tests/kernels/guest.sh" --kernel "$k" --timeout 1200 -- \
        tests/compilers/load_objects.sh "$BUILD/tests/load_check" "$OBJS" | tr -d "\r" | tee -a "$LOADS"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
done
for v in $CLANGS; do
    line="RESULT name=compiler_clang$v"
    suite=$(grep "^RESULT name=bpf_suite_clang$v " "$DIR/suites.txt" 2>/dev/null | tail -1)
    ver=$(echo "$suite" | sed -n 's/.* clang=\([^ ]*\).*/\1/p')
    line+=" clang=${ver:-?}"
    for kv in $(sed -n "s/^RESULT name=load_clang${v}_\([0-9.]*\) .* refused=\([^ ]*\).*/\1=\2/p" "$LOADS"); do
        k=${kv%%=*} refused=${kv#*=}
        [ "$refused" = - ] && refused=loads || refused="refused:$refused"
        line+=" linux_${k//./_}=$refused"
    done
    passed=$(echo "$suite" | sed -n 's/.* passed=\([^ ]*\).*/\1/p')
    failed=$(echo "$suite" | sed -n 's/.* failed=\([^ ]*\).*/\1/p')
    if [ "$passed" = elsewhere ]; then
        # Debian 12's own clang is ./tricolor.sh test's, Debian 13's test-distros'.
        case $v in
        14) line+=" bpf_suite=in_test" ;;
        19) line+=" bpf_suite=in_test-distros" ;;
        *) line+=" bpf_suite=not_run" ;;
        esac
    else
        line+=" bpf_suite=${passed:-0}_passed_${failed:-?}_failed"
    fi
    echo "$line"
done
exit $rc
