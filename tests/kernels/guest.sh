#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# guest.sh: runs a command under another kernel: Debian's own kernel package booted in QEMU
# (TCG), with this machine's root file system shared read-only over 9p and the repository
# shared read-write, so the guest runs the binaries just built here and leaves its results in
# the build directory.
#
#   tests/kernels/guest.sh [--kernel PKG] [--timeout S] -- COMMAND [ARG...]
#
# PKG is Debian 12's 6.1 by default; a Debian 13 kernel (linux-image-6.12.*+deb13-*) is fetched
# in Debian 13's root (tests/distros/root.sh).
#
# The kernel package is downloaded from Debian (apt-get download), unpacked, and an initramfs of
# busybox-static plus the virtio and 9p modules is built around it, all cached under
# $TRICOLOR_KERNEL_CACHE (default /var/cache/tricolor/kernels) and never committed. The guest
# loads its own modules from the unpacked package (kernel module autoloading included), mounts
# bpffs, cgroup2 and tmpfs on /tmp, /run, /var/tmp and /root, runs COMMAND from the current
# directory, and powers off. The exit code is COMMAND's; 124 if the guest did not finish within
# --timeout seconds (default 1500). Needs: qemu-system-x86, busybox-static, kmod, cpio.
set -euo pipefail

KERNEL_PKG=linux-image-6.1.0-50-amd64-unsigned
TIMEOUT=1500
MEM=${TRICOLOR_GUEST_MEM:-4096}
CACHE=${TRICOLOR_KERNEL_CACHE:-/var/cache/tricolor/kernels}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)

die() { echo "guest.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
    --kernel) KERNEL_PKG=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --) shift; break ;;
    *) die "unknown option $1 (usage: guest.sh [--kernel PKG] [--timeout S] -- COMMAND...)" ;;
    esac
done
[ $# -gt 0 ] || die "no command (usage: guest.sh [--kernel PKG] [--timeout S] -- COMMAND...)"
[ "$(id -u)" -eq 0 ] || die "run as root"
# The guest mounts tmpfs over these (stage2.sh), which would hide a cache under them: its
# modules could not be loaded (veth, sch_fq...) and every lab would fail to start.
case "$(realpath -m "$CACHE")/" in
/tmp/* | /run/* | /var/tmp/* | /root/*)
    die "TRICOLOR_KERNEL_CACHE=$CACHE: the guest mounts tmpfs over /tmp, /run, /var/tmp and /root; put the cache elsewhere" ;;
esac
for tool in qemu-system-x86_64 busybox depmod cpio; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install qemu-system-x86 busybox-static kmod cpio)"
done

# ---- the kernel and its initramfs, cached ------------------------------------------------------
KDIR=$CACHE/$KERNEL_PKG
if [ ! -f "$KDIR/ready" ]; then
    echo "guest.sh: preparing $KERNEL_PKG in $KDIR" >&2
    rm -rf "$KDIR"
    mkdir -p "$KDIR/root"
    # This release's kernels from this machine's apt; Debian 13's (+deb13) from its root
    # (tests/distros/root.sh), where its package lists are.
    case "$KERNEL_PKG" in
    *+deb13*)
        "$REPO/tests/distros/root.sh" --bind "$KDIR" -- bash -c \
            "cd $KDIR && apt-get update -qq && apt-get download -q $KERNEL_PKG" >/dev/null 2>&1 ||
            die "cannot download $KERNEL_PKG in Debian 13's root"
        ;;
    *)
        (cd "$KDIR" && apt-get download -q "$KERNEL_PKG" >/dev/null 2>&1) ||
            die "cannot download $KERNEL_PKG (apt-get update first?)"
        ;;
    esac
    dpkg-deb -x "$KDIR"/*.deb "$KDIR/root"
    rm -f "$KDIR"/*.deb
    # Debian 13's package has its modules under /usr/lib (merged /usr): depmod and the guest's
    # modprobe -d look under lib/.
    [ -e "$KDIR/root/lib" ] || ln -s usr/lib "$KDIR/root/lib"
    kver=$(ls "$KDIR/root/lib/modules")
    depmod -b "$KDIR/root" "$kver"
    ln -s "root/boot/vmlinuz-$kver" "$KDIR/vmlinuz"
    echo "$kver" >"$KDIR/version"

    # initramfs: busybox, the modules that reach the 9p root, and /init.
    ird=$KDIR/initramfs
    mkdir -p "$ird"/{bin,dev,proc,sys,newroot,modules}
    cp /bin/busybox "$ird/bin/busybox"
    for m in virtio virtio_ring virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci netfs \
        fscache 9pnet 9pnet_virtio 9p; do
        f=$(find "$KDIR/root/lib/modules/$kver/" -name "$m.ko" -o -name "$m.ko.xz" | head -1)
        # Built in (Debian 13 builds virtio into the kernel) or gone (6.12 folded fscache into
        # netfs): nothing to load; a kernel that truly lacks one fails at the 9p mount below.
        [ -n "$f" ] || continue
        # busybox's insmod takes the module as it is: Debian 13's come xz-compressed.
        case "$f" in
        *.xz) xz -dc "$f" >"$ird/modules/$m.ko" ;;
        *) cp "$f" "$ird/modules/" ;;
        esac
        echo "$m" >>"$ird/modules/order"
    done
    cat >"$ird/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do insmod /modules/$m.ko || echo "init: insmod $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=1048576,cache=loose hostroot /newroot ||
    { echo "init: cannot mount the host root"; poweroff -f; }
exec switch_root /newroot "$(sed -n 's/.*tricolor.stage2=\([^ ]*\).*/\1/p' /proc/cmdline)"
INIT
    chmod +x "$ird/init"
    (cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1 >"$KDIR/initramfs.gz")
    touch "$KDIR/ready"
fi
kver=$(cat "$KDIR/version")

# ---- the run -------------------------------------------------------------------------------------
RUN=$(mktemp -d /tmp/tricolor-guest.XXXXXX)
trap 'rm -rf "$RUN"' EXIT
printf '%q ' "$@" >"$RUN/cmd"
printf '%s' "$PWD" >"$RUN/cwd"
STAGE2=$REPO/tests/kernels/stage2.sh
[ -x "$STAGE2" ] || die "$STAGE2 missing"

# A guest kernel may die while it boots under TCG (a 6.12 guest once took an int3 Oops in
# sched_clock_cpu 1.7 s in, while the kernel patched its own text with both vCPUs running): no
# command ran then, so the boot is tried again, up to three times. A guest that died after the
# command started is never run twice (the command may have changed things): its failure stands.
for boot in 1 2 3; do
    echo "guest.sh: booting $kver (TCG), running: $*" >&2
    set +e
    timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 \
        -accel tcg,thread=multi -cpu max -m "$MEM" -smp 2 -nographic -no-reboot \
        -kernel "$KDIR/vmlinuz" -initrd "$KDIR/initramfs.gz" \
        -append "console=ttyS0 quiet loglevel=3 panic=-1 tricolor.stage2=$STAGE2 tricolor.repo=$REPO tricolor.kroot=$KDIR/root" \
        -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
        -virtfs local,path="$REPO",mount_tag=repo,security_model=none,multidevs=remap \
        -virtfs local,path="$RUN",mount_tag=run,security_model=none,multidevs=remap \
        -nic none </dev/null
    qrc=$?
    set -e
    if [ -f "$RUN/rc" ]; then
        exit "$(cat "$RUN/rc")"
    fi
    [ $qrc -eq 124 ] && { echo "guest.sh: the guest did not finish within ${TIMEOUT}s" >&2; exit 124; }
    [ -f "$RUN/started" ] && break
    echo "guest.sh: the guest died before the command started (boot $boot of 3, qemu exit $qrc)" >&2
done
echo "guest.sh: the guest stopped without a result (qemu exit $qrc)" >&2
exit 125
