#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# deb_test.sh: the .deb as a user meets it. For Debian 12 (built here) and Debian 13 (built in
# the Debian 13 root of root.sh): a fresh root of that release installs it with
# `apt-get install ./tricolor_*.deb` (its dependencies from the archive), runs tricolord and
# tricolorctl, finds the man pages, the completion and the unit (systemd-analyze verify), then
# `apt-get purge --autoremove tricolor` must leave the file tree as it was before the install.
#   tests/distros/deb_test.sh BUILD_DIR                       both releases, built then checked
#   tests/distros/deb_test.sh BUILD_DIR --install SUITE DEB   one built package, checked
set -euo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
BUILD=$(readlink -f "${1:?usage: deb_test.sh BUILD_DIR}")
ROOT_SH=$REPO/tests/distros/root.sh
cd "$REPO"

# What runs inside the fresh root: $1 is the .deb.
check() {
    cat <<'CHECK'
set -euo pipefail
deb=$1
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# systemd-analyze, to verify the unit, and man, which it runs to find the unit's Documentation=
# pages; installed before the first listing, so they are not counted.
apt-get install -y -qq --no-install-recommends systemd man-db >/dev/null
listing() {
    find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \
        -o -path /var/cache -o -path /var/lib/apt -o -path /var/lib/dpkg -o -path /var/log \
        -o -path /var/lib/systemd/deb-systemd-helper-enabled -o -path "$(dirname "$deb")" \) \
        -prune -o -print | sort
}
listing >/tmp/before
apt-get install -y -qq --no-install-recommends "$deb" >/dev/null
echo "deb_test: installed $(dpkg-query -W -f='${Package} ${Version}' tricolor) on Debian $(cat /etc/debian_version)"
tricolord --version
tricolorctl --version
for f in /usr/share/man/man8/tricolord.8 /usr/share/man/man8/tricolorctl.8 \
    /usr/share/bash-completion/completions/tricolorctl /usr/lib/systemd/system/tricolord.service; do
    [ -s "$f" ] || [ -s "$f.gz" ] || { echo "deb_test: $f missing"; exit 1; }
done
# The config, a conffile (dpkg keeps an admin's edits through upgrades and purges it).
dpkg-query -W -f='${Conffiles}' tricolor | grep -q ' /etc/tricolor/tricolor.yaml ' ||
    { echo "deb_test: /etc/tricolor/tricolor.yaml is not a conffile"; exit 1; }
# The CNI plugin, and postinst's link where the runtimes look by default.
[ -x /usr/lib/cni/tricolor ] && [ "$(readlink /opt/cni/bin/tricolor)" = /usr/lib/cni/tricolor ] ||
    { echo "deb_test: the CNI plugin or its /opt/cni/bin link is missing"; exit 1; }
CNI_COMMAND=VERSION /opt/cni/bin/tricolor | grep -q '"1.0.0"' ||
    { echo "deb_test: the CNI plugin does not answer VERSION"; exit 1; }
unit=/usr/lib/systemd/system/tricolord.service
grep -q '^ExecStart=/usr/sbin/tricolord ' "$unit" || { echo "deb_test: $unit does not start /usr/sbin/tricolord"; exit 1; }
systemd-analyze verify "$unit"
echo "deb_test: systemd-analyze verify $unit: clean"
# The daemon's user, made by postinst from the sysusers.d entry; the unit runs as it.
getent passwd tricolor | grep -q ':/var/lib/tricolor:/usr/sbin/nologin$' ||
    { echo "deb_test: postinst made no user tricolor"; exit 1; }
grep -qx 'User=tricolor' "$unit" || { echo "deb_test: $unit does not run as tricolor"; exit 1; }
sd=$(systemd-analyze security --offline=true "$unit" 2>&1 | sed -n 's/.*Overall exposure level for tricolord.service: \([0-9.]*\).*/\1/p')
systemd-analyze security --offline=true --threshold=30 "$unit" >/dev/null ||
    { echo "deb_test: the installed unit's exposure is $sd, over 3.0"; exit 1; }
echo "deb_test: user tricolor made; the unit runs as it, exposure $sd"
# What tricolor's install pulled in goes with it, even where an installed package merely
# recommends or suggests it (on Debian 13, apt kept libbpf1 and libelf1 so).
apt-get purge -y -qq --autoremove -o APT::AutoRemove::RecommendsImportant=false \
    -o APT::AutoRemove::SuggestsImportant=false tricolor >/dev/null
listing >/tmp/after
if ! diff -u /tmp/before /tmp/after; then
    echo "deb_test: files left behind after apt-get purge (above)"
    exit 1
fi
! getent passwd tricolor >/dev/null || { echo "deb_test: purge left user tricolor"; exit 1; }
! getent group tricolor >/dev/null || { echo "deb_test: purge left group tricolor"; exit 1; }
echo "deb_test: purged; the file tree is as before the install, user tricolor gone"
CHECK
}

# install_check SUITE DEB: the whole check of one package in a fresh root of SUITE.
install_check() {
    echo "== $(basename "$2") in a fresh $1 root"
    "$ROOT_SH" --suite "$1" --fresh --bind "$(dirname "$2")" -- bash -c "$(check)" check "$2"
}
if [ "${2:-}" = --install ]; then # deb_test.sh BUILD_DIR --install SUITE DEB: one package only
    install_check "$3" "$(readlink -f "$4")"
    exit
fi

rc=0
echo "== Debian 12: build the .deb here"
deb12=$(BUILD_DIR=$BUILD ./tricolor.sh deb | tail -1)
echo "== Debian 13: build the .deb in the Debian 13 root"
deb13=$("$ROOT_SH" --suite trixie -- env BUILD_DIR="$BUILD/debian13" ./tricolor.sh deb | tail -1)
# Lintian, as Debian's archive would run it: no error and no warning on either package.
for deb in "$deb12" "$deb13"; do
    echo "== lintian $(basename "$deb")"
    lintian --fail-on error,warning "$deb" || { echo "deb_test: lintian: $(basename "$deb")"; rc=1; }
done
for pair in "bookworm $deb12" "trixie $deb13"; do
    set -- $pair
    install_check "$1" "$2" || { echo "deb_test: $(basename "$2") on $1: FAILED"; rc=1; }
done
# Under a real systemd, PID 1 of a QEMU guest: the unit started, reloaded, restarted, upgraded,
# purged (tests/systemd/guest_test.sh). Debian 12's package on its 6.1 by default (about 7
# minutes the first time, under TCG); TRICOLOR_GUEST_SUITES="bookworm trixie" adds Debian 13's
# on 6.12 (7 more: left out of CI's 90 minutes).
for suite in ${TRICOLOR_GUEST_SUITES:-bookworm}; do
    case $suite in bookworm) deb=$deb12 ;; trixie) deb=$deb13 ;; *) echo "deb_test: no suite $suite"; rc=1; continue ;; esac
    echo "== $(basename "$deb") under systemd in a $suite guest"
    "$REPO/tests/systemd/guest_test.sh" --suite "$suite" "$deb" ||
        { echo "deb_test: $(basename "$deb") under systemd: FAILED"; rc=1; }
done
exit $rc
