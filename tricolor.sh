#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# tricolor.sh: one entry point for a fresh Debian 12 machine.
#   ./tricolor.sh demo    install, build, and run a live demo on a veth lab (about a minute)
#   ./tricolor.sh build   install the packages tricolor needs, configure and build
#   ./tricolor.sh test    the same, then run every test through ctest; on Debian 13 (whose clang
#                         builds libFuzzer) also the unit, CLI and BPF suites under clang's ASan
#                         and UBSan, and each fuzz harness for 30 s
#   ./tricolor.sh test-kernels  the same build, then every suite again under Debian 12's own
#                         kernel (6.1) booted in QEMU: the kernel matrix (tests/kernels/)
#   ./tricolor.sh bench   the same build, then the benchmarks (ratios to baselines in the run)
#   ./tricolor.sh test-distros  ./tricolor.sh test again inside a Debian 13 root (debootstrap,
#                         cached under /var/cache/tricolor): its g++, clang, libbpf and the rest
#   ./tricolor.sh test-compilers  the BPF objects of clang 14 to 19 loaded on every kernel of
#                         the matrix, and the BPF suite run with each (tests/compilers/)
#   ./tricolor.sh test-sanitizers  the unit, CLI and BPF suites built with ASan and UBSan
#   ./tricolor.sh fuzz [S]  each libFuzzer harness for S seconds (tests/fuzz/); Debian 12 runs
#                         them in the Debian 13 root (its clang can build them)
#   ./tricolor.sh deb     the same build, then a .deb for the Debian release it runs on
#   ./tricolor.sh test-deb  the .deb of Debian 12 and of Debian 13, each installed, run and
#                         purged in a fresh root of its release; Debian 12's under systemd too
#   ./tricolor.sh install the same build, then install under /usr/local: tricolord and
#                         tricolorctl, man pages, bash completion, the systemd unit
# Run as root (BPF programs are loaded by the tests). BUILD_DIR overrides ./build. Debian 12 and
# Debian 13 both work as the machine it runs on.
set -euo pipefail

cd "$(dirname "$(readlink -f "$0")")"
BUILD_DIR=${BUILD_DIR:-build}

# Debian packages, by what needs them.
PACKAGES=(
    build-essential cmake pkg-config            # C++ toolchain
    clang llvm bpftool libbpf-dev linux-libc-dev # BPF programs and skeletons
    libelf-dev zlib1g-dev                       # libbpf's link dependencies
    libcli11-dev libfmt-dev nlohmann-json3-dev  # tricolorctl, tricolord
    libyaml-cpp-dev prometheus-cpp-dev libsystemd-dev
    libcivetweb-dev                             # tricolord --web (the metrics' HTTP server too)
    libgtest-dev libgmock-dev                   # tests
    iproute2 iperf3 python3                     # test labs: TCP through them, ss parsed
    libhiredis-dev redis-server redis-tools     # fleet limits (docs/spec.md §10): client, tests' Redis
    dpkg-dev file                               # the .deb (CPack, dpkg-shlibdeps)
    libpcap-dev tcpdump                         # whatif: captures read, and made in the lab
    systemd                                     # the unit checked offline: systemd-analyze,
                                                # systemd-sysusers (tests/systemd)
)
# The suites that run natively only (CNI, Docker, Podman, the Kubernetes manifests, Prometheus,
# the page in a browser): installed where they run, with every end-to-end case (not in the
# Debian 13 root or the guests, whose platform cases leave them out): ./tricolor.sh test, bench.
NATIVE_PACKAGES=(
    containernetworking-plugins iputils-ping    # the CNI plugin's chain (bridge, host-local,
                                                # the reference bandwidth) and its bench's RTT
    docker.io podman busybox-static             # --containers docker|podman: engines of the tests'
                                                # own, and the image they import
    prometheus                                  # deploy/prometheus's rules, checked and scraped
    chromium                                    # tricolord --web's page, in a headless browser
)

die() { echo "tricolor.sh: $*" >&2; exit 1; }

# shellcheck source=tools/lab.sh
. tools/lab.sh

need_root() {
    [ "$(id -u)" -eq 0 ] || die "run as root: it installs packages and loads BPF programs"
}

install_deps() {
    local missing=()
    for p in "${PACKAGES[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "tricolor.sh: installing ${missing[*]}"
        apt-get update -qq
        # No service the packages bring is started by their install (policy-rc.d, as in a
        # chroot): the tests start their own redis-server and dockerd, and a dockerd started so
        # would make its default bridge in 172.17.0.0/16 (test traffic stays in 198.18.0.0/15).
        local own_policy=
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
            chmod +x /usr/sbin/policy-rc.d
            own_policy=1
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null || { [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d; return 1; }
        [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
    fi
}

# bpffs is where the daemon pins state; some minimal systems do not mount it.
mount_bpffs() {
    mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
}

# The cgroup and container suites need a cgroup v2 hierarchy (cgroup policies match by it, and a
# container engine gives each container a directory there): a machine with cgroup v1 alone gets
# one beside it, where systemd's hybrid layout puts it (the suites skip where none can be had).
mount_cgroup2() {
    awk '$3 == "cgroup2" { found = 1 } END { exit !found }' /proc/mounts && return
    mkdir -p /sys/fs/cgroup/unified 2>/dev/null &&
        mount -t cgroup2 none /sys/fs/cgroup/unified 2>/dev/null ||
        echo "tricolor.sh: no cgroup v2 hierarchy, and none could be mounted: the cgroup suites skip" >&2
}

# TRICOLOR_DEBUG_INFO=lines: user space with line tables only (-g1), not full debug info: a
# third less compile time, and backtraces (a sanitizer's, gdb's) still name file and line. The
# Debian 13 root's builds use it (test-distros). It stays in the build directory's cache.
DEBUG_ARGS=()
case ${TRICOLOR_DEBUG_INFO:-full} in
full) ;;
lines) DEBUG_ARGS=("-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG") ;;
*) die "TRICOLOR_DEBUG_INFO: full or lines" ;;
esac

build() {
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${DEBUG_ARGS[@]}" >/dev/null
    cmake --build "$BUILD_DIR" -j "$(nproc)"
}

# ctest, as many cases at a time as there are CPUs (the end-to-end cases run alone: RUN_SERIAL,
# tests/CMakeLists.txt). TRICOLOR_E2E=platform: of the end-to-end cases, only PLATFORM_E2E.
run_tests() {
    local only=()
    case ${TRICOLOR_E2E:-all} in all | platform) ;; *) die "TRICOLOR_E2E: all or platform" ;; esac
    [ "${TRICOLOR_E2E:-all}" = all ] || only=(-R "^(unit|cli|bpf)\\.|^e2e\\.($PLATFORM_E2E)")
    ctest --test-dir "$BUILD_DIR" -j "$(nproc)" --output-on-failure "${only[@]}" "$@"
}

# The kernel matrix: the same binaries and suites under each kernel of KERNELS, each booted in
# QEMU with this machine's root file system (tests/kernels/guest.sh). The kernel packages and
# the initramfs are built from Debian's packages and cached, never committed.
KERNELS=(linux-image-6.1.0-50-amd64-unsigned)
# Debian 13's kernel: the BPF and CLI suites (every program loaded and run through
# BPF_PROG_TEST_RUN); the end-to-end suites run on 6.1 and on this machine's kernel. The suites
# take about 7 minutes there under TCG (15 before each case loaded only the programs it runs),
# more than CI's budget leaves: CI sets TRICOLOR_KERNELS_BPF= (none) and loads every object on
# 6.12 in the compiler matrix instead.
KERNEL_612=linux-image-6.12.117+deb13-amd64-unsigned
read -ra KERNELS_BPF <<<"${TRICOLOR_KERNELS_BPF-$KERNEL_612}"
KERNEL_PACKAGES=(qemu-system-x86 busybox-static kmod cpio xz-utils debootstrap)
# The end-to-end cases whose subject is what a platform provides: the kernel's hooks (XDP in
# each mode, clsact and tcx, sock_ops pacing, fq's timestamps, ECN marks), pinned state adopted
# across kill -9 and an ABI upgrade, netlink's view of interfaces deleted, renamed or moved,
# what the kernel reports as attached, libbpf's logging, Redis and hiredis, libpcap and
# tcpdump. The other end-to-end cases are about user space (input refused before any kernel
# call, config and state files, what the CLI prints, the lock file, many clients, rates and
# their floors): a platform's compiler and libraries run them through the unit and CLI suites,
# and this machine runs them all. Platforms (the Debian 13 root, the guest kernels) run these.
PLATFORM_E2E='E2E\.(TrafficIsColouredCountedAndRedDropped|TcEgressAndIpv6OnXdpIngress|TcxLinkKeepsPolicingThroughKill9AndIsAdopted|Kill9LeavesThePolicyEnforcedAndARestartAdoptsEveryCounter|TcpThroughADropRedPolicyStaysWithinTheBound|TheDaemonReclaimsIdleFlows)|Fault\.(UpgradeFromAbi1KeepsCountersAndPolicies|InterfaceDeletedRenamedOrMovedWhileAttached|AttachInAnotherXdpModeSwitchesForReal|StatusShowsWhatTheKernelRunsThatNoEntryNames)|Shape\.(PacesOnlyMatchingSocketsAndResharesAmongActiveOnes|ShortRoundTripClampsTheWindowToHalfTheBucket|RefusedWhereItCannotWork|AqmCountersInStatsTableAndMetrics|StartsThatMeetRedAreLostNotRefused|EdtUnderFq.*)|ShapeLongRtt\.|Operator\.TcAttachLogsNoLibbpfNoise|HierE2E\.ThreeSendersUnderAPerSourceChildAndAnAggregateParent|Fleet\.(RedisLostAndBackSwitchesToTheFallbackAndReturns|DifferentCirOnTwoHostsTheFirstWriterWins)|WhatIfE2E\.|Cgroups\.|InterfacePatterns\.'
# Left out of those in the guest: the fleet's cases (50 ms exchanges on time, which CPUs that
# QEMU emulates at a tenth of the speed do not keep; the grants themselves run in the BPF
# suite) and what-if's (tcpdump and libpcap are this machine's there). Left out of the BPF and
# CLI suites: the cases of user-space algorithms over the maps, whose every kernel call other
# cases make too (policy-set ranks and rewrites, the classification cache, heavy hitters and
# their walks, the reclaim pass, what-if's tallies, plot and search, replay's CLI). Under TCG a
# case costs 15 to 140 s, nearly all of it the verifier (each case loads the data path), so
# these make 11 of the 6.1 run's 44 minutes. Shape.StartsThatMeetRed skips itself there (it
# depends on timing) after 20 s of setting up. Three more run on this kernel and in the Debian
# 13 root and make calls other guest cases make (the reclaim's map walk, TCP through a drop,
# a hierarchy's chain, which the BPF suite runs in the guest): 100 s left for CI's budget.
# The Shape.Edt* cases (--shape edt under fq) run there and only there: this VM's kernel has
# no sch_fq, where they skip. Of the fleet's BPF cases three run there (a lease earned, none
# without one, the kernel-side deadline); the others check the fold's arithmetic, the same
# bytecode on every kernel (7 cases, 140 s of TCG), as the pin replacement checks libbpf's.
# So do the counter arrays of every id set aside and the warm-up states made by a growth: user
# space's sizes and pins, which the growth case that does run there covers on 6.1 too; and so
# do the counters of before carried, the policy tables shrunk, a restart with another flow
# capacity, flows of before moved by the daemon into a growth's own table or reclaimed after a
# move (the programs' part, a flow moved at its next packet and the growth's own table read,
# runs there in the other flow table cases), a cgroup glob followed, a cgroup's bucket
# reclaimed, the ingress program swapped by a growth (a restart swaps it there too) and bad
# interface patterns refused: 6 of the guest's 32 minutes (CI's run of f83123f took 87). Since
# each BPF case loads only the programs it runs (DatapathOptions::programs), 4 more: 22 minutes.
GUEST_CASES="^(bpf|cli)\\.|^e2e\\.($PLATFORM_E2E)"
GUEST_EXCLUDE='^e2e\.(Fleet|WhatIfE2E)\.|^e2e\.Shape\.StartsThatMeetRed|^e2e\.E2E\.(TheDaemonReclaimsIdleFlows|TcpThroughADropRedPolicyStaysWithinTheBound)$|^e2e\.HierE2E\.|^bpf\.(PolicySetsTest|RankOrder|ClassCacheTest|FlowTopTest|FlowTopPinned|SmallHotMapTest|ReclaimPassTest)\.|^bpf\.WhatIfTest\.(Suggest|Totals|ThePlot|BadCaptures|Stamps|Runts|Microsecond)|^cli\.(WhatIfCli|HierReplayCli)\.|^e2e\.Cgroups\.BadCgroup|^bpf\.FleetDatapathTest\.(CIsCapped|ARateChange|SrtcmEarnings|ARenewalAfter|RandomLeases|PerKeyFleet|AFreshPolicyId)|^bpf\.DatapathPinning\.(AFleetMap|CounterArraysOfTheWholeIdRange|TheWarmUpAndQuotaStates|TheCountersOfBeforeAGrowth|PoliciesGoneShrink|AnotherCapacityResizes|FlowsOfBeforeWithNoRoom|AFlowMovedThenReclaimed)|^e2e\.Cgroups\.(PerCgroupGlob|ARemovedCgroupsBucket|AFlowTableGrowthSwaps)|^e2e\.InterfacePatterns\.BadPatterns'
# CI's machine took 49 minutes (ctest's own time) for the 6.1 run with one case at a time.
GUEST_TIMEOUT=3300

# ctest under guest kernel $1 with the rest as ctest's arguments. Waits in the tests stretch
# tenfold: TCG loads and verifies programs ~10x slower. Two cases at a time: the guest has two
# CPUs, and one case (mostly the verifier, single-threaded) keeps one busy; the BPF and CLI
# suites take half the time (12.5 min for 93 cases, was 24). The end-to-end cases still run
# alone (RUN_SERIAL, tests/CMakeLists.txt): they time rates and share the lab's names.
guest_ctest() {
    local k=$1
    shift
    tests/kernels/guest.sh --kernel "$k" --timeout "$GUEST_TIMEOUT" -- \
        env TRICOLOR_TIME_SCALE=10 ctest --test-dir "$BUILD_DIR" -j 2 --output-on-failure "$@"
}

test_kernels() {
    local k rc=0
    for k in "${KERNELS[@]}"; do
        echo "== kernel matrix: $k"
        guest_ctest "$k" -R "$GUEST_CASES" -E "$GUEST_EXCLUDE" "$@" || rc=1
    done
    for k in "${KERNELS_BPF[@]}"; do
        echo "== kernel matrix: $k (BPF and CLI suites)"
        guest_ctest "$k" -L '^(bpf|cli)$' -E "$GUEST_EXCLUDE" "$@" || rc=1
    done
    return $rc
}

# Debian 13 (trixie) as the machine: the same ./tricolor.sh test inside a root made by
# debootstrap (tests/distros/root.sh), which installs its own packages as on a new machine.
# Its build directory is apart: $BUILD_DIR/debian13.
test_distros() {
    echo "== Debian 13 root: ./tricolor.sh test"
    tests/distros/root.sh --suite trixie -- env BUILD_DIR="$BUILD_DIR/debian13" \
        TRICOLOR_E2E="${TRICOLOR_E2E-platform}" TRICOLOR_DEBUG_INFO="${TRICOLOR_DEBUG_INFO-lines}" \
        ./tricolor.sh test "$@"
}

# The compiler matrix: clang 14, 15 and 16 here (Debian 12's), 17, 18 and 19 in the Debian 13
# root; each one's objects loaded on this kernel and on the guest kernels, and the BPF suite
# run with each one's objects here (tests/compilers/matrix.sh).
test_compilers() {
    tests/distros/root.sh --suite trixie -- bash -c 'dpkg-query -W clang-17 clang-18 clang-19 \
        libbpf-dev >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends clang-17 clang-18 clang-19 libbpf-dev \
        linux-libc-dev >/dev/null; }'
    # clang 14's suite is ./tricolor.sh test's, clang 19's ./tricolor.sh test-distros'.
    # TRICOLOR_COMPILER_SUITES= (empty) loads every object everywhere but runs no suite: CI's.
    SUITE_CLANGS="${TRICOLOR_COMPILER_SUITES-15 16 17 18}" \
        KERNELS="${KERNELS[*]} $KERNEL_612" tests/compilers/matrix.sh "$BUILD_DIR"
}

# The targets of the unit, CLI and BPF suites, and ctest over those suites with the sanitizers'
# findings made fatal: a leak, an out-of-bounds access or undefined behaviour anywhere in user
# space fails the test that ran it. The end-to-end suites stay with the plain build (their
# rates and timeouts are for it). The BPF objects are clang's own build either way.
SANITIZED_TARGETS=(unit_tests cli_tests bpf_tests tricolorctl units_replay trace_replay
    config_replay control_replay capture_replay)
# (Not unit.Systemd.*: it reads the unit file and checks that the built tricolord is there, which
# these builds leave out; the sanitizers have nothing of it to instrument.)
sanitized_ctest() {
    local dir=$1
    shift
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir "$dir" -j "$(nproc)" --output-on-failure -L '^(unit|cli|bpf)$' \
        -E '^unit\.Systemd\.' "$@"
}

# Those suites built by this machine's g++ with ASan and UBSan, in $BUILD_DIR/sanitize.
test_sanitizers() {
    local dir="$BUILD_DIR/sanitize"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRICOLOR_SANITIZE=ON >/dev/null
    cmake --build "$dir" -j "$(nproc)" --target "${SANITIZED_TARGETS[@]}"
    sanitized_ctest "$dir" "$@"
}

# libFuzzer builds this code with clang and a C++ library that has std::expected: Debian 13's
# clang 19 with libstdc++ 14. Debian 12's clang 14 has none: there the suite replays the
# harnesses over their corpora (tests/fuzz), and the harnesses run in the Debian 13 root.
debian_release() { (. /etc/os-release && echo "${VERSION_ID%%.*}"); }

can_fuzz() {
    printf '%s\n' '#include <expected>' 'std::expected<int, int> f() { return 1; }' \
        'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) {' \
        '    return *f() - 1;' '}' |
        clang++ -std=c++2b -fsanitize=fuzzer -x c++ - -o /dev/null 2>/dev/null
}

# The clang build with ASan, UBSan and libFuzzer's coverage, $BUILD_DIR/fuzzing: the four
# harnesses and the targets named ($@).
fuzz_build() {
    local dir="$BUILD_DIR/fuzzing" major
    major=$(clang --version | sed -nE 's/.*clang version ([0-9]+).*/\1/p' | head -1)
    install_deps "libclang-rt-$major-dev" # libFuzzer's runtime
    can_fuzz || die "clang $major cannot build a libFuzzer program that uses std::expected"
    CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${DEBUG_ARGS[@]}" \
        -DTRICOLOR_FUZZ=ON >/dev/null
    cmake --build "$dir" -j "$(nproc)" --target units_fuzz trace_fuzz config_fuzz control_fuzz \
        capture_fuzz "$@"
}

# Each libFuzzer harness for $1 seconds (tests/fuzz/run.sh).
fuzz() {
    local secs=${1:-30}
    if [ "$(debian_release)" -lt 13 ]; then
        echo "== fuzz: in the Debian 13 root (Debian $(debian_release)'s clang cannot build them)"
        install_deps debootstrap
        tests/distros/root.sh --suite trixie -- env BUILD_DIR="$BUILD_DIR/debian13" \
            ./tricolor.sh fuzz "$secs"
        return
    fi
    fuzz_build
    tests/fuzz/run.sh "$BUILD_DIR/fuzzing" "$secs"
}

# ./tricolor.sh test's hostile-input part, where clang can build libFuzzer (Debian 13): the
# unit, CLI and BPF suites again from the fuzzing build (clang's ASan and UBSan), then each
# harness for 30 seconds. Debian 12 runs it in the Debian 13 root: ./tricolor.sh test-distros.
test_hostile() {
    if [ "$(debian_release)" -lt 13 ]; then
        echo "== sanitizers and fuzzing: Debian $(debian_release)'s clang cannot build libFuzzer;" \
            "./tricolor.sh test-distros runs them in a Debian 13 root (test-sanitizers: g++'s here)"
        return
    fi
    echo "== sanitizers: the unit, CLI and BPF suites built by clang with ASan and UBSan"
    fuzz_build "${SANITIZED_TARGETS[@]}"
    sanitized_ctest "$BUILD_DIR/fuzzing"
    echo "== fuzz: each libFuzzer harness for 30 seconds"
    tests/fuzz/run.sh "$BUILD_DIR/fuzzing" 30
}

# The .deb of the release this runs on, from the build in $BUILD_DIR: $BUILD_DIR/deb/.
make_deb() {
    local release
    release=$(debian_release)
    cmake -S . -B "$BUILD_DIR" -DTRICOLOR_DEB_RELEASE="1~deb$release" >/dev/null
    rm -rf "$BUILD_DIR/deb"
    (cd "$BUILD_DIR" && cpack -G DEB -B "$PWD/deb" >/dev/null) || die "cpack failed"
    ls "$BUILD_DIR"/deb/tricolor_*.deb
}

# The demo: namespaces tcdemo-a (sender, 198.18.100.1) and tcdemo-b (receiver, 198.18.100.2)
# joined by a veth pair; tricolord runs in tcdemo-b with XDP on its end of the pair.
DEMO_DIR=/run/tricolor-demo
demo_cleanup() {
    trap - EXIT INT TERM
    echo
    echo "== cleaning up"
    lab_down tcdemo-a tcdemo-b "$DEMO_DIR"
}

demo() {
    local ctl="$BUILD_DIR/tools/tricolorctl"
    local A="ip netns exec tcdemo-a" B="ip netns exec tcdemo-b"
    demo_cleanup >/dev/null 2>&1
    trap demo_cleanup EXIT
    trap 'exit 130' INT TERM
    echo "== lab: tcdemo-a (198.18.100.1) <-veth-> tcdemo-b (198.18.100.2)"
    lab_up tcdemo-a tcd-a 198.18.100.1 tcdemo-b tcd-b 198.18.100.2 "$DEMO_DIR"
    echo "== tricolord (log: $DEMO_DIR/tricolord.log)"
    lab_daemon tcdemo-b "$BUILD_DIR" "$DEMO_DIR" || die "tricolord did not start"
    set -x
    "$ctl" attach tcd-b --hook xdp
    "$ctl" policy add udp-per-source --algo srtcm --cir 20mbit --cbs 64k --ebs 128k \
        --per src --match proto udp --priority 10
    "$ctl" policy add tcp-aggregate --algo trtcm --cir 30mbit --cbs 256k --pir 60mbit \
        --pbs 512k --match proto tcp --yellow dscp:af12 --red drop --priority 20
    "$ctl" policy list
    { set +x; } 2>/dev/null
    $B iperf3 -s -D --logfile "$DEMO_DIR/iperf3-server.log"
    sleep 0.5
    echo "== UDP at 60 Mbit/s from 198.18.100.1: three times udp-per-source's CIR"
    # tcpdump records what the sender sends (on tcdemo-b, XDP drops red before any capture
    # sees it) for the what-if below; 96 bytes of each is enough, whatif meters a snapped
    # packet at its length on the wire.
    $A tcpdump -i tcd-a -s 96 -w "$DEMO_DIR/udp.pcap" --time-stamp-precision=nano -U udp \
        2>/dev/null &
    local dump=$!
    sleep 1
    $A iperf3 -c 198.18.100.2 -u -b 60M -l 1200 -t 8 >"$DEMO_DIR/udp.log" 2>&1 &
    local client=$!
    "$ctl" stats --watch --interval 1 --count 9
    wait "$client" || true
    kill -INT "$dump" 2>/dev/null || true
    wait "$dump" 2>/dev/null || true
    grep -E "receiver" "$DEMO_DIR/udp.log" || tail -3 "$DEMO_DIR/udp.log"
    # What-if (docs/whatif.md): the same packets through other limits, offline.
    echo "== what if: that capture through 50 Mbit/s with a 64 KiB burst (offline, the real data path)"
    cat >"$DEMO_DIR/whatif.yaml" <<'YAML'
policies:
  - {name: udp-50, algo: srtcm, cir: 50mbit, cbs: 64k, ebs: 0, match: {proto: udp}}
YAML
    set -x
    "$ctl" whatif "$DEMO_DIR/udp.pcap" -f "$DEMO_DIR/whatif.yaml" --plot "$BUILD_DIR/demo-whatif.svg"
    "$ctl" whatif "$DEMO_DIR/udp.pcap" -f "$DEMO_DIR/whatif.yaml" --suggest cir --red-at-most 1%
    { set +x; } 2>/dev/null
    echo "   (the plot: $BUILD_DIR/demo-whatif.svg, for a browser)"
    echo "== TCP through a trtcm aggregate at 30/60 Mbit/s: yellow remarked AF12, red dropped"
    $A iperf3 -c 198.18.100.2 -t 8 >"$DEMO_DIR/tcp.log" 2>&1 &
    client=$!
    "$ctl" stats --watch --interval 1 --count 9
    wait "$client" || true
    grep -E "sender|receiver" "$DEMO_DIR/tcp.log" || tail -3 "$DEMO_DIR/tcp.log"
    echo "== busiest flows"
    "$ctl" flows --top 5
    # Hierarchies (docs/hierarchies.md): 12 sources at 12 Mbit/s each; every source 10, all
    # together 100.
    echo "== every source 10 Mbit/s, all of them together 100: 12 sources at 12 Mbit/s"
    set -x
    "$ctl" policy add all-sources --algo srtcm --cir 100mbit --cbs 256k --ebs 256k --only-parent
    "$ctl" policy set udp-per-source --cir 10mbit --cbs 64k --ebs 64k --parent all-sources
    { set +x; } 2>/dev/null
    for i in $(seq 11 22); do
        ip -n tcdemo-a addr add "198.18.100.$i/24" dev tcd-a
        $B iperf3 -s -D -p "52$i" --logfile "$DEMO_DIR/iperf3-$i.log"
    done
    sleep 0.5
    for i in $(seq 11 22); do
        $A iperf3 -c 198.18.100.2 -p "52$i" -B "198.18.100.$i" -u -b 12M -l 1200 -t 8 \
            >"$DEMO_DIR/udp-$i.log" 2>&1 &
    done
    "$ctl" stats --watch --interval 1 --count 9
    wait
    "$ctl" flows --policy udp-per-source --top 4
    echo "== the same counters as JSON: tricolorctl -j stats"
    "$ctl" -j stats
    echo "== TCP from tcdemo-b's own sockets through tc egress, 20 Mbit/s, CBS 16 KiB:"
    echo "   the hard policer, then --shape sockets (the sender paced to the policy's rate)"
    "$ctl" attach tcd-b --hook tc --direction egress
    $A iperf3 -s -D -p 5202 --logfile "$DEMO_DIR/iperf3-server-a.log"
    sleep 0.5
    local shape
    for shape in off sockets; do
        "$ctl" policy add tcp-out --algo srtcm --cir 20mbit --cbs 16k --ebs 0 \
            --match dst 198.18.100.1/32 --match proto tcp --shape "$shape" >/dev/null
        $B iperf3 -C cubic -c 198.18.100.1 -p 5202 -t 5 >"$DEMO_DIR/tcp-$shape.log" 2>&1 || true
        echo "-- --shape $shape:"
        grep -E "receiver" "$DEMO_DIR/tcp-$shape.log" || tail -3 "$DEMO_DIR/tcp-$shape.log"
        "$ctl" stats tcp-out
        "$ctl" policy del tcp-out
    done
    echo
}

usage() {
    cat <<USAGE
usage: ./tricolor.sh demo|build|test|test-kernels|test-distros|test-compilers|test-sanitizers|fuzz|deb|test-deb|bench|soak|install [ctest args...]
  demo   install, build, then a live demo on a veth lab in two namespaces (cleans up after)
  build  install dependencies (apt-get) and build into \$BUILD_DIR (default ./build)
  test   build, then run every test (ctest); extra arguments go to ctest. On Debian 13, then
         the unit, CLI and BPF suites under clang's ASan and UBSan and each fuzz harness
         for 30 s (left out when ctest arguments are given). TRICOLOR_E2E=platform: of the
         end-to-end cases only those of what a platform provides (PLATFORM_E2E)
  test-kernels  build, then under Debian 12's 6.1 kernel in QEMU (TCG) the BPF and CLI suites
         and the end-to-end cases of what a kernel provides; under Debian 13's 6.12 the BPF
         and CLI suites
  test-distros  ./tricolor.sh test inside a Debian 13 root (its compilers and libraries),
         TRICOLOR_E2E=platform unless set
  test-compilers  BPF objects of clang 14 to 19: loaded on each kernel, BPF suite with each
  test-sanitizers  the unit, CLI and BPF suites built with ASan and UBSan
  fuzz [S]  each libFuzzer harness for S seconds (30); in the Debian 13 root on Debian 12
  deb    build, then a .deb for this Debian release (\$BUILD_DIR/deb/)
  soak [M]  M minutes (30) of everything at once: traffic at twice the CIR, policy churn,
            SIGHUP, kill -9, veths and cgroups coming and going, a fleet policy; the bound
            on every pair of samples, resources back to what they were (docs/benchmarks.md)
  test-deb  the .debs of Debian 12 and 13 installed, run and purged in fresh roots; Debian
            12's under a real systemd in a QEMU guest
  bench  build, then the data-path benchmark (not part of the tests)
  install  build, then install binaries, man pages, bash completion and the systemd unit
USAGE
}

cmd=${1:-}
[ $# -gt 0 ] && shift
# The benchmarks, in order; ratios to baselines measured in the same run.
run_benches() {
    echo "== data path (BPF_PROG_TEST_RUN): ratios to an empty XDP program"
    "$BUILD_DIR/tests/datapath_bench"
    echo "== the flow table's probing: new flows that find no free slot, by load (a simulation)"
    python3 tests/bench/flow_slots_sim.py
    echo "== where a green packet's time goes, by part (perf samples): tricolor against the plain meter"
    BUILD_DIR="$BUILD_DIR" tests/bench/hot_profile.sh
    echo "== packets per second through native XDP on a veth, one receive CPU: tricolor against"
    echo "   an empty program and the plain eBPF meter"
    tests/bench/xdp_rate_bench.sh "$BUILD_DIR"
    echo "== control plane at 16k policies, end to end through tricolorctl"
    tests/bench/policy_bench.sh "$BUILD_DIR"
    echo "== flows --top 10 at 2^20 flows end to end: tricolorctl, the socket, the daemon"
    "$BUILD_DIR/tests/flows_top_bench"
    echo "== the daemon's memory (maps, resident) idle and at 10^3, 10^5 and 2^20 flows"
    "$BUILD_DIR/tests/footprint_bench"
    echo "== meter core in user space: tricolor against DPDK rte_meter"
    "$BUILD_DIR/tests/meter_bench"
    echo "== rate on a veth pair: tricolor against HTB and TBF (iperf3)"
    tests/bench/rate_bench.sh "$BUILD_DIR"
    echo "== TCP through the policer (--shape, --aqm) against HTB and TBF, RTT 0, 20 and 100 ms"
    rm -f "$BUILD_DIR/tcp_bench.tsv"
    TSV="$BUILD_DIR/tcp_bench.tsv" tests/bench/tcp_bench.sh "$BUILD_DIR"
    python3 tests/bench/tcp_plot.py "$BUILD_DIR/tcp_bench.tsv" "$BUILD_DIR/tcp_goodput_vs_cbs.svg"
    echo "plot: $BUILD_DIR/tcp_goodput_vs_cbs.svg (docs/tcp_goodput_vs_cbs.svg is a committed run)"
    echo "== TCP: BBR senders, RTT 0, one flow: --shape sockets and the hard policer"
    CC=bbr ID_SUFFIX=_bbr RTTS=0 MODES="police sockets" FLOWS_LIST=1 \
        tests/bench/tcp_bench.sh "$BUILD_DIR"
    echo "== TCP: 20 s runs, RTT 20 ms, CBS 64 KiB, one flow: hard policer and --aqm ecn, twice"
    local r
    for r in a b; do
        SECONDS_EACH=20 RTTS=20 CBS_LIST=64 MODES="xdp aqm_ecn" FLOWS_LIST=1 ID_SUFFIX=_20s_$r \
            tests/bench/tcp_bench.sh "$BUILD_DIR"
    done
    echo "== TCP per cgroup: egress with --shape sockets, ingress with --aqm ecn, each against the"
    echo "   hard policer; RTT 0 and 20 ms, then 20 s ingress runs at 20 ms, twice"
    tests/bench/cgroup_tcp_bench.sh "$BUILD_DIR"
    for r in a b; do
        SECONDS_EACH=20 RTTS=20 CASES=ingress ID_SUFFIX=_20s_$r \
            tests/bench/cgroup_tcp_bench.sh "$BUILD_DIR"
    done
    echo "== a pod's limit through CNI: the reference bandwidth plugin against tricolor's, same chain"
    tests/bench/cni_bench.py "$BUILD_DIR"
    echo "== the live page (tricolord --web): 500 policies, 1000 flows: its first render in headless"
    echo "   Chromium and the daemon's CPU with one viewer; then docs/page.png"
    BUILD_DIR="$BUILD_DIR" tests/web/page_test.sh --bench
    BUILD_DIR="$BUILD_DIR" tests/web/page_test.sh --screenshot docs/page.png
    echo "== the delay line natively (no netem in this kernel)"
    HOWS=delayline ID_SUFFIX=_native tests/bench/delayline_check.sh "$BUILD_DIR"
    echo "== the delay line against netem, in Debian's 6.1 booted in QEMU (TCG)"
    tests/kernels/guest.sh --timeout 900 -- tests/bench/delayline_check.sh "$BUILD_DIR"
    echo "== whatif: 10^6 packets of a capture against replay -f on the same packets; the plot"
    tests/bench/whatif_bench.sh "$BUILD_DIR"
    tests/bench/whatif_plot.sh "$BUILD_DIR"
    echo "== fleet-wide limits: three hosts, one Redis; the fleet script's cost"
    tests/bench/fleet_bench.sh "$BUILD_DIR"
    echo "== the kernel's own policer, act_police, in Debian's 6.1 booted in QEMU (TCG)"
    tests/kernels/guest.sh --timeout 900 -- tests/bench/police_bench.sh "$BUILD_DIR"
    # --shape edt needs sch_fq, which only the guest's kernel has: the local-sender modes again
    # there, RTT 0 and 20 ms, against HTB and the hard policer of the same run.
    echo "== TCP: --shape edt under fq against --shape sockets, HTB and the hard policer, in 6.1"
    tests/kernels/guest.sh --timeout 1500 -- env RTTS="0 20" MODES="htb police sockets edt" \
        ID_SUFFIX=_g61 tests/bench/tcp_bench.sh "$BUILD_DIR"
    # The setting the TCP issue's prototype was measured in (6.1 under QEMU, netem 10 ms each
    # way), and the same guest through the delay line: remote senders, one flow, RTT 20 ms.
    echo "== TCP: remote senders in 6.1 under QEMU, RTT 20 ms through netem, then the delay line"
    local how
    for how in netem delayline; do
        tests/kernels/guest.sh --timeout 900 -- env DELAY_HOW=$how RTTS=20 FLOWS_LIST=1 \
            MODES="htb xdp aqm_drop aqm_ecn" ID_SUFFIX=_g61_$how tests/bench/tcp_bench.sh \
            "$BUILD_DIR"
    done
    # docs/testing.md's fuzzing figures: each harness for 10 minutes (Debian 13's clang).
    echo "== fuzz: each libFuzzer harness for 10 minutes"
    fuzz 600
}

case "$cmd" in
demo)
    need_root
    install_deps iperf3
    mount_bpffs
    build
    demo
    ;;
build)
    need_root
    install_deps
    build
    ;;
test)
    need_root
    if [ "${TRICOLOR_E2E:-all}" = all ]; then
        # node and npm: the Kubernetes manifests checked against the API's schemas
        # (tests/k8s/), and the browser that loads the live page driven (tests/web/); Debian's
        # own where the machine has none (NodeSource's carries its npm).
        node_packages=()
        command -v node >/dev/null && command -v npm >/dev/null || node_packages=(nodejs npm)
        install_deps "${NATIVE_PACKAGES[@]}" "${node_packages[@]}"
    else
        install_deps
    fi
    mount_bpffs
    mount_cgroup2
    build
    run_tests "$@"
    # With ctest's arguments (a chosen subset) the hostile-input part is left out.
    [ $# -gt 0 ] || test_hostile
    ;;
test-kernels)
    need_root
    install_deps "${KERNEL_PACKAGES[@]}"
    mount_bpffs
    build
    test_kernels "$@"
    ;;
bench)
    need_root
    # rte_meter; traffic and its JSON for the veth benches; a browser for the whatif picture;
    # the 6.1 guest for act_police; perf for where a packet's time goes
    install_deps libdpdk-dev iperf3 python3 ethtool chromium linux-perf "${KERNEL_PACKAGES[@]}" \
        "${NATIVE_PACKAGES[@]}"
    mount_bpffs
    build
    # Everything the benchmarks print is kept; their RESULT lines become the docs' generated
    # figures (tests/bench/figures.py: docs/figures.results, then the blocks of the docs).
    run_benches 2>&1 | tee "$BUILD_DIR/bench.out"
    python3 tests/bench/figures.py collect "$BUILD_DIR/bench.out"
    python3 tests/bench/figures.py write
    ;;
soak)
    # tests/bench/soak.py: MINUTES (30) of everything at once; its RESULT lines become the
    # docs' figures (docs/benchmarks.md, "Soak").
    need_root
    install_deps
    mount_bpffs
    build
    BUILD_DIR="$BUILD_DIR" python3 tests/bench/soak.py "${1:-30}" 2>&1 | tee "$BUILD_DIR/soak.out"
    rc=${PIPESTATUS[0]}
    python3 tests/bench/figures.py collect "$BUILD_DIR/soak.out"
    python3 tests/bench/figures.py write
    exit "$rc"
    ;;
fuzz)
    need_root
    install_deps
    mount_bpffs
    fuzz "$@"
    ;;
test-sanitizers)
    need_root
    install_deps
    mount_bpffs
    test_sanitizers "$@"
    ;;
test-distros)
    need_root
    install_deps debootstrap
    test_distros "$@"
    ;;
test-compilers)
    need_root
    install_deps clang-15 clang-16 debootstrap "${KERNEL_PACKAGES[@]}"
    mount_bpffs
    build
    test_compilers
    ;;
deb)
    need_root
    install_deps
    build
    make_deb
    ;;
test-deb)
    need_root
    install_deps debootstrap lintian "${KERNEL_PACKAGES[@]}"
    build
    tests/distros/deb_test.sh "$BUILD_DIR"
    ;;
install)
    need_root
    install_deps
    build
    cmake --install "$BUILD_DIR" --prefix "${PREFIX:-/usr/local}"
    # The unit runs tricolord as user tricolor: made from the installed sysusers.d entry.
    if command -v systemd-sysusers >/dev/null; then
        systemd-sysusers "${PREFIX:-/usr/local}/lib/sysusers.d/tricolor.conf"
    fi
    if [ -d /run/systemd/system ]; then
        systemd-tmpfiles --create "${PREFIX:-/usr/local}/lib/tmpfiles.d/tricolor.conf"
    fi
    ;;
-h | --help | help)
    usage
    ;;
*)
    usage >&2
    exit 2
    ;;
esac
