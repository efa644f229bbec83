# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# bash completion for tricolorctl: commands, their flags, interfaces, and (from the running
# daemon) policy names.
_tricolorctl_policies() {
    tricolorctl -j policy list 2>/dev/null | grep -o '"name":"[^"]*"' | cut -d'"' -f4
}

_tricolorctl_files() {
    COMPREPLY=($(compgen -f -- "$cur"))
}

_tricolorctl() {
    # Plain bash: no dependency on the bash-completion package's helpers.
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    local words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
    local commands="attach detach policy apply stats flows status replay"
    local policy_flags="--algo --cir --cbs --ebs --pir --pbs --eir --match --priority --per
        --green --yellow --red --color-aware --color-map --packet-mode --length --overhead
        --shape --aqm --fleet --parent --only-parent --coupling --start"
    local cmd="" sub="" i
    for ((i = 1; i < cword; i++)); do
        case "${words[i]}" in
        # Options that take a value: the value is not a command (--match takes two).
        --socket | --hook | --direction | --xdp-mode | --algo | --cir | --cbs | --ebs | --pir | \
            --pbs | --eir | --priority | --per | --green | --yellow | --red | --color-map | \
            --length | --overhead | --interval | --count | --policy | --top | --engine | -f | \
            --file) ((i++)) ;;
        --match) ((i += 2)) ;;
        -*) ;;
        *)
            if [[ -z $cmd ]]; then
                cmd=${words[i]}
            elif [[ $cmd == policy && -z $sub ]]; then
                sub=${words[i]}
            fi
            ;;
        esac
    done
    case "$prev" in
    --algo) COMPREPLY=($(compgen -W "srtcm trtcm rfc4115" -- "$cur")); return ;;
    --hook) COMPREPLY=($(compgen -W "xdp tc" -- "$cur")); return ;;
    --direction) COMPREPLY=($(compgen -W "ingress egress" -- "$cur")); return ;;
    --xdp-mode) COMPREPLY=($(compgen -W "native generic auto" -- "$cur")); return ;;
    --engine) COMPREPLY=($(compgen -W "model bpf" -- "$cur")); return ;;
    --per) COMPREPLY=($(compgen -W "aggregate src dst src/ dst/ 5tuple" -- "$cur")); return ;;
    --length) COMPREPLY=($(compgen -W "l3 l2" -- "$cur")); return ;;
    --shape) COMPREPLY=($(compgen -W "off sockets edt" -- "$cur")); return ;;
    --aqm) COMPREPLY=($(compgen -W "off drop ecn" -- "$cur")); return ;;
    --start) COMPREPLY=($(compgen -W "full empty" -- "$cur")); return ;;
    --parent) COMPREPLY=($(compgen -W "$(_tricolorctl_policies)" -- "$cur")); return ;;
    --match) COMPREPLY=($(compgen -W "src dst proto sport dport dscp vlan iface" -- "$cur")); return ;;
    --green | --yellow | --red)
        COMPREPLY=($(compgen -W "pass drop dscp: mark: priority: classid:" -- "$cur")); return ;;
    --policy) COMPREPLY=($(compgen -W "$(_tricolorctl_policies)" -- "$cur")); return ;;
    -f | --file | --policies) _tricolorctl_files; return ;;
    --socket) _tricolorctl_files; return ;;
    esac
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "$commands -j --json --socket --help --help-all --version" -- "$cur"))
        return
    fi
    case "$cmd" in
    attach | detach)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--hook --direction --xdp-mode" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur"))
        fi ;;
    policy)
        if [[ -z $sub ]]; then
            COMPREPLY=($(compgen -W "add set del list show" -- "$cur"))
        elif [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$policy_flags --no-fleet --no-color-aware --no-packet-mode
                --no-parent --no-only-parent --no-coupling" -- "$cur"))
        elif [[ $sub == set || $sub == del || $sub == show ]]; then
            COMPREPLY=($(compgen -W "$(_tricolorctl_policies)" -- "$cur"))
        fi ;;
    stats)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--watch --interval --count" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$(_tricolorctl_policies)" -- "$cur"))
        fi ;;
    flows) COMPREPLY=($(compgen -W "--policy --top" -- "$cur")) ;;
    apply) COMPREPLY=($(compgen -W "-f --file --dry-run" -- "$cur")) ;;
    replay)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--algo --cir --cbs --ebs --pir --pbs --eir --color-aware
                --packet-mode --coupling --start -f --policies --engine" -- "$cur"))
        else
            _tricolorctl_files
        fi ;;
    esac
}
complete -F _tricolorctl tricolorctl
