#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# tests/bench/flow_slots_sim.py: how often a new flow finds no free slot in its probe sequence
# (bpf/lib/flow.h: TCM_FLOW_PROBES slots from its home), by load, in a simulation of the flow
# table's linear probing with homes drawn at random (what a keyed hash gives keys a sender cannot
# choose). Prints one RESULT line a load: the flows that found no slot per million inserted.
#
#   tests/bench/flow_slots_sim.py [LOG2_SLOTS] [PROBES]   (defaults 20 and 128; a few minutes)
import random
import sys


def fill(log2_slots, probes, load, rng):
    slots = 1 << log2_slots
    mask = slots - 1
    used = bytearray(slots)
    failed = 0
    n = int(slots * load)
    for _ in range(n):
        home = rng.getrandbits(32) & mask
        for i in range(probes):
            j = (home + i) & mask
            if not used[j]:
                used[j] = 1
                break
        else:
            failed += 1
    return n, failed


def main():
    log2_slots = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    probes = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    rng = random.Random(1)
    # 0.8: a table at its capacity (5/4 slots a flow); 0.7: one just grown; 0.5: the tables of
    # before 2026-11-30 at theirs (a power of two of slots, twice the capacity at least).
    for load in (0.5, 0.7, 0.8):
        n, failed = fill(log2_slots, probes, load, rng)
        print(f"RESULT name=flow_slots_full_probe_load{int(load * 100)} "
              f"per_million={failed * 1e6 / n:.1f} flows={n} probes={probes}")


if __name__ == "__main__":
    main()
