#!/usr/bin/env bash
# tricolor.sh: one entry point for a fresh Debian 12 machine.
#   ./tricolor.sh build   install the packages tricolor needs, configure and build
#   ./tricolor.sh test    the same, then run every test through ctest
#   ./tricolor.sh bench   the same build, then the benchmarks (ratios to baselines in the run)
# Run as root (BPF programs are loaded by the tests). BUILD_DIR overrides ./build.
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
    libgtest-dev libgmock-dev                   # tests
    iproute2                                    # test labs
)

die() { echo "tricolor.sh: $*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" -eq 0 ] || die "run as root: it installs packages and loads BPF programs"
}

install_deps() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "tricolor.sh: installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
}

# bpffs is where the daemon pins state; some minimal systems do not mount it.
mount_bpffs() {
    mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
}

build() {
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$BUILD_DIR" -j "$(nproc)"
}

run_tests() {
    ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
}

usage() {
    cat <<USAGE
usage: ./tricolor.sh build|test|bench [ctest args...]
  build  install dependencies (apt-get) and build into \$BUILD_DIR (default ./build)
  test   build, then run every test (ctest); extra arguments go to ctest
  bench  build, then the data-path benchmark (not part of the tests)
USAGE
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
build)
    need_root
    install_deps
    build
    ;;
test)
    need_root
    install_deps
    mount_bpffs
    build
    run_tests "$@"
    ;;
bench)
    need_root
    install_deps
    build
    "$BUILD_DIR/tests/datapath_bench"
    ;;
-h | --help | help)
    usage
    ;;
*)
    usage >&2
    exit 2
    ;;
esac
