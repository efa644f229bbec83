#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# unit_check.sh: tricolord.service and tricolor's sysusers.d entry as systemd's own tools read
# them, without a running systemd (this machine's PID 1 is not one):
#   1. systemd-analyze verify: the unit parses, its commands exist (the built tricolord);
#   2. systemd-analyze security --offline: its exposure is 3.0 or less (what docs/daemon.md and
#      the README quote), printed;
#   3. systemd-sysusers --root: the entry makes user and group tricolor in a scratch root.
# Usage: tests/systemd/unit_check.sh   (BUILD_DIR: the build, default build/). Needs systemd
# (its tools; apt-get install systemd). Exits non-zero on any failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${BUILD_DIR:-$repo/build}" && pwd)
unit_in=$repo/userspace/daemon/tricolord.service.in
sysusers=$repo/userspace/daemon/tricolor.sysusers
for t in systemd-analyze systemd-sysusers; do
    command -v $t >/dev/null || { echo "unit_check.sh: needs $t (apt-get install systemd)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
sed "s|@TRICOLOR_SBINDIR@|$build/userspace/daemon|" "$unit_in" >"$work/tricolord.service"

if SYSTEMD_LOG_LEVEL=err systemd-analyze verify --man=no "$work/tricolord.service"; then
    echo "ok   systemd-analyze verify"
else
    echo "FAIL systemd-analyze verify"; failed=1
fi
exposure=$(systemd-analyze security --offline=true "$work/tricolord.service" 2>&1 |
    sed -n 's/.*Overall exposure level for tricolord.service: \([0-9.]*\).*/\1/p')
if systemd-analyze security --offline=true --threshold=30 "$work/tricolord.service" >/dev/null 2>&1; then
    echo "ok   systemd-analyze security: exposure $exposure (at most 3.0)"
else
    echo "FAIL systemd-analyze security: exposure $exposure (over 3.0)"; failed=1
fi
echo "RESULT name=unit_exposure exposure=$exposure"
# What the score does not single out: a user of its own, and the three capabilities alone (the
# e2e LeastPrivilege cases run the daemon with exactly these).
for want in "User=tricolor" "AmbientCapabilities=CAP_BPF CAP_NET_ADMIN CAP_PERFMON" \
    "CapabilityBoundingSet=CAP_BPF CAP_NET_ADMIN CAP_PERFMON" \
    "ExecStartPre=+$build/userspace/daemon/tricolord --prepare-pin-dir tricolor"; do
    if grep -qxF "$want" "$work/tricolord.service"; then
        echo "ok   $want"
    else
        echo "FAIL the unit does not say $want"; failed=1
    fi
done
mkdir -p "$work/root/etc"
: >"$work/root/etc/passwd"
: >"$work/root/etc/group"
if systemd-sysusers --root="$work/root" "$sysusers" >/dev/null 2>&1 &&
    grep -q '^tricolor:x:[0-9]*:[0-9]*:.*:/var/lib/tricolor:/usr/sbin/nologin$' "$work/root/etc/passwd" &&
    grep -q '^tricolor:x:' "$work/root/etc/group"; then
    echo "ok   systemd-sysusers makes user and group tricolor"
else
    echo "FAIL systemd-sysusers"; failed=1
fi
# The pin directory's tmpfiles.d entry, in the same scratch root (whose user it names).
tmpfiles=$repo/userspace/daemon/tricolor.tmpfiles
# (systemd-tmpfiles --root resolves names with this machine's users: compared by number.)
uid=$(awk -F: '$1 == "tricolor" { print $3 }' "$work/root/etc/passwd")
if systemd-tmpfiles --root="$work/root" --create "$tmpfiles" >/dev/null 2>&1 &&
    [ "$(stat -c '%u %a' "$work/root/sys/fs/bpf/tricolor")" = "$uid 700" ]; then
    echo "ok   systemd-tmpfiles makes /sys/fs/bpf/tricolor, tricolor's, 0700"
else
    echo "FAIL systemd-tmpfiles"; failed=1
fi
exit $failed
