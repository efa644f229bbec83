#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# load_objects.sh: loads every program of every BPF object under OBJDIR/<compiler>/ into the
# running kernel (load_check: maps created, programs verified, nothing attached) and prints one
# line per compiler:
#   RESULT name=load_<compiler>_<kernel> kernel=<release> objects=<n> refused=<objects or ->
# Exit 1 if the kernel refused any object, with the loader's message (the verifier's reason and
# the source line it stopped at).
#   tests/compilers/load_objects.sh LOAD_CHECK OBJDIR
set -uo pipefail
CHECK=${1:?usage: load_objects.sh LOAD_CHECK OBJDIR}
OBJDIR=${2:?usage: load_objects.sh LOAD_CHECK OBJDIR}
[ "$(id -u)" -eq 0 ] || { echo "load_objects.sh: run as root" >&2; exit 2; }
kernel=$(uname -r)
kid=$(echo "$kernel" | sed -E 's/^([0-9]+)\.([0-9]+).*/\1.\2/')
rc=0
for dir in "$OBJDIR"/*/; do
    cc=$(basename "$dir")
    n=0 refused=
    for obj in "$dir"*.bpf.o; do
        [ -e "$obj" ] || continue
        n=$((n + 1))
        if ! out=$("$CHECK" "$obj" 2>&1); then
            refused="${refused:+$refused,}$(basename "$obj" .bpf.o)"
            echo "load_objects.sh: $cc on $kernel: $out" >&2
            rc=1
        fi
    done
    echo "RESULT name=load_${cc}_$kid kernel=$kernel objects=$n refused=${refused:--}"
done
exit $rc
