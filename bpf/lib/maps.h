/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/* maps.h: every map of the data path (tricolor.bpf.c), so that what the daemon sizes, pins and
 * mmaps is declared in one place. Every value type comes from tricolor_abi.h; names are what the
 * daemon pins under its pin directory. Global variables (libbpf's .rodata, .data and .bss) are
 * not declared here: each sits beside the code that reads it. */
#ifndef TRICOLOR_MAPS_H
#define TRICOLOR_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"

/* Classifier: masked keys of both policy sets, a table of our own per set (tricolor_abi.h,
 * struct tcm_rule_slot), sized at load to two sets of tcm_rule_slots (classify.h). Mmapable: user
 * space writes a set's slots in place, with no syscall per rule. (Before it, a hash map named
 * tcm_rules: Datapath carries a pinned one over.) */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, TCM_NR_SETS *TCM_RULE_SLOTS);
    __type(key, __u32);
    __type(value, struct tcm_rule_slot);
} tcm_rule_table SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TCM_NR_SETS *TCM_MAX_MASKS);
    __type(key, __u32);
    __type(value, struct tcm_mask);
} tcm_masks SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TCM_NR_SETS);
    __type(key, __u32);
    __type(value, struct tcm_set_info);
} tcm_sets SEC(".maps");

/* Cgroup rules of both sets (tricolor_abi.h), and how many each set has in each direction
 * (index set * TCM_CGROUP_NR_DIRS + dir): a set without any reads no socket's cgroup. The rules
 * are not preallocated: only user space writes them, and a host with none does not pay 6 MiB
 * for TCM_MAX_CGROUP_RULES (a preallocated pin of before is carried over: Datapath::load). */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, TCM_MAX_CGROUP_RULES);
    __type(key, struct tcm_cgroup_rule_key);
    __type(value, struct tcm_cgroup_rule);
} tcm_cgroup_rules SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TCM_NR_SETS *TCM_CGROUP_NR_DIRS);
    __type(key, __u32);
    __type(value, __u32);
} tcm_cgroup_sets SEC(".maps");

/* The bucket a --per cgroup policy keys the packet under, set by the pipeline from the packet's
 * cgroup rule: the flow key is otherwise made from the class key alone, which has no cgroup.
 * Scratch, per CPU (a program runs to its end on one CPU): not pinned. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} tcm_cgroup_bucket SEC(".maps");

/* The classification cache (tricolor_abi.h): per CPU, so a slot is written and read by one
 * CPU's programs only (which run to their end there, as every scratch map here assumes), never
 * seen half written. Not pinned: a restarted daemon's programs start with an empty one. Sized
 * at load with the flow table (a growth of that table loads a bigger one). */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, TCM_CLASS_CACHE_ENTRIES);
    __type(key, __u32);
    __type(value, struct tcm_class_cache_entry);
} tcm_class_cache SEC(".maps");

/* The cache's doorkeeper (classify.h): per CPU, by the low bits of a key's hash, the high bits
 * (| 1: 0 is empty) of the last key that missed the cache there without being admitted. Not
 * pinned, as the cache. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, TCM_CLASS_DOOR_SLOTS);
    __type(key, __u32);
    __type(value, __u32);
} tcm_class_door SEC(".maps");

/* Policy configs by set and slot: index set * tcm_policy_slots + slot (classify.h); sized at load
 * to two sets of tcm_policy_slots. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TCM_NR_SETS *TCM_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tcm_policy);
} tcm_policy_cfg SEC(".maps");

/* By policy id: the aggregate bucket (and the fallback when the flow table is full). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TCM_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tcm_flow);
} tcm_policy_state SEC(".maps");

/* By policy id, per CPU: packets and bytes per colour. Sized at load to the policy configs' slots
 * (a host pays it per CPU for the policies it holds); a growth carries the counts of before
 * (datapath_counters.cpp). */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, TCM_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tcm_counters);
} tcm_policy_stats SEC(".maps");

/* Per-key buckets (tricolor_abi.h, struct tcm_flow_slot). Exact, not LRU: evicting a busy flow
 * would hand it a fresh burst. Sized at load (bpf_map__set_max_entries: tcm_flow_meta.slots).
 * Mmapable: user space lists flows in place and deletes idle ones under their locks. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 64);
    __type(key, __u32);
    __type(value, struct tcm_flow_slot);
} tcm_flow_slots SEC(".maps");

/* The flow table's size, secret and count of live flows (tricolor_abi.h). Mmapable: user space
 * takes deleted flows off the count. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tcm_flow_meta);
} tcm_flow_meta SEC(".maps");

/* The flow table of a tricolor whose flows were in a hash map keyed by tcm_flow_id (pinned as
 * tcm_flows), while they move into tcm_flow_slots: a packet whose flow the slots lack looks here
 * before starting a new one (flow_move_old, flow.h). User space renames that pin tcm_flows_prev
 * and reuses it; otherwise this is an empty map of one entry that no packet reads
 * (tcm_flows_moving has no TCM_MOVING_PREV). */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, 1);
    __type(key, struct tcm_flow_id);
    __type(value, struct tcm_flow);
} tcm_flows_prev SEC(".maps");

/* The flow table of a tricolor whose key was the whole tcm_flow_key (44 bytes), while its flows
 * move into tcm_flow_slots, as tcm_flows_prev's do. User space renames that pin tcm_flows_old
 * and reuses it; otherwise this is an empty map of one entry that no packet reads
 * (tcm_flows_moving has no TCM_MOVING_OLD). */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, 1);
    __type(key, struct tcm_flow_key);
    __type(value, struct tcm_flow);
} tcm_flows_old SEC(".maps");

/* The table of slots of before a resize (tcm_flow_meta_prev's layout), while its flows move
 * into tcm_flow_slots: a packet whose flow the slots lack looks here before starting a new one
 * (flow_prev_scan, flow.h), and user space moves the rest once the programs of before are gone
 * (Datapath::move_flows_of_before). Reached through an array of maps of one entry so that user
 * space can drop it, and the kernel free it, while this program runs on: a map a program names
 * directly lives as long as the program. The inner map's layout is set at load to the table of
 * before's (bpf_map__set_inner_map_fd); otherwise the entry is empty and no packet reads it
 * (tcm_flows_moving has no TCM_MOVING_SLOTS). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
    __uint(max_entries, 1);
    __type(key, __u32);
    __array(
        values, struct {
            __uint(type, BPF_MAP_TYPE_ARRAY);
            __uint(map_flags, BPF_F_MMAPABLE);
            __uint(max_entries, 64);
            __uint(key_size, sizeof(__u32));
            /* a size, not a type: clang's BTF has only a forward declaration of a struct that
             * appears in here */
            __uint(value_size, sizeof(struct tcm_flow_slot));
        });
} tcm_flow_slots_prev SEC(".maps");

/* A growth under way: where new flows go while tcm_flow_slots holds its capacity (flow_slot_create,
 * flow.h). User space makes it and puts it in this array of maps of one entry at once when a
 * growth starts, pinned as tcm_flows: the load that follows takes a second (the verifier's), and
 * flows that come faster than that still each get a bucket of their own rather than their
 * policy's. The next load takes it as its tcm_flows_prev, whose flows move into the new table
 * at their next packet. A hash map: it takes memory as flows come (its size: what the next table
 * holds beyond this one, at most 131072: userspace/daemon/flow_passes.cpp), and an inner hash
 * map's size is not part of its template. Empty otherwise: one lookup, on the path of a flow
 * the table lacks. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
    __uint(max_entries, 1);
    __type(key, __u32);
    __array(
        values, struct {
            __uint(type, BPF_MAP_TYPE_HASH);
            __uint(map_flags, BPF_F_NO_PREALLOC);
            __uint(max_entries, 1);
            __uint(key_size, sizeof(struct tcm_flow_id));
            __uint(value_size, sizeof(struct tcm_flow));
        });
} tcm_flow_spill SEC(".maps");

/* The secret of the IPv6 5-tuple's key (tcm_flow_hash6): written by user space when the pinned
 * maps are created, before a program runs, and kept with them. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tcm_flow_seed);
} tcm_flow_seed SEC(".maps");

/* The IPv6 5-tuple of each TCM_FLOW_5TUPLE6 flow, whose key is a hash: written when the flow is
 * created, for user space to list it; never read by a packet. Sized at load to the flow
 * table's capacity. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, TCM_DEFAULT_FLOWS);
    __type(key, struct tcm_flow_id);
    __type(value, struct tcm_flow_key);
} tcm_flow_tuples SEC(".maps");

/* The heavy hitters of tcm_flow_slots (hot.h): keys of the flows whose bytes crossed the threshold
 * user space set. A plain hash, not LRU: a full map refuses an insert, which is counted, where an
 * LRU would forget a heavy hitter without a word. Not preallocated: an insert is once per heavy
 * flow, and an idle host does not pay 1.5 MiB for keys it has none of. Sized at load
 * (bpf_map__set_max_entries). Not pinned: it goes with this program's threshold. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, TCM_FLOW_HOT_ENTRIES);
    __type(key, struct tcm_flow_id);
    __type(value, __u8);
} tcm_flow_hot SEC(".maps");

/* hot_note's key, built here rather than on a stack a chain already fills (hot.h). Scratch:
 * not pinned, read only by the program that wrote it, in the same run. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tcm_flow_id);
} tcm_hot_key SEC(".maps");

/* flow_slot_create's state (the id of the flow it makes, which flow_move_old reads too; flow.h):
 * a chain's deepest frames have no room for it. Scratch, not pinned. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tcm_slot_scratch);
} tcm_slot_key SEC(".maps");

/* flow_note_tuple's tuple, for the same reason (flow.h). Scratch, not pinned. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tcm_flow_key);
} tcm_tuple_key SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tcm_global_counters);
} tcm_global_stats SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tcm_runtime);
} tcm_runtime SEC(".maps");

/* --warmup and --quota (quota.h): by policy id, the config of each policy with either, written
 * by the daemon before the set that holds the policy becomes active; and by bucket (tcm_flow_id,
 * an aggregate's kind 0), their state, made at the bucket's first packet. Hash maps without
 * preallocation: a host whose policies have neither pays nothing for them. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, TCM_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tcm_policy_ext);
} tcm_policy_ext SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, TCM_EXT_STATES);
    __type(key, struct tcm_flow_id);
    __type(value, struct tcm_ext_state);
} tcm_meter_ext SEC(".maps");

/* UTC against the data path's clock, for the quotas' periods (tricolor_abi.h). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tcm_wall);
} tcm_wall SEC(".maps");

/* chain_level_ext's and chain_ext_level's (chain.h): a bucket's key, and in a chain with a
 * warm-up or quota each level's decision on copies of its states, off the stack (the verifier's
 * 512 bytes are the chain's frames'). Per CPU, scratch, not pinned. */
struct tcm_ext_scratch {
    struct tcm_flow_id id;
    __u32 ext_slots; /* bit i: slot i's xs holds level i's copy (chain_ext_level) */
    struct tcm_meter_state st[TCM_MAX_LEVELS];
    struct tcm_ext_state xs[TCM_MAX_LEVELS];
};
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tcm_ext_scratch);
} tcm_ext_scratch SEC(".maps");

/* By policy id: the leases of fleet policies (struct tcm_fleet_lease), mmapped by the daemon. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, TCM_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tcm_fleet_lease);
} tcm_fleet SEC(".maps");

/* ---- TCP through the policer (docs/spec.md §8) ---- */

/* Per CPU by policy id: the counters of --aqm and --shape edt. Sized as tcm_policy_stats. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, TCM_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tcm_tcp_counters);
} tcm_tcp_stats SEC(".maps");

/* --shape edt (edt.h), by policy id: the reciprocal of the rate a red packet waits for. Written
 * by the daemon before a set that uses it becomes active. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TCM_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tcm_edt_cfg);
} tcm_edt_cfg SEC(".maps");

/* --shape sockets (shape.h), by policy id: how the policy's sockets are paced (the daemon's), and
 * how many are (the sock_ops program's). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TCM_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tcm_shape_cfg);
} tcm_shape_cfg SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TCM_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tcm_shape_state);
} tcm_shape_state SEC(".maps");

/* --shape sockets: socket-local storage of a paced socket (tricolor_abi.h has why three maps). */
struct {
    __uint(type, BPF_MAP_TYPE_SK_STORAGE);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, int);
    __type(value, struct tcm_sock_shape);
} tcm_sock_shape SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_SK_STORAGE);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, int);
    __type(value, struct tcm_sock_pace);
} tcm_sock_pace SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_SK_STORAGE);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, int);
    __type(value, struct tcm_sock_cwnd);
} tcm_sock_cwnd SEC(".maps");

#endif /* TRICOLOR_MAPS_H */
