#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# cgroup_tcp_bench.sh BUILD_DIR: TCP under limits per cgroup (docs/spec.md §11, docs/cgroups.md).
# CUBIC (iperf3) between cgtb-a (198.18.172.1) and cgtb-b (198.18.172.2), joined through the delay
# line (tools/lab.sh: RTT/2 each way; RTT 0 is the same relay without delay); one tricolord with
# its network namespace cgtb-a's and the host's mounts (nsenter, not `ip netns exec`, which would
# hide the cgroup2 mount), attached to tc egress of cgtb0. CIR 20 Mbit/s, EBS 0. Cases:
#   egress   a client in cgroup "limited" (in cgtb-a) to a server in cgtb-b; the policy matches
#            the cgroup, red dropped (hard) or --shape sockets; 1 and 4 flows
#   ingress  a server in cgroup "server" (in cgtb-b) and a client in cgtb-a that asks for ECN; the
#            policy on the cgroup's ingress (the cgroup_skb program), red dropped (hard) or
#            --aqm ecn
#   a client in cgroup "free", not limited, once
# Each prints
#   RESULT name=cgroup_tcp_<egress|ingress>_rtt<R>_cbs<K>k_<mode>_f<N> goodput_mbit= pct_cir=
#          retransmits=
# Environment: SECONDS_EACH (8), RTTS ("0 20", ms), CBS_LIST ("16 64", KiB), CASES ("egress
# ingress"), ID_SUFFIX (appended to every RESULT name: a second matrix keeps its own ids).
set -euo pipefail
BUILD_DIR=$(readlink -f "$1")
SECONDS_EACH=${SECONDS_EACH:-8}
RTTS=${RTTS:-"0 20"}
CBS_LIST=${CBS_LIST:-"16 64"}
CASES=${CASES:-"egress ingress"}
ID_SUFFIX=${ID_SUFFIX:-}
RATE_MBIT=20
DIR=/run/tricolor-cgtbench
export TRICOLOR_SOCKET="$DIR/tricolor.sock"
ctl="$BUILD_DIR/tools/tricolorctl"
A="ip netns exec cgtb-a"
# The cgroup2 mount of the whole hierarchy (ROOT /); the filesystem type follows the " - "
# separator, after a varying number of optional fields.
CG_MOUNT=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2" && $4 == "/")
    { print $5; exit } break } }' /proc/self/mountinfo)
[ -n "$CG_MOUNT" ] || { echo "cgroup_tcp_bench: no cgroup2 mount" >&2; exit 1; }
CG_BASE="tricolor-cgtbench-$$"
CG="$CG_MOUNT/$CG_BASE"

. "$(dirname "$0")/../../tools/lab.sh"
cleanup() {
    lab_down_delayed cgtb-a cgtb-b "$DIR" >/dev/null 2>&1 || true
    local c
    for c in limited free server; do
        [ -d "$CG/$c" ] || continue
        xargs -r kill -9 <"$CG/$c/cgroup.procs" 2>/dev/null || true
        sleep 0.1
        rmdir "$CG/$c" 2>/dev/null || true
    done
    rmdir "$CG" 2>/dev/null || true
}
trap cleanup EXIT

# in_cgroup NAME CMD...: CMD run in cgroup NAME.
in_cgroup() {
    local c=$1
    shift
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG/$c" "$@"
}

# Prints "goodput_bps retransmits" of an iperf3 -J run read on stdin.
summary() {
    python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
print(e["sum_received"]["bits_per_second"], e["sum_sent"].get("retransmits", 0))'
}

report() { # NAME BPS RETRANSMITS
    local mbit pct
    mbit=$(python3 -c "print(f'{$2/1e6:.2f}')")
    pct=$(python3 -c "print(f'{$2/($RATE_MBIT*1e6)*100:.1f}')")
    printf "%-44s %10s Mbit/s %6s%% CIR %6s retransmits\n" "$1" "$mbit" "$pct" "$3"
    echo "RESULT name=$1$ID_SUFFIX goodput_mbit=$mbit pct_cir=$pct retransmits=$3"
}

for rtt in $RTTS; do
    cleanup
    mkdir -p "$CG/limited" "$CG/free" "$CG/server"
    lab_up_delayed cgtb-a cgtb0 198.18.172.1 cgtb-b cgtb1 198.18.172.2 "$DIR" \
        "$BUILD_DIR/tests/delayline" "$((rtt * 500))us"
    nsenter --net=/run/netns/cgtb-a "$BUILD_DIR/userspace/daemon/tricolord" \
        --socket "$TRICOLOR_SOCKET" --pin-dir "$DIR/bpf/tricolor" --config "$DIR/tricolor.yaml" \
        --state "$DIR/state.yaml" --detach-on-exit --metrics none >"$DIR/tricolord.log" 2>&1 &
    disown
    for _ in $(seq 50); do
        "$ctl" status >/dev/null 2>&1 && break
        sleep 0.1
    done
    "$ctl" attach cgtb0 --hook tc --direction egress >/dev/null
    $A sysctl -qw net.ipv4.tcp_ecn=1
    ip netns exec cgtb-b iperf3 -s -D
    in_cgroup server ip netns exec cgtb-b iperf3 -s -p 5301 -D
    sleep 0.5
    for cbs in $CBS_LIST; do
        for mode in hard sockets; do
            [[ " $CASES " == *" egress "* ]] || continue
            for flows in 1 4; do
                "$ctl" policy del p >/dev/null 2>&1 || true
                extra=()
                [ "$mode" = sockets ] && extra=(--shape sockets)
                "$ctl" policy add p --algo srtcm --cir "${RATE_MBIT}mbit" --cbs "${cbs}k" \
                    --ebs 0 --match cgroup "$CG_BASE/limited" "${extra[@]}" >/dev/null
                read -r bps retr < <(in_cgroup limited $A iperf3 -C cubic -c 198.18.172.2 \
                    -P "$flows" -t "$SECONDS_EACH" -J | summary)
                report "cgroup_tcp_egress_rtt${rtt}_cbs${cbs}k_${mode}_f${flows}" "$bps" "$retr"
            done
        done
        for mode in hard aqm_ecn; do
            [[ " $CASES " == *" ingress "* ]] || continue
            "$ctl" policy del p >/dev/null 2>&1 || true
            extra=()
            [ "$mode" = aqm_ecn ] && extra=(--aqm ecn)
            "$ctl" policy add p --algo srtcm --cir "${RATE_MBIT}mbit" --cbs "${cbs}k" --ebs 0 \
                --match cgroup "$CG_BASE/server" --direction ingress "${extra[@]}" >/dev/null
            read -r bps retr < <($A iperf3 -C cubic -c 198.18.172.2 -p 5301 \
                -t "$SECONDS_EACH" -J | summary)
            report "cgroup_tcp_ingress_rtt${rtt}_cbs${cbs}k_${mode}_f1" "$bps" "$retr"
        done
    done
    "$ctl" policy del p >/dev/null 2>&1 || true
    [[ " $CASES " == *" egress "* ]] || continue
    read -r bps retr < <(in_cgroup free $A iperf3 -C cubic -c 198.18.172.2 -t 3 -J | summary)
    mbit=$(python3 -c "print(f'{$bps/1e6:.0f}')")
    echo "cgroup_tcp_egress_rtt${rtt}_unlimited: $mbit Mbit/s"
    echo "RESULT name=cgroup_tcp_egress_rtt${rtt}_unlimited$ID_SUFFIX goodput_mbit=$mbit"
done
