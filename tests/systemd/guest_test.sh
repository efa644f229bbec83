#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# guest_test.sh: the .deb under a real systemd. A Debian root with systemd (debootstrap, cached)
# boots in QEMU (TCG) with systemd as PID 1, on Debian's kernel of that release (guest.sh's
# cache); a unit of the test's own runs guest_steps.sh there once the system is up:
# apt-get installs the .deb, `systemctl start tricolord` reaches ready as user tricolor with its
# three capabilities, it polices a veth lab within the bound, `systemctl reload` applies the
# config, `systemctl restart` and `stop` leave no packet unmetered, a socket group's member reads,
# an upgrade restarts and adopts, a purge removes the user, the state and the unit.
#
#   tests/systemd/guest_test.sh [--suite bookworm|trixie] [--timeout S] DEB
#
# The root (systemd, and the .deb's dependencies so that the guest installs it offline) is made
# once per suite and dependency list under $TRICOLOR_ROOT_CACHE (default
# /var/cache/tricolor/roots), never committed; each run boots a copy of it. The repository is
# shared read-only (the tests' udp_tool). Prints the guest's steps; exits with their status
# (124: the guest did not finish in time). Needs root, qemu-system-x86, debootstrap,
# busybox-static, kmod, cpio.
set -euo pipefail

SUITE=bookworm
TIMEOUT=900
CACHE=${TRICOLOR_ROOT_CACHE:-/var/cache/tricolor/roots}
KCACHE=${TRICOLOR_KERNEL_CACHE:-/var/cache/tricolor/kernels}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
die() { echo "guest_test.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --suite) SUITE=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -*) die "unknown option $1" ;;
    *) break ;;
    esac
done
DEB=$(readlink -f "${1:?usage: guest_test.sh [--suite S] [--timeout S] DEB}")
[ -f "$DEB" ] || die "no such .deb: $DEB"
[ "$(id -u)" -eq 0 ] || die "run as root"
case $SUITE in
bookworm) KPKG=linux-image-6.1.0-50-amd64-unsigned ;;
trixie) KPKG=linux-image-6.12.117+deb13-amd64-unsigned ;;
*) die "--suite: bookworm or trixie" ;;
esac
KDIR=$KCACHE/$KPKG
if [ ! -f "$KDIR/ready" ]; then
    # guest.sh downloads and unpacks the kernel package (a boot of no consequence).
    "$REPO/tests/kernels/guest.sh" --kernel "$KPKG" --timeout 300 -- true >/dev/null 2>&1 || true
    [ -f "$KDIR/ready" ] || die "cannot prepare $KPKG (tests/kernels/guest.sh)"
fi
kver=$(cat "$KDIR/version")

# ---- the root: systemd and the .deb's dependencies, cached -------------------------------
deps=$(dpkg-deb -f "$DEB" Depends)
key=$(printf '%s\n%s\n' "$SUITE" "$deps" | sha256sum | cut -c1-12)
ROOT=$CACHE/systemd-$SUITE-$key
in_root() { # COMMAND in $ROOT, with /proc, /sys, /dev and the network (apt)
    unshare --mount --propagation private -- bash -c '
        R=$1; shift
        mount -t proc proc "$R/proc"; mount --rbind /sys "$R/sys"; mount --rbind /dev "$R/dev"
        cp /etc/resolv.conf "$R/etc/resolv.conf"
        chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            DEBIAN_FRONTEND=noninteractive "$@"' in-root "$ROOT" "$@"
}
if [ ! -f "$ROOT/.tricolor-ready" ]; then
    echo "guest_test.sh: making a $SUITE root with systemd in $ROOT (a few minutes, once)" >&2
    "$REPO/tests/distros/root.sh" --suite "$SUITE" --timeout 600 -- true # the pristine root
    rm -rf "$ROOT"
    cp -a "$CACHE/$SUITE-minbase" "$ROOT"
    cp "$DEB" "$ROOT/root/deps.deb"
    # Installed with its dependencies, then purged alone: they stay, so that the guest, which
    # has no network, installs the package as apt would.
    in_root bash -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        systemd systemd-sysv dbus udev kmod iproute2 procps passwd util-linux python3 \
        /root/deps.deb \
        >/dev/null && apt-get purge -y -qq tricolor >/dev/null && rm /root/deps.deb && \
        apt-get clean' || die "cannot make the root (apt-get in $ROOT)"
    # The console logs in as no one; nothing waits for a network that is not there.
    in_root systemctl mask getty@tty1.service serial-getty@ttyS0.service \
        systemd-networkd-wait-online.service >/dev/null 2>&1 || true
    echo "tricolor-guest" >"$ROOT/etc/hostname"
    touch "$ROOT/.tricolor-ready"
fi

# ---- this run: a copy of the root, the steps, a unit that runs them ----------------------
RUN=$(mktemp -d "$CACHE/systemd-run.XXXXXX")
trap 'rm -rf --one-file-system "$RUN"' EXIT
mkdir -p "$RUN/root"
cp -a "$ROOT/." "$RUN/root/"
G=$RUN/root
cp "$DEB" "$G/root/tricolor.deb"
install -m 0755 "$REPO/tests/systemd/guest_steps.sh" "$G/usr/local/sbin/tricolor-guest-steps"
cat >"$G/etc/systemd/system/tricolor-guest.service" <<EOF
[Unit]
Description=tricolor's test of its package under systemd (tests/systemd/guest_test.sh)
After=multi-user.target
[Service]
Type=oneshot
Environment=TRICOLOR_REPO=$REPO
ExecStart=/bin/sh -c '/usr/local/sbin/tricolor-guest-steps >/var/tmp/tricolor-guest.log 2>&1; echo \$? >/var/tmp/tricolor-guest.rc; systemctl poweroff'
StandardOutput=journal+console
[Install]
WantedBy=multi-user.target
EOF
mkdir -p "$G/etc/systemd/system/multi-user.target.wants"
ln -sf ../tricolor-guest.service "$G/etc/systemd/system/multi-user.target.wants/tricolor-guest.service"
mkdir -p "$G$REPO" "$G/lib/modules/$kver"

# The initramfs: the virtio and 9p modules, then the root over 9p (read-write), the kernel's
# modules and the repository, and systemd as PID 1.
IRD=$RUN/initramfs
mkdir -p "$IRD"/{bin,dev,proc,sys,newroot,modules}
cp /bin/busybox "$IRD/bin/busybox"
cp "$KDIR/initramfs/modules/"* "$IRD/modules/"
cat >"$IRD/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do insmod /modules/$m.ko 2>/dev/null; done
o=trans=virtio,version=9p2000.L,msize=1048576
mount -t 9p -o $o,cache=loose guestroot /newroot || { echo "init: no root"; poweroff -f; }
kver=$(uname -r)
repo=$(sed -n 's/.*tricolor.repo=\([^ ]*\).*/\1/p' /proc/cmdline)
mount -t 9p -o $o,ro kmods /newroot/lib/modules/$kver
mount -t 9p -o $o,ro repo /newroot$repo
umount /proc /sys
exec switch_root /newroot /lib/systemd/systemd
INIT
chmod +x "$IRD/init"
(cd "$IRD" && find . | cpio -o -H newc --quiet | gzip -1 >"$RUN/initramfs.gz")

echo "guest_test.sh: booting $SUITE ($kver, TCG) with systemd; the steps follow" >&2
set +e
timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 \
    -accel tcg,thread=multi -cpu max -m 2048 -smp 2 -nographic -no-reboot \
    -kernel "$KDIR/vmlinuz" -initrd "$RUN/initramfs.gz" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 systemd.show_status=0 tricolor.repo=$REPO" \
    -virtfs local,path="$G",mount_tag=guestroot,security_model=passthrough,multidevs=remap \
    -virtfs local,path="$KDIR/root/lib/modules/$kver",mount_tag=kmods,security_model=none,readonly=on,multidevs=remap \
    -virtfs local,path="$REPO",mount_tag=repo,security_model=none,readonly=on,multidevs=remap \
    -nic none </dev/null >"$RUN/console.log" 2>&1
qrc=$?
set -e
cat "$G/var/tmp/tricolor-guest.log" 2>/dev/null || { echo "guest_test.sh: no log; the console:"; tail -50 "$RUN/console.log"; }
if [ -f "$G/var/tmp/tricolor-guest.rc" ]; then
    exit "$(cat "$G/var/tmp/tricolor-guest.rc")"
fi
[ $qrc -eq 124 ] && { echo "guest_test.sh: the guest did not finish within ${TIMEOUT}s" >&2; exit 124; }
echo "guest_test.sh: the guest stopped without a result (qemu exit $qrc); the console:" >&2
tail -50 "$RUN/console.log" >&2
exit 125
