/* maps.h: the data path's maps. Every value type comes from tricolor_abi.h; names are what the
 * daemon pins under its pin directory. */
#ifndef TRICOLOR_MAPS_H
#define TRICOLOR_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tricolor_abi.h"

/* Classifier: masked keys of both policy sets. Entries are only inserted into the inactive set
 * and deleted after it stops being active, never updated in place, so prealloc is safe. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, TC_MAX_RULES);
    __type(key, struct tc_rule_key);
    __type(value, struct tc_rule);
} tc_rules SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TC_NR_SETS *TC_MAX_MASKS);
    __type(key, __u32);
    __type(value, struct tc_mask);
} tc_masks SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TC_NR_SETS);
    __type(key, __u32);
    __type(value, struct tc_set_info);
} tc_sets SEC(".maps");

/* Policy configs by set and slot: index set * TC_MAX_POLICIES + slot. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TC_NR_SETS *TC_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tc_policy);
} tc_policy_cfg SEC(".maps");

/* By policy id: the aggregate bucket (and the fallback when the flow table is full). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, TC_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tc_flow);
} tc_policy_state SEC(".maps");

/* By policy id, per CPU: packets and bytes per colour. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, TC_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tc_counters);
} tc_policy_stats SEC(".maps");

/* Per-key buckets. Exact, not LRU: evicting a busy flow would hand it a fresh burst. The
 * capacity is set at load time (bpf_map__set_max_entries). Not preallocated: the daemon deletes
 * idle flows, and a deleted element must not be reused while a packet on another CPU may still
 * hold it (without prealloc, elements are freed after an RCU grace period). */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __uint(max_entries, TC_DEFAULT_FLOWS);
    __type(key, struct tc_flow_key);
    __type(value, struct tc_flow);
} tc_flows SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tc_global_counters);
} tc_global_stats SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct tc_runtime);
} tc_runtime SEC(".maps");

/* By policy id: grants of fleet policies (struct tc_fleet_grant), mmapped by the daemon. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(map_flags, BPF_F_MMAPABLE);
    __uint(max_entries, TC_MAX_POLICIES);
    __type(key, __u32);
    __type(value, struct tc_fleet_grant);
} tc_fleet SEC(".maps");

#endif /* TRICOLOR_MAPS_H */
