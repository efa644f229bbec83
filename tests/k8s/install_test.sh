#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# install_test.sh: deploy/kubernetes/tricolor-cni-install on scratch directories, with a
# stand-in for the plugin's `conflist install|uninstall` (fake-cni-plugin): which file it picks
# (the runtime's: first in byte order, whatever the locale), that it refuses with no conflist or
# a .conf first and then changes nothing, the backup, idempotence, a failing plugin that leaves
# the file as it was, --uninstall, bad usage. Where setpriv exists the installs also run as root
# without any capability, as the init container does (capabilities: drop: [ALL]).
# Prints each case, then 'N passed, N failed'; exits 1 when any failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
script=${TRICOLOR_CNI_INSTALL:-$here/../../deploy/kubernetes/tricolor-cni-install}
export TRICOLOR_CNI_PLUGIN=$here/fake-cni-plugin
passed=0 failed=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ok() { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

# A fresh node: conf dir and bin dir, and the files given as NAME=CONTENT.
node_dirs() {
    rm -rf "${work:?}/conf" "${work:?}/bin"
    mkdir -p "$work/conf" "$work/bin"
    for f in "$@"; do printf '%s\n' "${f#*=}" >"$work/conf/${f%%=*}"; done
}
conflist() { printf '{"cniVersion": "1.0.0", "name": "%s", "plugins": [{"type": "%s"}]}' "$1" "$2"; }
# Runs the script; its output in $work/out, its status in $status.
run() {
    local pre=()
    if [ "${NO_CAPS:-}" = 1 ]; then pre=(setpriv --bounding-set=-all --inh-caps=-all --); fi
    "${pre[@]}" "$script" --conf-dir "$work/conf" --bin-dir "$work/bin" "$@" >"$work/out" 2>&1
    status=$?
}
has_tricolor() { grep -q '"type": "tricolor"' "$1"; }
count_tricolor() { grep -c '"type": "tricolor"' "$1"; }
snapshot() { (cd "$work" && find conf bin -type f -exec sha256sum {} + | sort); }
leftovers() { find "$work/conf" "$work/bin" -name '*tricolor-new*' -o -name '.tricolor.new.*'; }
# A locale whose collation is not byte order, where the machine has one.
locale=$(locale -a 2>/dev/null | grep -i -m1 '^en_US\.utf-\?8$' || echo C.UTF-8)

# 1. Nothing to chain into.
node_dirs
run
if [ $status = 1 ] && grep -q "no CNI network configuration" "$work/out" && [ ! -e "$work/bin/tricolor" ]; then
    ok "an empty conf dir is refused, and no plugin is copied"
else fail "empty conf dir: status $status: $(cat "$work/out")"; fi

# 2. The runtime's first file is a single-plugin .conf.
node_dirs "05-bridge.conf={\"cniVersion\": \"0.4.0\", \"name\": \"b\", \"type\": \"bridge\"}" \
    "10-calico.conflist=$(conflist k8s-pod-network calico)"
before=$(snapshot)
run
if [ $status = 1 ] && grep -q "single-plugin" "$work/out" && [ "$(snapshot)" = "$before" ]; then
    ok "a .conf first in order is refused, nothing changed"
else fail ".conf first: status $status: $(cat "$work/out")"; fi

# 3. The first conflist in byte order, under any locale: 10-B before 10-a before 20-; a README
#    and a backup-like name are not configurations.
node_dirs "10-a.conflist=$(conflist a calico)" "10-B.conflist=$(conflist B flannel)" \
    "20-z.conflist=$(conflist z ptp)" "README=not a conf" "00-old.conflist.bak=$(conflist x bridge)"
orig=$(cat "$work/conf/10-B.conflist")
LC_ALL=$locale NO_CAPS=$(command -v setpriv >/dev/null && echo 1) run
if [ $status = 0 ] && has_tricolor "$work/conf/10-B.conflist" && ! has_tricolor "$work/conf/10-a.conflist" &&
    ! has_tricolor "$work/conf/20-z.conflist" && [ -x "$work/bin/tricolor" ] &&
    cmp -s "$work/bin/tricolor" "$TRICOLOR_CNI_PLUGIN" &&
    [ "$(cat "$work/conf/10-B.conflist.tricolor-orig")" = "$orig" ]; then
    ok "chains into the runtime's file (10-B.conflist), copies the plugin, keeps the original"
else fail "install: status $status: $(cat "$work/out"); $(ls "$work/conf")"; fi
if [ -n "$(leftovers)" ]; then
    fail "temporary files left behind: $(leftovers)"
else ok "no temporary file left behind"; fi

# 4. Again: one entry, the backup still the interface plugin's file.
run
if [ $status = 0 ] && [ "$(count_tricolor "$work/conf/10-B.conflist")" = 1 ] &&
    [ "$(cat "$work/conf/10-B.conflist.tricolor-orig")" = "$orig" ]; then
    ok "a second run changes nothing (one entry, the backup kept)"
else fail "second run: status $status: $(cat "$work/out")"; fi

# 5. The interface plugin rewrote its file: the backup follows it.
conflist B flannel-v2 >"$work/conf/10-B.conflist"
run
if [ $status = 0 ] && grep -q flannel-v2 "$work/conf/10-B.conflist.tricolor-orig" &&
    has_tricolor "$work/conf/10-B.conflist"; then
    ok "a conflist rewritten without tricolor is backed up anew and chained again"
else fail "rewritten conflist: status $status: $(cat "$work/out")"; fi

# 6. The plugin fails: the file stays as it was.
before=$(cat "$work/conf/10-B.conflist")
FAKE_CNI_FAIL=1 run
if [ $status = 1 ] && [ "$(cat "$work/conf/10-B.conflist")" = "$before" ] &&
    [ -z "$(leftovers)" ]; then
    ok "a failing plugin leaves the conflist as it was"
else fail "failing plugin: status $status: $(cat "$work/out")"; fi

# 7. Uninstall.
NO_CAPS=$(command -v setpriv >/dev/null && echo 1) run --uninstall
if [ $status = 0 ] && ! has_tricolor "$work/conf/10-B.conflist" && [ ! -e "$work/bin/tricolor" ] &&
    [ ! -e "$work/conf/10-B.conflist.tricolor-orig" ] && grep -q flannel-v2 "$work/conf/10-B.conflist"; then
    ok "--uninstall takes tricolor out, removes the backup and the plugin"
else fail "uninstall: status $status: $(cat "$work/out")"; fi

# 8. Bad usage.
run --bogus
if [ $status = 2 ]; then ok "an unknown argument exits 2"; else fail "bad usage: status $status"; fi
"$script" --conf-dir >/dev/null 2>&1
if [ $? = 2 ]; then ok "a missing value exits 2"; else fail "missing value: not 2"; fi

# 9. A missing directory.
"$script" --conf-dir "$work/nope" --bin-dir "$work/bin" >"$work/out" 2>&1
if [ $? = 1 ] && grep -q "no CNI configuration directory" "$work/out"; then
    ok "a missing conf dir is named"
else fail "missing conf dir: $(cat "$work/out")"; fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
