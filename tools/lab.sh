# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# lab.sh: a veth lab in two network namespaces with tricolord inside one of them, shared by
# `./tricolor.sh demo` and tests/bench/rate_bench.sh. Source it; every function is idempotent.
# `ip netns exec` hides /sys/fs/bpf, so the lab's daemon pins under a bpffs mounted in DIR.

# lab_down NS_A NS_B DIR: stop what runs in the namespaces (tricolord, started with
# --detach-on-exit, detaches and unpins on SIGTERM: it gets time to), then remove everything.
lab_down() {
    local a=$1 b=$2 dir=$3 ns
    for ns in "$a" "$b"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
    done
    for _ in $(seq 50); do
        [ -z "$(ip netns pids "$a" 2>/dev/null)$(ip netns pids "$b" 2>/dev/null)" ] && break
        sleep 0.1
    done
    for ns in "$a" "$b"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    umount "$dir/bpf" 2>/dev/null || true
    rm -rf "$dir"
}

# lab_up NS_A IF_A ADDR_A NS_B IF_B ADDR_B DIR: the namespaces joined by a veth pair, each end
# with its address (/24), loopback up, and a bpffs at DIR/bpf.
lab_up() {
    local a=$1 if_a=$2 addr_a=$3 b=$4 if_b=$5 addr_b=$6 dir=$7
    ip netns add "$a"
    ip netns add "$b"
    ip link add "$if_a" netns "$a" type veth peer name "$if_b" netns "$b"
    ip -n "$a" addr add "$addr_a/24" dev "$if_a"
    ip -n "$b" addr add "$addr_b/24" dev "$if_b"
    ip -n "$a" link set lo up
    ip -n "$b" link set lo up
    ip -n "$a" link set "$if_a" up
    ip -n "$b" link set "$if_b" up
    mkdir -p "$dir/bpf"
    mount -t bpf bpf "$dir/bpf"
}

# lab_daemon NS BUILD_DIR DIR [tricolord flags...]: tricolord in NS with its socket, pins,
# config, state and log in DIR; exports TRICOLOR_SOCKET and returns once the daemon answers.
lab_daemon() {
    local ns=$1 build=$2 dir=$3
    shift 3
    export TRICOLOR_SOCKET="$dir/tricolor.sock"
    ip netns exec "$ns" "$build/userspace/daemon/tricolord" --socket "$TRICOLOR_SOCKET" \
        --pin-dir "$dir/bpf/tricolor" --config "$dir/tricolor.yaml" --state "$dir/state.yaml" \
        --detach-on-exit "$@" \
        >"$dir/tricolord.log" 2>&1 &
    disown
    for _ in $(seq 50); do
        "$build/tools/tricolorctl" status >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    cat "$dir/tricolord.log" >&2
    echo "tricolord did not start" >&2
    return 1
}

# lab_up_delayed NS_A IF_A ADDR_A NS_B IF_B ADDR_B DIR DELAYLINE DELAY: as lab_up, but the
# namespaces are joined through a third one, NS_A-m, where DELAYLINE (tests/tools/delayline)
# relays every frame after DELAY one way (RTT = 2 x DELAY): a wire with latency on kernels
# without netem. With DELAY "netem:D" the middle namespace is a plain bridge and both of its
# ports get `netem delay D` instead (for the cross-check where sch_netem exists). Offloads stay
# as on any veth pair (the delay line carries GSO packets whole, with their virtio-net header).
# lab_down NS_A NS_B DIR also removes NS_A-m.
lab_up_delayed() {
    local a=$1 if_a=$2 addr_a=$3 b=$4 if_b=$5 addr_b=$6 dir=$7 delayline=$8 delay=$9
    local m="$a-m" dev
    mkdir -p "$dir/bpf"
    ip netns add "$a"
    ip netns add "$b"
    ip netns add "$m"
    ip link add "$if_a" netns "$a" type veth peer name ma netns "$m"
    ip link add "$if_b" netns "$b" type veth peer name mb netns "$m"
    ip -n "$a" addr add "$addr_a/24" dev "$if_a"
    ip -n "$b" addr add "$addr_b/24" dev "$if_b"
    for dev in "$a:$if_a" "$b:$if_b" "$m:ma" "$m:mb"; do
        ip -n "${dev%%:*}" link set dev "${dev#*:}" up
    done
    ip -n "$a" link set lo up
    ip -n "$b" link set lo up
    ip -n "$m" link set lo up
    if [ "${delay#netem:}" != "$delay" ]; then
        ip -n "$m" link add br0 type bridge
        ip -n "$m" link set dev ma master br0
        ip -n "$m" link set dev mb master br0
        ip -n "$m" link set br0 up
        ip netns exec "$m" tc qdisc replace dev ma root netem delay "${delay#netem:}" limit 10000
        ip netns exec "$m" tc qdisc replace dev mb root netem delay "${delay#netem:}" limit 10000
    else
        ip netns exec "$m" "$delayline" ma mb "$delay" --stats "$dir/delayline.stats" \
            >"$dir/delayline.log" 2>&1 &
        disown
    fi
    mount -t bpf bpf "$dir/bpf"
}

# lab_down_delayed NS_A NS_B DIR: lab_down and the middle namespace.
lab_down_delayed() {
    ip netns pids "$1-m" 2>/dev/null | xargs -r kill 2>/dev/null || true
    sleep 0.2
    ip netns del "$1-m" 2>/dev/null || true
    lab_down "$@"
}
