#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# guest_steps.sh: what guest_test.sh's guest runs, as root, under systemd (PID 1), once the
# system is up. The .deb is /root/tricolor.deb; the repository ($TRICOLOR_REPO) is shared
# read-only for the tests' udp_tool. Each step prints "ok" or "FAIL"; exits non-zero on any
# failure.
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive
udp_tool=$TRICOLOR_REPO/build/tests/udp_tool
failed=0
check() { # WHAT COMMAND...
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else
        echo "FAIL $what"
        failed=1
        return 1
    fi
}
ctl() { tricolorctl "$@"; }
main_pid() { systemctl show -p MainPID --value tricolord; }
# All the packets the policy metered, of every colour.
metered() { ctl -j stats | python3 -c 'import json,sys; p=[x for x in json.load(sys.stdin)["policies"] if x["name"]=="'"$1"'"][0]; print(sum(p[c]["packets"] for c in ("green","yellow","red")))'; }
send() { ip netns exec g "$udp_tool" send 198.19.99.1 9 "$1" 1000 "${2:-2000}" >/dev/null; }
echo "== Debian $(cat /etc/debian_version), $(uname -r), PID 1: $(cat /proc/1/comm)"

# Install, start.
check "apt-get install ./tricolor.deb (offline: its dependencies are in the root)" \
    apt-get install -y -qq --no-install-recommends /root/tricolor.deb
check "postinst made user tricolor" getent passwd tricolor
if ! check "systemctl start tricolord reaches ready (Type=notify)" systemctl start tricolord; then
    journalctl -u tricolord --no-pager -o cat | tail -20
    # What the unit's sandbox shows its user of /sys/fs/bpf, piece by piece.
    for props in "" "-p ProtectKernelTunables=yes" "-p ProtectSystem=strict -p ProtectKernelTunables=yes -p ProtectControlGroups=yes -p PrivateDevices=yes"; do
        echo "-- systemd-run $props"
        # shellcheck disable=SC2086
        systemd-run --quiet --pipe --wait -p User=tricolor -p TemporaryFileSystem=/sys/fs/bpf:mode=0755 \
            -p BindPaths=/sys/fs/bpf/tricolor $props /bin/sh -c \
            'id; ls -lad /sys /sys/fs /sys/fs/bpf /sys/fs/bpf/tricolor; grep -E " /sys(/fs/bpf| )" /proc/self/mountinfo' 2>&1
    done
    ls -la /sys/fs/bpf
fi
check "it is active" systemctl is-active --quiet tricolord
pid=$(main_pid)
check "it runs as tricolor" test "$(ps -o user= -p "$pid")" = tricolor
check "with CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON alone" \
    grep -q "^CapEff:.000000c000001000$" "/proc/$pid/status"
systemd-analyze security tricolord.service 2>/dev/null | tail -1

# A lab: the daemon attaches to gh; traffic from namespace g.
ip netns add g
ip link add gh type veth peer name gn
ip link set gn netns g
ip addr add 198.19.99.1/24 dev gh && ip link set gh up
ip -n g addr add 198.19.99.2/24 dev gn && ip -n g link set gn up && ip -n g link set lo up
check "attach gh (XDP)" ctl attach gh
check "a policy: 8 Mbit/s, 16 KiB" ctl policy add u --algo srtcm --cir 8mbit --cbs 16k --ebs 0 \
    --match proto udp --match dport 9
# 2 s at 16 Mbit/s (2000 datagrams/s of 1028 bytes): green at most CBS + CIR * T.
t0=$(date +%s.%N)
send 4000
t1=$(date +%s.%N)
green=$(ctl -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["policies"][0]["green"]["bytes"])')
bound=$(python3 -c "print(int(16384 + 1e6 * ($t1 - $t0)))")
check "it polices: green $green bytes <= CBS + CIR*T = $bound" test "$green" -le "$bound"
check "and red is dropped" test "$(ctl -j stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["policies"][0]["red"]["packets"])')" -gt 0

# Links on cgroups, as tricolor with its three capabilities: a --per cgroup policy, and
# --shape sockets (sock_ops on the root cgroup) over a tc egress attachment.
mkdir -p /sys/fs/cgroup/soak.slice/a
check "attach gh tc egress" ctl attach gh --hook tc --direction egress
check "a cgroup policy" ctl policy add cg --algo srtcm --cir 1mbit --cbs 8k --ebs 0 \
    --match cgroup 'soak.slice/*' --per cgroup
check "a --shape sockets policy" ctl policy add shaped --algo srtcm --cir 10mbit --cbs 64k \
    --ebs 0 --match proto tcp --match dport 5201 --shape sockets
sleep 1
check "its cgroup is matched" sh -c 'tricolorctl -j stats | grep -q "soak.slice/a"'

# systemctl reload: the config file becomes what runs.
cat >/etc/tricolor/tricolor.yaml <<'EOF'
attachments:
  - {iface: gh, hook: xdp}
policies:
  - {name: u, algo: srtcm, cir: 8mbit, cbs: 16k, ebs: 0, match: {proto: udp, dport: 9}}
  - {name: fromconfig, algo: srtcm, cir: 1mbit, cbs: 8k, ebs: 0, match: {proto: tcp}}
EOF
check "systemctl reload tricolord" systemctl reload tricolord
check "the reload applied the config" sh -c 'tricolorctl policy list | grep -q fromconfig'

# restart and stop: the data path polices on, every packet metered.
before=$(metered u)
ip netns exec g "$udp_tool" send 198.19.99.1 9 6000 1000 2000 >/dev/null &
sleep 0.5
check "systemctl restart tricolord" systemctl restart tricolord
wait
check "a new process" test "$(main_pid)" != "$pid"
after=$(metered u)
check "no packet unmetered through the restart ($((after - before)) of 6000)" test $((after - before)) -eq 6000
check "systemctl stop tricolord" systemctl stop tricolord
check "stopped, XDP still on gh" sh -c 'ip link show gh | grep -q xdp'
send 1000
systemctl start tricolord
check "what passed while it was stopped was metered ($(($(metered u) - after)) of 1000)" \
    test $(($(metered u) - after)) -eq 1000

# A socket group's member reads stats, and may not change anything.
groupadd -r tricolor-readers
useradd -r -M -G tricolor-readers reader
mkdir -p /etc/systemd/system/tricolord.service.d
cat >/etc/systemd/system/tricolord.service.d/readers.conf <<'EOF'
[Service]
Group=tricolor-readers
RuntimeDirectoryMode=0750
ExecStart=
ExecStart=/usr/sbin/tricolord --config /etc/tricolor/tricolor.yaml --socket-group tricolor-readers
EOF
systemctl daemon-reload
check "restarted with --socket-group" systemctl restart tricolord
check "a member of the group reads stats" setpriv --reuid=reader --regid=reader --init-groups tricolorctl stats
check "and may not change" sh -c '! setpriv --reuid=reader --regid=reader --init-groups tricolorctl policy del u 2>/dev/null'
rm -r /etc/systemd/system/tricolord.service.d
systemctl daemon-reload
systemctl restart tricolord

# An upgrade (the same package again): postinst restarts the daemon, which adopts.
pid=$(main_pid)
before=$(metered u)
check "apt-get install --reinstall (an upgrade)" \
    apt-get install -y -qq --reinstall --no-install-recommends /root/tricolor.deb
check "the daemon was restarted" test "$(main_pid)" != "$pid"
check "and adopted the counters" test "$(metered u)" -ge "$before"
check "and the attachment" sh -c 'tricolorctl -j status | grep -q "\"attached\": *true"'

# Purge: the user, the state and the unit go; the data path polices on until detached.
check "apt-get purge tricolor" apt-get purge -y -qq tricolor
check "the user is gone" sh -c '! getent passwd tricolor'
check "the state is gone" test ! -e /var/lib/tricolor
check "the unit is gone" test ! -e /usr/lib/systemd/system/tricolord.service
echo "== $([ $failed = 0 ] && echo passed || echo FAILED)"
exit $failed
