// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_impl.hpp: what the datapath_*.cpp files share, and nothing outside them uses: the
// Datapath's state (Datapath::Impl) and the map reads more than one of them needs.
#pragma once

#include "tricolor/datapath.hpp"
#include "tricolor/cgroups.hpp"
#include "tricolor/policy_sets.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "tricolor_cgin.skel.h"
#include "tricolor_dp.skel.h"

namespace tricolor {

// How many values a per-CPU map holds for a key: a buffer for one is sized by it (at least one,
// should libbpf fail to count, an error being negative).
inline size_t possible_cpus() {
    return static_cast<size_t>(std::max(libbpf_num_possible_cpus(), 1));
}

// A set's cgroup rules by (direction, cgroup id) (datapath_cgroups.cpp).
using CgroupRules = std::map<std::pair<uint32_t, uint64_t>, tcm_cgroup_rule>;

// The flow table's pins; a table of before a resize has them with kOfBefore appended.
inline constexpr std::array<const char *, 3> kFlowTablePins = {"tcm_flow_slots", "tcm_flow_tuples",
                                                               "tcm_flow_meta"};
inline constexpr const char *kOfBefore = "_prev";
// open_spill's table: the pin a flow table of before keyed by tcm_flow_id had, which the next
// load sets aside as tcm_flows_prev (set_aside_old_flow_tables).
inline constexpr const char *kSpillPin = "tcm_flows";
// The policy tables' pins; while resize_tables loads others, the tables of before are pinned
// with kOfBefore appended (a daemon killed meanwhile finds them there: Datapath::load).
inline constexpr std::array<const char *, 2> kPolicyTablePins = {"tcm_policy_cfg",
                                                                 "tcm_rule_table"};

// The per-CPU counter arrays by policy id, sized by the policy tables (TableSizes::policy_slots):
// a host pays them per CPU for the policies its tables hold, not for TCM_MAX_POLICIES. A
// growth of the tables (or a start on pins of another size) makes new arrays; the arrays of
// before (pinned with kOfBefore appended) are counted into by programs of before until every
// hook runs this data path's, and are then folded (Datapath::fold_counters_of_before) into the
// array's carried counts (pinned with kCarried appended: a hash map without preallocation that
// only user space writes). A policy's counters are the sum of the three (datapath_counters.cpp).
inline constexpr std::array<const char *, 2> kCounterPins = {"tcm_policy_stats", "tcm_tcp_stats"};
inline constexpr const char *kCarried = "_carried";
// A key of the carried counts that is no policy id: the map id of an array of before folded
// into them (bit 31 set). A daemon killed between the fold and the removal of that array's pin
// finds it there and does not fold it twice.
inline constexpr uint32_t kFoldMark = 1u << 31;

struct Datapath::Impl {
    DatapathOptions options; // what it was loaded with
    tricolor_dp *skel = nullptr;
    tricolor_cgin *cgin = nullptr; // the cgroup ingress program, once loaded (datapath_cgroups.cpp)
    bool testing = false;
    bool adopted = false;
    std::string pin_path;
    tcm_runtime *runtime = nullptr;    // the mmapped entry of the tcm_runtime map
    tcm_fleet_lease *fleet = nullptr;  // the mmapped tcm_fleet array
    std::map<uint32_t, Policy> active; // id -> policy of the active set
    size_t counted_flows = 0;          // as of the last reclaim pass or count_flows()
    std::unique_ptr<RuleTable> rules;  // tcm_rule_table, mapped
    std::unique_ptr<PolicySets> sets;  // the model of the set and what each set's maps hold
    // The model is the active set: false after adopting pins, until a change is applied.
    bool in_sync = true;
    // Adopted pins: the flow table may hold flows of ids no set holds.
    bool flows_unclean = false;
    // And tcm_policy_ext, tcm_meter_ext the config and state of such ids (datapath_ext.cpp).
    bool ext_unclean = false;
    // Deletes the warm-up and quota config and state of the policy ids @drop says to.
    void delete_ext_if(const std::function<bool(uint32_t)> &drop);
    // The flow table (tcm_flow_slots and tcm_flow_meta), mapped: listed in place, its idle flows
    // deleted under their locks (datapath_flows.cpp).
    tcm_flow_slot *slots = nullptr;
    size_t slots_bytes = 0;
    tcm_flow_meta *meta = nullptr;
    // Slots deleted (TCM_SLOT_DYING): free once no packet can still hold them (free_dying).
    std::vector<uint32_t> dying;
    // TCM_MOVING_*: the pinned flow tables of before (tcm_flows_old, keyed by the whole
    // tcm_flow_key; tcm_flows_prev, a hash map keyed by tcm_flow_id), whose flows move at their
    // next packet: listed and reclaimed from there meanwhile, and each pin removed once its
    // table is empty (datapath_flows.cpp).
    uint8_t flows_moving = 0;
    // TCM_MOVING_SLOTS: the table of slots of before a resize (pinned tcm_flow_slots_prev, its
    // layout from tcm_flow_meta_prev), reached by the programs through tcm_flow_slots_prev's
    // one entry, and mapped here; its flows move into the table at their next packet or by
    // move_flows_of_before, which then drops it (datapath_resize.cpp).
    std::optional<tcm_flow_meta> prev_layout;
    int prev_slots_fd = -1, prev_tuples_fd = -1;
    tcm_flow_slot *prev_slots = nullptr;
    size_t prev_slots_bytes = 0;
    // A pin of the table of before: @name (one of kFlowTablePins) with kOfBefore appended.
    std::string pin_of_before(const char *name) const { return pin_path + "/" + name + kOfBefore; }
    // Maps a table of @nslots slots (its map @map_fd) whole into @bytes (datapath_load.cpp).
    static tcm_flow_slot *map_slots(int map_fd, uint32_t nslots, size_t &bytes, const char *what);
    // Before the load: the table of before as the inner map's layout; after it: in the outer
    // map's entry, mapped, its tuples copied over (datapath_resize.cpp).
    void open_table_of_before();
    void hand_over_table_of_before();
    // Moves the flow in slot @idx of the table of before into the table (1), or finds none
    // there (0) or cannot now (-1: a lock held, or no room).
    int move_slot_of_before(uint32_t idx);
    // Puts a flow moved out of a table of before into the table (datapath_resize.cpp).
    int place_moved(const tcm_flow_id &id, const tcm_flow &state, uint32_t home);
    // Moves the flows of tcm_flows_prev into the table (datapath_resize.cpp).
    void move_hash_of_before(MoveResult &r);
    // Drops the table of before: its entry, mapping, pins.
    void drop_table_of_before();
    // kCounterPins' arrays: the array of before while held, and the carried counts.
    struct CounterArray {
        int prev_fd = -1;
        uint32_t prev_entries = 0, prev_id = 0;
        int carried_fd = -1;
        size_t words = 0; // u64 in a value
    };
    std::array<CounterArray, kCounterPins.size()> counters;
    bool counters_set_aside = false; // this load renamed an array to its pin of before
    // Before the load: each array sized to @slots, one of another size pinned set aside, the
    // arrays of before and the carried counts opened (datapath_counters.cpp).
    void open_counter_arrays(uint32_t slots);
    bpf_map *counter_map(size_t which) const;
    // Adds to @sum (counter_map(@which)'s value type, as u64 words) what the array of before and
    // the carried counts hold for @id.
    void add_carried(size_t which, uint32_t id, uint64_t *sum) const;
    // Every active id's counters of array @which, summed over CPUs and the three places, as V.
    template <typename V>
    std::map<uint32_t, V> counter_sums(size_t which) const;
    // A reused id starts at zero: its carried counts deleted, its array of before's zeroed.
    void forget_counters(const std::vector<uint32_t> &ids) const;
    // open_spill's table while a growth is under way (its pin: kSpillPin), and what the programs
    // moved out of tcm_flows_prev and left there, marked, at the last flow pass
    // (datapath_resize.cpp).
    int spill_fd = -1;
    std::vector<tcm_flow_id> moved_prev;
    void delete_moved_prev();
    uint32_t shaping = 0; // active policies with --shape sockets
    // flows --top from the heavy hitters (docs/datapath.md, "flows --top at 2^20").
    uint32_t top_keep = 0, hot_capacity = 0;
    struct Hot {
        bool valid = false;            // the keys below and tcm_flow_hot hold every flow
                                       // with at least `threshold` bytes
        uint64_t threshold = ~0ull;    // installed in the data path
        std::vector<tcm_flow_id> keys; // sorted: read at or above it, or drained from the map
        uint64_t next = ~0ull;         // for the next pass
    } hot;
    // --match cgroup: the tree as last scanned (with its paths by id), and the cgroup rules each
    // set holds as written (unknown after adopting pins: the first write deletes what is there).
    std::string cgroup_mount;
    std::vector<Cgroup> cgroup_tree;
    std::map<uint64_t, std::string> cgroup_paths;
    CgroupRules cgroup_rules[TCM_NR_SETS];
    bool cgroup_rules_known[TCM_NR_SETS] = {true, true};
    // The policy tables' sizes as loaded, and (resize_tables) the tables of before, whose
    // configs and rules load() carries into this data path's before it adopts the active set.
    TableSizes tables;
    struct TablesOfBefore {
        int cfg_fd = -1, rules_fd = -1;
        uint32_t policy_slots = 0, rule_slots = 0;
    };
    // The sizes the first load was asked for: the least a shrink goes to (tables_for_shrink).
    TableSizes least_tables;
    // A reload for tables without the warm-up and quota states (reload): their pin goes at the
    // load, whatever it holds.
    bool drop_ext_states = false;
    std::optional<TablesOfBefore> tables_of_before;
    void carry_tables_of_before();
    // A pinned tcm_cgroup_rules of before (preallocated), its entries carried into this data
    // path's: programs of before still read it until every hook runs this data path's, so
    // write_cgroup_rules writes there too until drop_cgroup_rules_of_before.
    int cgroup_rules_of_before = -1;
    // follow_cgroups has just scanned: the commit it makes uses that scan.
    bool cgroup_tree_fresh = false;
    // When a set was last made active: a set switched away from moments ago may still be read
    // by packets in flight (write_cgroup_rules waits for them).
    std::chrono::steady_clock::time_point switched_at;
    // Scans the tree if a policy of the model matches cgroups (finding the mount the first
    // time); what its patterns cover, best rank first, as the classifier orders them.
    Result<CgroupRules> cgroup_rules_of_model();
    // Writes @rules as set @set's cgroup rules (the set inactive).
    Result<void> write_cgroup_rules(uint32_t set, const CgroupRules &rules);
    uint32_t flows_map_id = 0;
    std::vector<uint32_t> own_progs; // this Datapath's program ids
    // An earlier daemon's programs pinned under progs/ (id, pin), kept while they may run on a
    // hook (pin_programs, release_previous_programs).
    std::vector<std::pair<uint32_t, std::string>> previous_progs;
    static size_t fleet_bytes() {
        size_t page = sysconf(_SC_PAGESIZE);
        return (sizeof(tcm_fleet_lease) * TCM_MAX_POLICIES + page - 1) / page * page;
    }
    // The flow table, mapped (datapath_flows.cpp):
    // the slot of the live flow @id, or -1 (as flow_slot_lookup in bpf/lib/flow.h finds it);
    int64_t find_slot(const tcm_flow_id &id) const;
    // slot @idx's flow, with true, if it holds one that stayed while it was read;
    bool read_slot(uint32_t idx, tcm_flow_id &id, tcm_flow &state) const;
    // the slot of the live flow @id with its state read into @state, or -1;
    int64_t read_flow(const tcm_flow_id &id, tcm_flow &state) const;
    // deletes the flow @id from slot @idx if it is still there and (with @expect, under the
    // flow's lock) no packet came since @expect was read: the slot dies, freed by free_dying;
    bool kill_slot(uint32_t idx, const tcm_flow_id &id, const tcm_flow *expect);
    // frees the slots deleted so far once no packet can hold them (an RCU grace period);
    void free_dying();
    // the same three in the table of slots of before a resize (prev_slots), where a deleted
    // flow's slot stays dead (no flow is made there);
    int64_t find_slot_of_before(const tcm_flow_id &id) const;
    bool read_slot_of_before(uint32_t idx, tcm_flow_id &id, tcm_flow &state) const;
    bool kill_slot_of_before(uint32_t idx, const tcm_flow_id &id, const tcm_flow *expect);
    // calls @each(id, whole key or nullptr, state, slot) for every flow of the table and of the
    // tables of before (flows not moved yet: slot Flow::kInPrev, or Flow::kInOld with the
    // whole key and an id of 0);
    template <typename F>
    void for_each_flow(F each) const;
    // after the flow @id was deleted: its tuple from tcm_flow_tuples, unless a packet has
    // created the flow again meanwhile.
    void drop_flow_tuple(const tcm_flow_id &id) const;
    // Maps the flow table and its meta, writing @layout there if the meta is new
    // (datapath_load.cpp).
    void map_flow_table(const tcm_flow_meta &layout);
    static size_t meta_bytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
    ~Impl() {
        if (slots)
            munmap(slots, slots_bytes);
        if (prev_slots)
            munmap(prev_slots, prev_slots_bytes);
        if (tables_of_before)
            for (int f : {tables_of_before->cfg_fd, tables_of_before->rules_fd})
                close(f);
        for (const auto &c : counters)
            for (int f : {c.prev_fd, c.carried_fd})
                if (f >= 0)
                    close(f);
        for (int f : {prev_slots_fd, prev_tuples_fd, cgroup_rules_of_before, spill_fd})
            if (f >= 0)
                close(f);
        if (meta)
            munmap(meta, meta_bytes());
        if (fleet)
            munmap(fleet, fleet_bytes());
        if (runtime)
            munmap(runtime, sysconf(_SC_PAGESIZE));
        tricolor_cgin::destroy(cgin);
        tricolor_dp::destroy(skel);
    }

    int fd(bpf_map *m) const { return bpf_map__fd(m); }
    // A program's fd; one left out of a testing load (DatapathOptions::programs) is a test's
    // mistake, said as such rather than handed on as -1.
    int prog_fd(const bpf_program *p, const char *what) const {
        int fd = bpf_program__fd(p);
        if (fd < 0)
            throw std::logic_error(
                fmt::format("the {} program is not loaded: this testing Datapath left it out "
                            "(DatapathOptions::programs)",
                            what));
        return fd;
    }

    // After grow: the data path of before, whose programs may still run on a hook until
    // retire_previous.
    std::unique_ptr<Impl> retired;

    // One call of Datapath::commit, a member function a step (datapath_commit.cpp).
    class SetWriter;
};

namespace detail {

// The home slot of @id in a table of layout @m, as the data path finds it (TCM_SLOT_HOME, its
// shift from the slots).
inline uint32_t slot_home(const tcm_flow_id &id, const tcm_flow_meta &m) {
    return TCM_SLOT_HOME(&id, m.seed, m.slots, TCM_SLOT_SHIFT(m.slots));
}

// The flow table's layout, the tables of before (TCM_MOVING_*) and how a flow's lock is released
// (tcm_store_release) in the .rodata of a program that finds flows (the data path's, the cgroup
// ingress program's): frozen at its load.
template <typename Rodata>
void set_flow_layout(Rodata *ro, const tcm_flow_meta &layout, uint8_t moving,
                     const std::optional<tcm_flow_meta> &before) {
    ro->tcm_slot_count = layout.slots;
    ro->tcm_slot_shift = TCM_SLOT_SHIFT(layout.slots);
    ro->tcm_slot_capacity = layout.capacity;
    for (int i = 0; i < TCM_SLOT_SEED_WORDS; ++i)
        ro->tcm_slot_seed[i] = layout.seed[i];
    ro->tcm_flows_moving = moving;
    if (before) {
        ro->tcm_prev_slot_count = before->slots;
        ro->tcm_prev_slot_shift = TCM_SLOT_SHIFT(before->slots);
        for (int i = 0; i < TCM_SLOT_SEED_WORDS; ++i)
            ro->tcm_prev_slot_seed[i] = before->seed[i];
    }
#if defined(__x86_64__) || defined(__i386__)
    ro->tcm_store_release = 1; // TSO: a plain store releases the flow lock (bpf/lib/flow.h)
#endif
}

// The sizes of the policy tables, in the .rodata of a program that reads them (classify.h).
template <typename Rodata>
void set_table_sizes(Rodata *ro, const TableSizes &t) {
    ro->tcm_policy_slots = t.policy_slots;
    ro->tcm_rule_slots = t.rule_slots;
}

// The entries of the pinned map at @path: its max_entries and key size (0, 0: no such map;
// datapath_load.cpp).
std::pair<uint32_t, uint32_t> pinned_map_size(const std::string &path);

// Adds @rows values of @words u64 each (a per-CPU map's CPUs, or 1) into @sum's words.
inline void add_rows(uint64_t *sum, const uint64_t *v, size_t rows, size_t words) {
    for (size_t k = 0; k < rows; ++k)
        for (size_t i = 0; i < words; ++i)
            sum[i] += v[k * words + i];
}

// Sorts @keys and drops the repeats (datapath_flows.cpp).
void sort_unique(std::vector<tcm_flow_id> &keys);

// Every key and value of the hash map @fd, read in batches (deleted as read if @drain); nullopt if
// the map could not be read whole (a kernel without batches, an error).
template <typename K, typename V>
std::optional<std::pair<std::vector<K>, std::vector<V>>> batch_entries(int fd, bool drain) {
    std::pair<std::vector<K>, std::vector<V>> out;
    size_t chunk = 1024;
    std::vector<K> keys(chunk);
    std::vector<V> values(chunk);
    uint32_t in_batch = 0, out_batch = 0;
    for (bool first = true;;) {
        uint32_t count = static_cast<uint32_t>(chunk);
        void *in = first ? nullptr : &in_batch;
        int err = drain ? bpf_map_lookup_and_delete_batch(fd, in, &out_batch, keys.data(),
                                                          values.data(), &count, nullptr)
                        : bpf_map_lookup_batch(fd, in, &out_batch, keys.data(), values.data(),
                                               &count, nullptr);
        if (err == -ENOSPC && count == 0) { // a hash bucket larger than the chunk: again
            chunk *= 2;
            keys.resize(chunk);
            values.resize(chunk);
            continue;
        }
        if (err < 0 && err != -ENOENT)
            return std::nullopt;
        out.first.insert(out.first.end(), keys.begin(), keys.begin() + count);
        out.second.insert(out.second.end(), values.begin(), values.begin() + count);
        if (err == -ENOENT) // that was the last batch
            return out;
        in_batch = out_batch;
        first = false;
    }
}

// The keys of the heavy-hitter map, deleting them if @drain; nullopt if the map could not be
// read whole (datapath_flows.cpp).
std::optional<std::vector<tcm_flow_id>> hot_map_keys(int fd, bool drain);

// The flow of @id in full (tcm_flow_id's layout); an IPv6 5-tuple from @tuples_fd
// (tcm_flow_tuples), its hash words as its addresses if that has none.
tcm_flow_key flow_key_of_id(const tcm_flow_id &id, int tuples_fd);

// Reads every entry of @fd in batches of keys K and values V (V per CPU: @values_per_key of
// them), calling @each(key, values). Falls back to one lookup a key where batching is missing.
// @max_keys: stop after that many (an array's first keys: its low indexes).
template <typename K, typename V, typename F>
void for_each_entry(int fd, size_t values_per_key, F each, size_t max_keys = SIZE_MAX) {
    size_t chunk = std::min<size_t>(4096, std::max<size_t>(max_keys, 1));
    size_t read = 0;
    std::vector<K> keys(chunk);
    std::vector<V> values(chunk * values_per_key);
    uint32_t in_batch = 0, out_batch = 0;
    bool first = true;
    for (;;) {
        uint32_t count = static_cast<uint32_t>(chunk);
        int err = bpf_map_lookup_batch(fd, first ? nullptr : &in_batch, &out_batch, keys.data(),
                                       values.data(), &count, nullptr);
        if (err < 0 && err != -ENOENT && err != -ENOSPC && first) {
            // No batch support for this map: walk it key by key.
            K k{}, nk{};
            void *prev = nullptr;
            std::vector<V> v(values_per_key);
            while (bpf_map_get_next_key(fd, prev, &nk) == 0) {
                if (bpf_map_lookup_elem(fd, &nk, v.data()) == 0)
                    each(nk, v.data());
                k = nk;
                prev = &k;
            }
            return;
        }
        if (err == -ENOSPC && count == 0) { // a hash bucket larger than the chunk
            chunk *= 2;
            keys.resize(chunk);
            values.resize(chunk * values_per_key);
            continue;
        }
        for (uint32_t i = 0; i < count && read < max_keys; ++i, ++read)
            each(keys[i], &values[i * values_per_key]);
        if (err < 0 || read >= max_keys) // ENOENT: that was the last batch
            return;
        in_batch = out_batch;
        first = false;
    }
}

} // namespace detail

template <typename V>
std::map<uint32_t, V> Datapath::Impl::counter_sums(size_t which) const {
    static_assert(sizeof(V) % sizeof(uint64_t) == 0, "counters are u64 words");
    std::map<uint32_t, V> out;
    if (active.empty())
        return out;
    const size_t ncpus = possible_cpus();
    const size_t words = sizeof(V) / sizeof(uint64_t);
    const CounterArray &c = counters[which];
    auto add = [&](uint32_t id, const uint64_t *v, size_t n) {
        if (active.contains(id))
            detail::add_rows(reinterpret_cast<uint64_t *>(&out[id]), v, n, words);
    };
    // Ids are given lowest first: up to the highest active one, not the whole array (per CPU),
    // which a reader once a second (--web) would pay for every time.
    const size_t ids = active.rbegin()->first + size_t{1};
    detail::for_each_entry<uint32_t, uint64_t>(
        fd(counter_map(which)), ncpus * words,
        [&](uint32_t id, const uint64_t *v) { add(id, v, ncpus); }, ids);
    if (c.prev_fd >= 0)
        detail::for_each_entry<uint32_t, uint64_t>(
            c.prev_fd, ncpus * words, [&](uint32_t id, const uint64_t *v) { add(id, v, ncpus); },
            std::min<size_t>(ids, c.prev_entries));
    if (c.carried_fd >= 0)
        detail::for_each_entry<uint32_t, uint64_t>(
            c.carried_fd, words, [&](uint32_t id, const uint64_t *v) { add(id, v, 1); });
    return out;
}

} // namespace tricolor
