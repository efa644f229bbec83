#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# root.sh: runs a command inside another Debian release's root file system, on this machine's
# kernel: the distribution matrix (Debian 13's g++, clang, libbpf and the rest of its userland).
#
#   tests/distros/root.sh [--suite trixie] [--fresh] [--timeout S] [--bind DIR]... -- COMMAND [ARG...]
#
# The root is made once with debootstrap (minbase) and cached under $TRICOLOR_ROOT_CACHE
# (default /var/cache/tricolor/roots), never committed; --fresh runs in a new copy of it that is
# thrown away after (what a package test needs). For each run the repository is
# bind-mounted at the same path inside the root, with /proc, /sys, bpffs, the cgroup mounts,
# /dev and /dev/pts, so builds and tests there see the host's kernel as the host does; the
# mounts live in a private mount namespace and go with it. COMMAND runs from the current
# directory (which must be inside the repository or a --bind directory, each mounted at its own
# path too); its exit code is root.sh's.
# Needs: debootstrap, util-linux (unshare), coreutils (timeout).
set -euo pipefail

SUITE=trixie
TIMEOUT=3600
CACHE=${TRICOLOR_ROOT_CACHE:-/var/cache/tricolor/roots}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
MIRROR=${TRICOLOR_DEBIAN_MIRROR:-}
BINDS=()
FRESH=

die() { echo "root.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --suite) SUITE=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --bind) BINDS+=("$(readlink -f "$2")"); shift 2 ;;
    --fresh) FRESH=1; shift ;;
    --) shift; break ;;
    *) die "unknown option $1 (usage: root.sh [--suite NAME] [--timeout S] -- COMMAND...)" ;;
    esac
done
[ $# -gt 0 ] || die "no command (usage: root.sh [--suite NAME] [--timeout S] -- COMMAND...)"
[ "$(id -u)" -eq 0 ] || die "run as root"
command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install debootstrap)"
inside=
for d in "$REPO" "${BINDS[@]}"; do
    case "$PWD/" in "$d"/*) inside=1 ;; esac
done
[ -n "$inside" ] || die "run it from inside the repository ($REPO) or a --bind directory"

# The mirror this machine's apt already uses, so the root reaches what the host reaches.
if [ -z "$MIRROR" ]; then
    MIRROR=$(apt-get indextargets --format '$(REPO_URI)' 2>/dev/null |
        grep -v -- '-security' | grep -m1 -o 'https\?://[^ ]*debian/\?' || true)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi

# The pristine root (debootstrap's, never changed) and the working root made from it, where
# tricolor.sh installs its build packages once; --fresh runs in a throwaway copy of the pristine
# one, as a new user's machine would be.
PRISTINE=$CACHE/$SUITE-minbase
if [ ! -f "$PRISTINE/.tricolor-ready" ]; then
    echo "root.sh: making a $SUITE root in $PRISTINE from $MIRROR (debootstrap, about a minute)" >&2
    rm -rf "$PRISTINE"
    mkdir -p "$CACHE"
    debootstrap --variant=minbase "$SUITE" "$PRISTINE" "$MIRROR" >"$CACHE/$SUITE.log" 2>&1 ||
        die "debootstrap $SUITE failed (log: $CACHE/$SUITE.log)"
    # tricolor.sh installs its packages with apt-get as on any Debian machine.
    echo "deb $MIRROR $SUITE main" >"$PRISTINE/etc/apt/sources.list"
    touch "$PRISTINE/.tricolor-ready"
fi
if [ -n "$FRESH" ]; then
    ROOT=$(mktemp -d "$CACHE/$SUITE-fresh.XXXXXX")
    trap 'rm -rf --one-file-system "$ROOT"' EXIT
    cp -a "$PRISTINE/." "$ROOT/"
else
    ROOT=$CACHE/$SUITE
    if [ ! -f "$ROOT/.tricolor-ready" ]; then
        rm -rf "$ROOT"
        cp -a "$PRISTINE" "$ROOT"
    fi
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true

# Inside a private mount namespace: the mounts vanish with it, whatever COMMAND does.
CMD=$(printf '%q ' "$@")
timeout --foreground -k 10 "$TIMEOUT" unshare --mount --propagation private -- bash -c '
set -e
ROOT=$1 CWD=$2 CMD=$3
shift 3
# The root a mount of its own: ip netns makes "/" a slave mount, which needs "/" to be one.
mount --bind "$ROOT" "$ROOT"
mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys"
mount --rbind /dev "$ROOT/dev"
mkdir -p "$ROOT/run" "$ROOT/tmp"
mount -t tmpfs tmpfs "$ROOT/run"
mount -t tmpfs tmpfs "$ROOT/tmp"
for d in "$@"; do
    mkdir -p "$ROOT$d"
    mount --bind "$d" "$ROOT$d"
done
exec chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" CI="${CI:-}" \
    bash -c "cd \"$CWD\" && $CMD"
' root-sh "$ROOT" "$PWD" "$CMD" "$REPO" "${BINDS[@]}"
