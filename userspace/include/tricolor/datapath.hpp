// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath.hpp: one class over the data path's BPF objects (bpf/tricolor.bpf.c): load, replace
// the policy set atomically, read counters and flows, and (in testing mode) run the programs
// through BPF_PROG_TEST_RUN without touching any interface.
#pragma once

#include "tricolor/attach.hpp"
#include "tricolor/meter.hpp"
#include "tricolor/policy.hpp"
#include "tricolor/result.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <linux/bpf.h>

extern "C" {
#include "tricolor_abi.h"
}

namespace tricolor {

// What the sock_ops program of --shape sockets sees of one policy.
struct ShapeCounters {
    uint32_t sockets = 0;
    tcm_tcp_counters tcp{}; // aqm and edt counters, summed over CPUs
};

// A fleet policy's local side, read from the data path (docs/spec.md §10).
struct FleetLocal {
    uint64_t held = 0;    // tokens in C now (what this host may still spend, less what its lease
                          // earns from the last packet on)
    uint64_t spilled = 0; // tokens the lease earned beyond its cap (srtcm: beyond E too)
};

// A fleet policy's lease (docs/fleet.md): C earns @rate tokens per ns (bit/s, packet/s), holds at
// most @cap tokens, and is void past @until_ns (now_ns()'s clock; 0: never).
struct FleetLease {
    uint64_t rate = 0, cap = 0, until_ns = 0;
};

// The sizes of the tables that hold policies: configs per set (ids below it) and classifier
// slots per set (at most half of them rules). Powers of two. And whether the warm-up and quota
// states (tcm_meter_ext, TCM_EXT_STATES buckets) are made: a hash map without preallocation
// still allocates its bucket array whole (64 MiB for TCM_EXT_STATES), so a data path whose
// policies never had a warm-up or quota holds a map of one entry there, not pinned.
struct TableSizes {
    uint32_t policy_slots = TCM_MAX_POLICIES;
    uint32_t rule_slots = TCM_RULE_SLOTS;
    bool ext_states = true;
    bool operator==(const TableSizes &) const = default;
};

struct DatapathOptions {
    uint32_t flow_capacity = TCM_DEFAULT_FLOWS;
    // Where no pinned table says otherwise (tricolord starts at TCM_START_POLICY_SLOTS and
    // TCM_START_RULE_SLOTS and grows them).
    TableSizes tables;
    // Pin every map under <pin_dir>/abi<TCM_ABI_VERSION>/ and reuse what is pinned there, so a
    // new Datapath adopts the state (buckets, counters, active set) of an earlier one. Empty:
    // nothing is pinned.
    std::string pin_dir;
    // Load with the test clock (tcm_test_clock_ns) and attach nothing: for BPF_PROG_TEST_RUN.
    bool testing = false;
    // Testing only: which programs of the data path to load (each is verified when loaded: a
    // test that runs the XDP program alone skips the verification of the tc and sock_ops ones,
    // three fifths of a load, and under an emulated CPU most of a BPF case's time). Outside
    // testing every program loads; a program left out says so when asked for.
    static constexpr uint8_t kXdpProgram = 1, kTcProgram = 2, kSockopsProgram = 4,
                             kEveryProgram = 7;
    uint8_t programs = kEveryProgram;
    // Benchmark only: each run meters a different source (1) or destination (2) address of
    // 2^20 (tcm_bench_spread in bpf/lib/testing.h); 0: the packet's own.
    uint8_t bench_spread = 0;
    uint32_t bench_flows = 1u << 20; // over this many addresses
    // flows --top (docs/datapath.md, "flows --top at 2^20"): each pass over the flow table sets
    // the data path's heavy-hitter threshold to the bytes of the top_keep-th busiest flow it
    // read; tcm_flow_hot holds hot_capacity keys. Tests make both small.
    uint32_t top_keep = 1024;
    uint32_t hot_capacity = TCM_FLOW_HOT_ENTRIES;
};

struct SetChange; // policy_sets.hpp

struct Flow {
    tcm_flow_key key; // the flow's identity in full (tcm_flow_tuples for an IPv6 5-tuple)
    tcm_flow state;
    tcm_flow_id id{}; // its id; 0 in a flow table of before keyed by the whole key
    // Where it is: its slot in tcm_flow_slots; kInSlotsOfBefore plus its slot in the table of
    // before a resize; kInPrev / kInOld (not moved yet); or kInSpill, the table of a growth's
    // own, open (open_spill, spill_flows_of_before).
    uint32_t slot = kInPrev;
    static constexpr uint32_t kInPrev = UINT32_MAX, kInOld = UINT32_MAX - 1,
                              kInSpill = UINT32_MAX - 2,
                              kInSlotsOfBefore = 1u << 31; // tables of at most 2^27 slots
    static constexpr bool in_table(uint32_t slot) { return slot < kInSlotsOfBefore; }
};

// A flow's bytes, all colours: what flows --top orders by.
inline uint64_t flow_bytes(const tcm_flow &f) {
    return f.counters.bytes[TCM_GREEN] + f.counters.bytes[TCM_YELLOW] + f.counters.bytes[TCM_RED];
}

// One pass over the flow table (Datapath::begin_flow_pass): what it decided before the walk, and
// what the walk found. Filled and read by the Datapath only.
struct FlowPass {
    bool reclaim = false;
    uint64_t min_idle_ns = 0;
    size_t pressure_at = 0;
    uint64_t now = 0;
    uint32_t version = 0;       // of the policies when the pass began
    uint64_t threshold = ~0ull; // the heavy-hitter threshold installed for this pass
    size_t top_keep = 0;        // how many of the largest byte counts to keep
    size_t heavy_cap = 0;       // most flows at or above the threshold it keeps
    std::map<uint32_t, tcm_meter_config> configs; // of the active policies, by id
    std::map<uint32_t, uint64_t> warmups;         // their --warmup, where they have one
    std::map<uint32_t, uint64_t> quotas;          // their --quota, where they have one
    uint64_t wall = 0;                            // UTC at the pass's start
    size_t flows = 0;                             // read by the walk
    size_t old_flows = 0;                         // of them in tcm_flows_old, not reclaimed
    size_t prev_flows = 0;                        // and in tcm_flows_prev
    std::vector<Flow> reclaimable;                // full now (and idle long enough): to delete
    std::vector<Flow> full_recent;                // full now, seen recently: under pressure only
    std::vector<tcm_flow_id> heavy;               // read at or above the threshold
    bool heavy_over_cap = false;
    std::vector<uint64_t> top; // the top_keep largest byte counts read (a min-heap)
    size_t reclaimed = 0, next_reclaim = 0;
};

// Whether the heavy hitters can answer flows --top, and what they hold (status).
struct TopTracking {
    bool valid = false;
    uint64_t threshold = ~0ull; // bytes; ~0: off
    size_t candidates = 0;      // flows read at or above it by the last pass (and drained keys)
};

class Datapath {
  public:
    explicit Datapath(const DatapathOptions &options = {}); // throws std::runtime_error
    ~Datapath();
    Datapath(const Datapath &) = delete;
    Datapath &operator=(const Datapath &) = delete;

    // Replaces the whole policy set, all or nothing: everything is checked first, then the
    // inactive set is brought up to it and made active with one store. Policies whose id was
    // already active keep their buckets and counters; new ids start from zero.
    Result<void> apply(const std::vector<Policy> &policies);
    // One policy at a time, atomic too, checking and writing only what the change touches
    // (policy_sets.hpp). upsert adds the policy or replaces the one with its id (keeping its
    // tokens and counters).
    Result<void> upsert(const Policy &policy);
    Result<void> remove(uint32_t policy_id);
    std::vector<Policy> policies() const; // the active set, by id

    // True when the maps were found pinned and reused: then policies() holds the adopted set's
    // ids and names (their configs come back with the next apply).
    bool adopted() const;
    // The directory the maps are pinned in ("" without pinning).
    std::string pin_path() const;
    // Removes the pinned maps of @pin_dir (the data path stops when nothing else holds them).
    static void remove_pins(const std::string &pin_dir);

    // Checks a policy set without touching the data path (what apply would refuse).
    Result<void> check(const std::vector<Policy> &policies) const;

    std::map<uint32_t, tcm_counters> policy_counters() const; // summed over CPUs, active ids
    tcm_global_counters global_counters() const;
    std::vector<Flow> flows() const;
    tcm_flow policy_state(uint32_t policy_id) const;
    // One policy's counters summed over CPUs (safe from any thread: reads only the map).
    tcm_counters policy_counter(uint32_t policy_id) const;

    // --quota (docs/spec.md §14): what a policy's aggregate bucket used of its quota this period
    // and when the period ends (UTC); nullopt for a policy without a quota or a bucket that has
    // seen no packet. @flow: a flow's bucket instead (Flow::id).
    struct QuotaUse {
        uint64_t quota = 0, used = 0, left = 0;
        uint64_t reset_ns = 0; // ns since the Unix epoch, UTC
    };
    std::optional<QuotaUse> quota_use(uint32_t policy_id, const tcm_flow_id *flow = nullptr) const;
    // Writes what the data path's clock lacks of UTC (tcm_wall) if it moved by more than 1 ms
    // since it was last written (a step of the wall clock, a suspend): at load, and by the
    // daemon after every pass over the flow table. Not under testing (the tests' clock is theirs).
    void sync_wall_clock();
    // Under testing (replay, whatif): UTC is the test clock plus @offset_ns.
    void set_wall_offset(uint64_t offset_ns);
    uint64_t wall_offset() const; // what tcm_wall holds
    // Every bucket's use of a quota period not over (what a reboot would lose), and one written
    // back into a data path made afresh (not over a bucket's state the data path made since).
    struct QuotaSaved {
        tcm_flow_id key{};
        uint64_t used = 0, period_end = 0;
    };
    std::vector<QuotaSaved> quota_uses() const;
    // A bucket's warm-up and quota state (an aggregate's: @key.head TCM_FLOW_HEAD(id, 0)), as
    // the data path left it; nullopt before its first packet.
    std::optional<tcm_ext_state> ext_state(const tcm_flow_id &key) const;
    bool restore_quota_use(const QuotaSaved &saved);
    // Deletes the warm-up and quota state of flows that are gone, unless it still holds a
    // quota's use of a period not over (a flow made again keeps it). Returns how many.
    size_t reclaim_ext_states();

    // Deletes the flows whose buckets are full now (idle at least their fill time): such a
    // flow is indistinguishable from a new one, so no colour changes. Returns how many.
    size_t reclaim_idle_flows();
    // The same, only for flows that have seen no packet for @min_idle_ns as well (as conntrack
    // times out idle entries), unless the table holds more than @pressure_at flows: then every
    // full flow goes, idle or not. 0 for either: no such condition.
    size_t reclaim_idle_flows(uint64_t min_idle_ns, size_t pressure_at);
    // Flows in the table as of the last reclaim pass or count_flows() (a walk of the whole
    // table: 0.5 s at 2^20 flows), so that a metrics scrape never walks it.
    size_t count_flows();
    size_t counted_flows() const;

    // Both passes above in three steps, so that a caller serialising its calls with a lock
    // need not hold it for the walk: begin_flow_pass and end_flow_pass under the lock,
    // walk_flow_pass without it (it reads the flow table only), reclaim_some under it (a chunk
    // at a time). begin installs the heavy-hitter threshold (docs/datapath.md, "flows --top at
    // 2^20"); end publishes the count, the flows read at or above the threshold, and the
    // threshold of the next pass. @reclaim false: count only.
    FlowPass begin_flow_pass(bool reclaim, uint64_t min_idle_ns = 0, size_t pressure_at = 0);
    void walk_flow_pass(FlowPass &pass) const;
    // Deletes up to @max of the flows the walk found full; false once none are left, or if the
    // policies changed since the pass began (their sizes decided what is full: the rest waits
    // for the next pass).
    bool reclaim_some(FlowPass &pass, size_t max);
    void end_flow_pass(FlowPass &pass);

    // The @k flows with the most bytes (all colours) among those of the policy ids @want
    // accepts (all if empty), busiest first, ties by key; every such flow when k is 0. From
    // the heavy hitters when they can answer exactly, else from a walk of the table; @via, if
    // given, is set to "hot" or "walk". @force_walk: always walk (to compare the two).
    std::vector<Flow> top_flows(size_t k, const std::function<bool(uint32_t)> &want = {},
                                bool force_walk = false, std::string *via = nullptr) const;
    TopTracking top_tracking() const;
    // Programs other than this Datapath's that use its flow table (an older daemon's, left
    // attached): their packets are not seen by the heavy hitters, so flows --top walks.
    size_t foreign_flow_writers() const;
    // The same for any map of this data path's, by its id.
    size_t programs_using(uint32_t map_id) const;

    // After a resize (another flow capacity than the pinned table's): moves the flows of the
    // table of before that no packet has moved yet into the table, tokens and counters whole,
    // and drops the table of before (its memory back) once none is left and no program of
    // before can still make one there. Call it once this data path's programs are attached (a
    // program of before, still running, marks a flow moved when it has been: its packets are
    // coloured red meanwhile, never metered twice). Nothing to do: all zero.
    struct MoveResult {
        size_t moved = 0; // flows moved by this call
        size_t left = 0;  // flows it could not move now (a lock held, or the table full)
        bool dropped = false;
    };
    MoveResult move_flows_of_before();
    // Whether there is a table of before (a resize not finished).
    bool moving_flows_of_before() const;
    // A growth about to start (pinned maps only, no table of before left): a table for the
    // flows that come while the table is full and the growth loads (tcm_flow_spill in
    // bpf/lib/maps.h), of @capacity flows, made and handed to the programs now; grow() takes it
    // as its table of before (tcm_flows_prev), whose flows move at their next packet. False if
    // there is one already or a table of before is still there; throws if it cannot be made.
    bool open_spill(uint32_t capacity);
    // A table of before whose last flows found no room in the table (move_flows_of_before left
    // them): they go into such a table, with @room beyond them, so that the table of before can
    // go and a growth start (which takes it as open_spill's). How many; 0 if there were none or
    // a table of the growth's own is open already; throws, changing nothing, if it cannot.
    size_t spill_flows_of_before(uint32_t room);
    // Flows made in that table so far (0: none open).
    size_t spilled_flows() const;
    // Resizes the flow table of a running data path (pinned maps only): loads its programs
    // again over the same pins with a table of @capacity flows, the table of before set aside
    // as a restart with another capacity does; throws, changing nothing, if that fails. Then
    // the caller puts the new programs on every hook the old ones run on (program_ids() names
    // both), re-applies the policies (policies() holds the adopted ids and names, as after a
    // restart), calls release_previous_programs, retire_previous and move_flows_of_before.
    void grow(uint32_t capacity);
    // The same for the policy tables: loaded again with @sizes, bigger or smaller, the configs
    // and rules of both sets carried into the new tables before the new programs can run (into
    // smaller ones the active set's: the other is written whole by the next change). The
    // programs of before keep the tables of before: the caller puts the new programs on every
    // hook and lets the old ones go (as above) before a change that needs the room. Smaller
    // tables must hold the active set (its highest id, its rules at half the slots, a warm-up
    // or quota's states): else it throws, as any failure does, changing nothing.
    void resize_tables(const TableSizes &sizes);
    // This data path's table sizes, and what @policies need (their highest id, their rules at
    // half the slots, each a power of two at least as large as @from's; the maxima at most).
    TableSizes table_sizes() const;
    static TableSizes tables_needed(const std::vector<Policy> &policies, TableSizes from);
    // The tables the active set would still fit at twice its highest id and its rules, grown 4x
    // from the sizes this data path was first asked for, and its warm-up and quota states only
    // while a policy has either: where they are smaller than these tables, the room policies
    // removed left (TableSizes as now while a change is being written).
    TableSizes tables_for_shrink() const;
    // What the active set after @c needs, from this data path's tables: the cost of @c's
    // policies, not the set's (adopted pins, not yet written: the set's).
    TableSizes tables_needed(const SetChange &c) const;
    void retire_previous();
    // The flows in the table now (the data path's own count) and its capacity.
    uint64_t live_flows() const;
    uint32_t flow_capacity() const;
    // The classification cache's size (entries) for a flow table of @flow_capacity.
    static uint32_t class_cache_size(uint32_t flow_capacity);
    // The layout and count of the flow table pinned under @pin_dir, if there is one.
    static std::optional<tcm_flow_meta> pinned_flow_table(const std::string &pin_dir);
    // The data path's clock: CLOCK_MONOTONIC, or the test clock in testing mode.
    uint64_t now_ns() const;

    // --shape sockets: the tc egress interfaces to classify sockets against, the sock_ops
    // program, and per policy the paced sockets and the shaping and AQM counters.
    void set_shape_ifaces(const std::vector<uint32_t> &ifindexes);
    // The data path's program ids: this one's, and an earlier daemon's of this pin directory
    // while they may still run on a hook (how a hook's program is known to be ours by id:
    // attach.hpp). Once the hooks run this one's, release_previous_programs(@still_attached,
    // the ids the hooks run now) lets the earlier ones go; returns how many it unpinned.
    ProgramIds program_ids() const;
    bool holds_previous_programs() const;
    size_t release_previous_programs(const ProgramIds &still_attached);
    // A pinned cgroup rule map of an earlier layout, kept written while programs of before
    // may read it: let go once the root cgroup's and every hook's programs are this one's.
    void drop_cgroup_rules_of_before();
    // The counter arrays of before a growth of the policy tables (or of a start on pins of
    // another size): held, and summed into every read of the counters, until
    // fold_counters_of_before carries them into the pinned carried counts. Call that once no
    // program of before can count (every hook, the root cgroup's too, runs this data path's);
    // returns the policies carried.
    bool holds_counters_of_before() const;
    size_t fold_counters_of_before();
    int sockops_prog_fd() const;
    std::map<uint32_t, ShapeCounters> shape_counters() const;
    // Fleet policies: from now on C earns at @l's rate, up to its cap, until its deadline; the
    // lease before goes on earning up to now. A lease of nothing (FleetLease{}) empties C at the
    // next packet. One writer at a time (fleet::Agent::hold()).
    void fleet_set_lease(uint32_t policy_id, const FleetLease &l);
    FleetLocal fleet_local(uint32_t policy_id) const;

    // --match cgroup (docs/spec.md §11): scans the cgroup tree again and, if what the policies'
    // patterns cover has changed (a cgroup made or removed), writes the cgroup rules anew, with
    // a switch of sets as any change makes. Returns whether it did; nothing to do without cgroup
    // policies.
    Result<bool> follow_cgroups();
    // The path below the cgroup2 mount of cgroup @id as last scanned ("" if not known).
    std::string cgroup_path(uint64_t id) const;
    // Ingress to a cgroup's sockets: the cgroup_skb program (bpf/cgroup_in.bpf.c), loaded on
    // first use with this data path's maps (throws if it cannot be).
    int cgroup_in_prog_fd();
    // The cgroups a cgroup policy's pattern names now (the tree as last scanned), by path; for a
    // --per cgroup policy each with its bucket's counters (zero before its first packet, and
    // again once the idle reclaim has let the bucket go).
    struct CgroupBucket {
        std::string path;
        uint64_t id = 0;
        tcm_counters counters{};
    };
    std::vector<CgroupBucket> cgroup_buckets(uint32_t policy_id) const;

    void set_drop_malformed(bool drop);
    // The version of the policies (tcm_runtime.active_set): bit 0 is the active set, and every
    // switch adds 1.
    uint32_t active_set() const;
    int xdp_prog_fd() const;
    int tc_prog_fd() const;

    // Testing mode only.
    void set_clock(uint64_t now_ns);
    // Jumps the version of the policies to @version, which must name the active set (bit 0):
    // as if that many switches had happened (to test what 2^32 switches do).
    void set_version_for_test(uint32_t version);
    // Entries in the classification cache (tcm_class_cache), of every CPU.
    size_t class_cache_entries() const;
    // The cache's slots of CPU @cpu, by index; slot @slot of CPU @cpu written with @e.
    std::vector<tcm_class_cache_entry> class_cache_of_cpu(int cpu) const;
    void set_class_cache_slot(int cpu, uint32_t slot, const tcm_class_cache_entry &e);
    // Entries in tcm_flow_tuples (the IPv6 5-tuples of flows keyed by their hash); the secret
    // of that hash.
    size_t flow_tuple_entries() const;
    tcm_flow_seed flow_seed() const;
    // Map entries the last change wrote into the policy sets (updates and deletes).
    size_t last_set_writes() const;
    // The heavy-hitter threshold as the data path reads it, set directly; the keys in
    // tcm_flow_hot; its failed inserts; emptying it.
    void set_hot_threshold_for_test(uint64_t bytes);
    std::vector<tcm_flow_key> hot_keys() const;
    uint64_t hot_overflow() const;
    void clear_hot_for_test();
    struct TestRun {
        uint32_t retval = 0;
        std::vector<uint8_t> data_out;
        __sk_buff skb_out{}; // tc only
    };
    TestRun run_xdp(const std::vector<uint8_t> &frame) const;
    // The same, the frame not copied back: only the program's return value (replay, whatif).
    uint32_t run_xdp_verdict(const std::vector<uint8_t> &frame) const;
    // What the last run did: the matched policy (none if unclassified or not IP) and the
    // packet's final colour.
    struct Verdict {
        std::optional<uint32_t> policy_id;
        Color color = Color::green;
    };
    Verdict last_verdict() const;
    TestRun run_tc(const std::vector<uint8_t> &frame, const __sk_buff *skb_in = nullptr) const;
    // One frame through the cgroup ingress program (retval 1 pass, 0 drop), its socket in this
    // process's cgroup, as BPF_PROG_TEST_RUN makes it.
    TestRun run_cgroup_in(const std::vector<uint8_t> &frame);

  private:
    void load(const DatapathOptions &options);
    // Loads this data path anew with @options on its pins (grow, resize_tables; @tables: new
    // policy tables), keeping the one of before; undone if the load fails.
    void reload(const DatapathOptions &options, bool tables);
    void adopt();
    void pin_programs();
    Result<void> commit(const SetChange &c, const std::vector<Policy> *all);
    void clear_class_cache();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace tricolor
