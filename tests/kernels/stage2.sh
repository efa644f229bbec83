#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# stage2.sh: PID 1 of the guest that tests/kernels/guest.sh boots, running on this machine's
# root file system (read-only over 9p). It makes the few writable places a test run needs, lets
# the guest kernel load its own modules, runs the command the host asked for and powers off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
mount -t proc proc /proc 2>/dev/null
arg() { sed -n "s/.*tricolor\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
REPO=$(arg repo)
KROOT=$(arg kroot)

mount -t sysfs sys /sys 2>/dev/null
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm 2>/dev/null
ln -sf /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
for d in /tmp /run /var/tmp /root; do
    [ -d "$d" ] && mount -t tmpfs tmpfs "$d"
done
mkdir -p /run/netns /run/lock
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
# The guest kernel's modules live in the unpacked package: a modprobe that looks there, first
# in PATH and as the kernel's autoloader.
mkdir -p /run/guest-bin
printf '#!/bin/sh\nexec /sbin/modprobe -d %s "$@"\n' "$KROOT" >/run/guest-bin/modprobe
chmod +x /run/guest-bin/modprobe
echo /run/guest-bin/modprobe >/proc/sys/kernel/modprobe
export PATH=/run/guest-bin:$PATH
# A checkout under one of the tmpfs mounts above (e.g. /root/tricolor) needs its mount point made
# again: the tmpfs hid it.
mkdir -p "$REPO"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 repo "$REPO"
RUN=/run/guest-run # the host's exchange directory: command in, exit code out
mkdir -p $RUN
mount -t 9p -o trans=virtio,version=9p2000.L run "$RUN"
ip link set lo up
hostname tricolor-guest 2>/dev/null

echo "guest: $(uname -r), $(nproc) CPUs"
cd "$(cat "$RUN/cwd")" || cd "$REPO"
# From here the command may have changed things: the host boots again only a guest that died
# before this line (guest.sh).
: >"$RUN/started"
eval "$(cat "$RUN/cmd")" </dev/null
echo $? >"$RUN/rc"
sync
echo o >/proc/sysrq-trigger
sleep 5
poweroff -f
