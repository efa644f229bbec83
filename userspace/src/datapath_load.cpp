// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_load.cpp: loading the BPF data path: opening, sizing, pinning (or adopting what is
// pinned) and loading the objects, and the handles the loaded programs expose (their fds, clock,
// runtime switches).
#include "datapath_impl.hpp"
#include "tricolor/flow_sizing.hpp"
#include "tricolor/bpf_load.hpp"
#include "tricolor/text.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include <sys/random.h>
#include <unistd.h>

#include <fmt/format.h>

namespace tricolor {
namespace detail {
// The entries of the pinned map at @path: its max_entries and key size (0, 0: no such map).
std::pair<uint32_t, uint32_t> pinned_map_size(const std::string &path) {
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        return {0, 0};
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    std::pair<uint32_t, uint32_t> out{0, 0};
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
        out = {info.max_entries, info.key_size};
    close(fd);
    return out;
}

// Whether the map pinned at @path holds no entry (or is not there).
bool pinned_map_empty(const std::string &path) {
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        return true;
    std::array<uint8_t, 256> key{};
    const bool empty = bpf_map_get_next_key(fd, nullptr, key.data()) != 0;
    close(fd);
    return empty;
}
} // namespace detail
using detail::pinned_map_empty;
using detail::pinned_map_size;

namespace {

uint32_t obj_id(int fd) {
    bpf_prog_info info{}; // a map's info starts with its type and id too, but differs after
    uint32_t len = sizeof(info);
    return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
}

// A pinned map whose entries have another layout than this build's cannot be reused (libbpf
// refuses the load). Only for state that is renewed anyway: tcm_fleet's leases are written
// again at the next exchange with Redis (an older daemon's grants there are void).
void drop_pin_of_another_layout(const std::string &path, uint32_t value_size) {
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        return;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    bool other = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.value_size != value_size;
    close(fd);
    if (other)
        unlink(path.c_str());
}

} // namespace

// The classification cache's slots per CPU for a flow table of @flow_capacity: each CPU's share
// of half the capacity (RSS spreads the flows), a power of two,
// within TCM_CLASS_CACHE_MIN_ENTRIES..TCM_CLASS_CACHE_ENTRIES: about 28 bytes a flow of
// capacity in all, whatever the CPUs, an eighth of the flow table's.
uint32_t Datapath::class_cache_size(uint32_t flow_capacity) {
    const uint32_t cpus = static_cast<uint32_t>(possible_cpus());
    const uint32_t want = std::max<uint32_t>(flow_capacity / 2 / cpus, 1);
    if (want >= TCM_CLASS_CACHE_ENTRIES)
        return TCM_CLASS_CACHE_ENTRIES;
    return std::max<uint32_t>(std::bit_ceil(want), TCM_CLASS_CACHE_MIN_ENTRIES);
}

namespace {

// A pinned map at @path whose flags are not @flags: opened, its pin removed (the load pins one
// of this layout there), and its fd returned (-1: none, or of this layout).
int take_pin_of_other_flags(const std::string &path, uint32_t flags) {
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        return -1;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0 || info.map_flags == flags ||
        unlink(path.c_str()) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// Every entry of the cgroup rule map @from into @to.
void copy_cgroup_rules(int from, int to) {
    detail::for_each_entry<tcm_cgroup_rule_key, tcm_cgroup_rule>(
        from, 1, [&](const tcm_cgroup_rule_key &key, const tcm_cgroup_rule *rule) {
            if (bpf_map_update_elem(to, &key, rule, 0) != 0)
                throw std::runtime_error(fmt::format(
                    "cannot carry the pinned cgroup rules over: {}", errno_text(errno)));
        });
}

// The pins @names under @pin_path that have a pin of before (kOfBefore appended): that one put
// back in place, the one there, if any, removed.
template <typename Names>
void take_back_pins_of_before(const std::string &pin_path, Names names) {
    for (const char *name : names) {
        const std::string at = pin_path + "/" + name, prev = at + kOfBefore;
        if (access(prev.c_str(), F_OK) == 0) {
            unlink(at.c_str());
            rename(prev.c_str(), at.c_str());
        }
    }
}

// Pins of before tcm_flow_slots kept the flows in a hash map, tcm_flows: keyed by tcm_flow_id,
// it becomes tcm_flows_prev; keyed by the whole tcm_flow_key (before tcm_flow_id), it becomes
// tcm_flows_old. The data path moves their flows into the slots at their next packet
// (flow_move_old in bpf/lib/flow.h); user space lists and reclaims them there meanwhile.
// Returns each table's capacity (0: none) and sets @moving (TCM_MOVING_*).
std::pair<uint32_t, uint32_t> set_aside_old_flow_tables(const std::string &pin_path,
                                                        uint8_t &moving) {
    const std::string path = pin_path + "/tcm_flows", old = pin_path + "/tcm_flows_old",
                      prev = pin_path + "/tcm_flows_prev";
    if (auto [entries, key_size] = pinned_map_size(path); entries) {
        const std::string &to = key_size == sizeof(tcm_flow_key) ? old : prev;
        if (std::filesystem::exists(to))
            throw std::runtime_error(fmt::format(
                "cannot move the flow table of before {} to {}: that is there too (remove the "
                "pins to start afresh)",
                path, to));
        if (rename(path.c_str(), to.c_str()) != 0)
            throw std::runtime_error(fmt::format(
                "cannot move the flow table of before {} to {}: {}", path, to, errno_text(errno)));
    }
    const uint32_t n_old = pinned_map_size(old).first, n_prev = pinned_map_size(prev).first;
    moving = (n_old ? TCM_MOVING_OLD : 0) | (n_prev ? TCM_MOVING_PREV : 0);
    return {n_old, n_prev};
}

// The flow table's layout pinned at @path (a tcm_flow_meta), if there is one.
std::optional<tcm_flow_meta> pinned_flow_layout(const std::string &path) {
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        return std::nullopt;
    tcm_flow_meta m{};
    uint32_t zero = 0;
    int err = bpf_map_lookup_elem(fd, &zero, &m);
    close(fd);
    if (err != 0 || m.slots == 0)
        return std::nullopt;
    return m;
}

// Another capacity than the pinned flow table's (--flows changed): the table becomes the table
// of before (its pins, and its tuples', renamed *_prev) and a new one is made; its flows move
// into the new one at their next packet (flow_prev_scan in bpf/lib/flow.h) or when user space
// moves them (Datapath::move_flows_of_before), tokens and counters whole. Refused, before any
// pin is touched, if the table holds more flows than @capacity or an earlier move is not over.
// Returns the layout of the table of before if there is one now (and sets TCM_MOVING_SLOTS).
std::optional<tcm_flow_meta> set_aside_resized_table(const std::string &pin_path, uint32_t capacity,
                                                     uint8_t &moving) {
    const std::string meta = pin_path + "/tcm_flow_meta";
    auto now = pinned_flow_layout(meta);
    auto prev = pinned_flow_layout(meta + kOfBefore);
    if (now && now->capacity != capacity) {
        // (Flows of a hash of before, tcm_flows_prev, may move meanwhile: a flow is in one
        // table of before or the other, and flow_move_old looks in both.)
        if (prev || (moving & ~TCM_MOVING_PREV))
            throw std::runtime_error(fmt::format(
                "cannot resize the flow table pinned in {} from {} to {} flows: the flows of a "
                "table of before still move into it (start with --flows {} until they have: "
                "moments after the start)",
                pin_path, now->capacity, capacity, now->capacity));
        if (now->live > capacity)
            throw std::runtime_error(fmt::format(
                "cannot resize the flow table pinned in {} from {} to {} flows: it holds {} "
                "(--max-flows must be at least that)",
                pin_path, now->capacity, capacity, now->live));
        for (const char *name : kFlowTablePins) {
            const std::string from = pin_path + "/" + name, to = from + kOfBefore;
            if (rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT)
                throw std::runtime_error(fmt::format("cannot move the flow table of before {} to "
                                                     "{}: {}",
                                                     from, to, errno_text(errno)));
        }
        prev = now;
    }
    if (prev)
        moving |= TCM_MOVING_SLOTS;
    return prev;
}

// The flow table's layout for @capacity flows: slots for it at four fifths full
// (TCM_SLOT_LOAD_NUM / TCM_SLOT_LOAD_DEN), any number of them, and a new secret; or, if the table
// is pinned at @pin_path, what it was made with (a table of before 2026-11-30: a power of two of
// slots, twice its capacity at least, which TCM_SLOT_HOME reads as it was written).
tcm_flow_meta flow_table_layout(const std::string &pin_path, uint32_t capacity) {
    if (!pin_path.empty())
        if (auto m = pinned_flow_layout(pin_path + "/tcm_flow_meta"))
            return *m; // set_aside_resized_table made sure it is @capacity's
    tcm_flow_meta m{};
    if (capacity > (1u << 30))
        throw std::runtime_error(
            fmt::format("a flow table of {} flows is more than {}", capacity, 1u << 30));
    m.capacity = capacity;
    m.slots = flow_slots_for(capacity);
    if (getrandom(m.seed, sizeof(m.seed), 0) != static_cast<ssize_t>(sizeof(m.seed)))
        throw std::runtime_error(
            fmt::format("cannot draw the flow table's secret: {}", errno_text(errno)));
    return m;
}

// Pins of before tcm_rule_table held the classifier's rules in a hash map, tcm_rules, of the
// same keys and values: its rules (both sets) go into the table before this program is attached,
// so that it classifies as the program it replaces did, and the pin goes.
void carry_over_rule_hash(const std::string &path, RuleTable &table) {
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        return;
    size_t lost = 0;
    detail::for_each_entry<tcm_rule_key, tcm_rule>(
        fd, 1, [&](const tcm_rule_key &key, const tcm_rule *rule) {
            if (table.put(key, *rule) != 0)
                ++lost;
        });
    close(fd);
    if (lost)
        throw std::runtime_error(fmt::format(
            "cannot carry {} classifier rules of {} over into tcm_rule_table; it is left as it "
            "was (remove the pins to start afresh)",
            lost, path));
    unlink(path.c_str());
}

// The secret of the IPv6 5-tuple's flow key (tcm_flow_hash6), drawn once: a map just created
// holds zeros; one adopted from pins keeps the secret its flows were keyed with. Before any
// program runs, so no flow is keyed with zeros.
void draw_flow_seed(int fd) {
    uint32_t zero = 0;
    tcm_flow_seed seed{};
    if (bpf_map_lookup_elem(fd, &zero, &seed) != 0)
        throw std::runtime_error(fmt::format("cannot read tcm_flow_seed: {}", errno_text(errno)));
    if (std::ranges::any_of(seed.k, [](uint32_t w) { return w != 0; }))
        return;
    if (getrandom(seed.k, sizeof(seed.k), 0) != static_cast<ssize_t>(sizeof(seed.k)) ||
        bpf_map_update_elem(fd, &zero, &seed, 0) != 0)
        throw std::runtime_error(fmt::format("cannot set tcm_flow_seed: {}", errno_text(errno)));
}

} // namespace

// Maps the flow table and its meta, writing @layout there if the meta is new (all zero: just
// created, before any program runs).
tcm_flow_slot *Datapath::Impl::map_slots(int map_fd, uint32_t nslots, size_t &bytes,
                                         const char *what) {
    const size_t page = sysconf(_SC_PAGESIZE);
    bytes = (sizeof(tcm_flow_slot) * nslots + page - 1) / page * page;
    void *mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
    if (mem == MAP_FAILED)
        throw std::runtime_error(fmt::format("cannot map {}: {}", what, errno_text(errno)));
    return static_cast<tcm_flow_slot *>(mem);
}

void Datapath::Impl::map_flow_table(const tcm_flow_meta &layout) {
    slots = map_slots(fd(skel->maps.tcm_flow_slots), layout.slots, slots_bytes, "the flow table");
    void *mem = mmap(nullptr, meta_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd(skel->maps.tcm_flow_meta), 0);
    if (mem == MAP_FAILED)
        throw std::runtime_error(fmt::format("cannot map tcm_flow_meta: {}", errno_text(errno)));
    meta = static_cast<tcm_flow_meta *>(mem);
    if (meta->slots == 0) {
        meta->capacity = layout.capacity;
        std::memcpy(meta->seed, layout.seed, sizeof(layout.seed));
        __atomic_store_n(&meta->slots, layout.slots, __ATOMIC_RELEASE);
    } else if (meta->slots != layout.slots ||
               std::memcmp(meta->seed, layout.seed, sizeof(layout.seed)) != 0) {
        throw std::runtime_error("the pinned flow table changed while it was being adopted");
    }
}

Datapath::Datapath(const DatapathOptions &o) : impl_(std::make_unique<Impl>()) {
    impl_->least_tables = o.tables;
    load(o);
}

// Another capacity for the flow table while this data path runs: a data path loaded anew on the
// same pins (what a restart with another --flows does), the one of before kept, its programs
// still where they run, until retire_previous. Undone, the pins as they were, if the load fails.
void Datapath::grow(uint32_t capacity) {
    DatapathOptions o = impl_->options;
    o.flow_capacity = capacity;
    reload(o, false);
}

// Other policy tables: the same, with new configs and classifier tables (their pins of before
// removed, the maps kept by fd until load() has carried their contents over). Smaller ones
// must hold the active set: what is beyond them is only the other set's, which the next change
// writes whole (PolicySets, known: false), and no packet reads it meanwhile.
void Datapath::resize_tables(const TableSizes &sizes) {
    const TableSizes now = impl_->tables;
    if (sizes == now)
        return;
    const auto &active = impl_->active;
    if (sizes.policy_slots < now.policy_slots || sizes.rule_slots < now.rule_slots ||
        sizes.ext_states < now.ext_states) {
        if (!impl_->in_sync)
            throw std::runtime_error(
                "the policy tables cannot shrink before the active set is written whole");
        if (!active.empty() && active.rbegin()->first >= sizes.policy_slots)
            throw std::runtime_error(
                fmt::format("the policy tables cannot shrink to {} policies: policy id {} is held",
                            sizes.policy_slots, active.rbegin()->first));
        if (const size_t rules = impl_->sets->entries(); rules > sizes.rule_slots / 2)
            throw std::runtime_error(fmt::format(
                "the policy tables cannot shrink to {} classifier entries: the set has {}",
                sizes.rule_slots / 2, rules));
        if (!sizes.ext_states && now.ext_states)
            for (const auto &[id, p] : active)
                if (p.meter.has_warmup_or_quota())
                    throw std::runtime_error(fmt::format(
                        "the warm-up and quota states cannot go: policy {} has a warm-up or quota",
                        p.name));
    }
    DatapathOptions o = impl_->options;
    o.tables = sizes;
    o.flow_capacity = impl_->meta->capacity;
    reload(o, true);
}

void Datapath::reload(const DatapathOptions &o, bool tables) {
    if (impl_->pin_path.empty())
        throw std::runtime_error("the data path's tables can be resized only with pinned maps");
    const uint64_t clock = impl_->testing ? impl_->skel->bss->tcm_test_clock_ns : 0;
    auto before = std::move(impl_);
    before->retired.reset(); // one data path of before at most
    impl_ = std::make_unique<Impl>();
    impl_->least_tables = before->least_tables;
    // Smaller tables without the warm-up and quota states (resize_tables found no policy with
    // either): the states of policies gone lose their pin, which load keeps if it holds anything.
    impl_->drop_ext_states = tables && before->tables.ext_states && !o.tables.ext_states;
    const std::string pins = before->pin_path;
    if (tables) {
        impl_->tables_of_before =
            Impl::TablesOfBefore{dup(before->fd(before->skel->maps.tcm_policy_cfg)),
                                 dup(before->fd(before->skel->maps.tcm_rule_table)),
                                 before->tables.policy_slots, before->tables.rule_slots};
        // Set aside, not unpinned: a daemon killed before the new tables are whole takes these
        // back at its start (load), as the undo below does.
        for (const char *name : kPolicyTablePins) {
            const std::string at = pins + "/" + name, prev = at + kOfBefore;
            unlink(prev.c_str());
            rename(at.c_str(), prev.c_str());
        }
    }
    try {
        load(o);
    } catch (...) {
        const bool aside = impl_->prev_layout.has_value(),
                   counters_aside = impl_->counters_set_aside,
                   spill_aside = before->spill_fd >= 0 && (impl_->flows_moving & TCM_MOVING_PREV) &&
                                 !(before->flows_moving & TCM_MOVING_PREV);
        impl_ = std::move(before);
        // The tables of before go back to their pins; the table set aside too (the pins the
        // failed load made, if any, go).
        if (tables)
            take_back_pins_of_before(pins, kPolicyTablePins);
        if (counters_aside)
            take_back_pins_of_before(pins, kCounterPins);
        // The growth's table, set aside as tcm_flows_prev by the load: its pin back, for the
        // next try (its programs go on making flows there meanwhile).
        if (spill_aside)
            rename((pins + "/tcm_flows_prev").c_str(), (pins + "/" + kSpillPin).c_str());
        if (aside && !impl_->prev_layout)
            take_back_pins_of_before(pins, kFlowTablePins);
        throw;
    }
    if (impl_->testing)
        impl_->skel->bss->tcm_test_clock_ns = clock;
    impl_->retired = std::move(before);
}

TableSizes Datapath::table_sizes() const {
    return impl_->tables;
}

namespace {
// @from grown 4x at a time until it holds ids below @ids and @rules entries (at most the maxima),
// with the warm-up and quota states if @ext.
TableSizes grown_for(TableSizes from, uint32_t ids, size_t rules, bool ext) {
    from.ext_states = from.ext_states || ext;
    while (from.policy_slots < ids && from.policy_slots < TCM_MAX_POLICIES)
        from.policy_slots = std::min<uint32_t>(from.policy_slots * 4, TCM_MAX_POLICIES);
    while (from.rule_slots / 2 < rules && from.rule_slots < TCM_RULE_SLOTS)
        from.rule_slots = std::min<uint32_t>(from.rule_slots * 4, TCM_RULE_SLOTS);
    return from;
}
} // namespace

TableSizes Datapath::tables_needed(const std::vector<Policy> &policies, TableSizes from) {
    uint32_t ids = 0;
    size_t rules = 0;
    bool ext = false;
    for (const auto &p : policies) {
        ids = std::max(ids, p.id + 1);
        rules += rule_entries(p, 0, 0).size();
        ext = ext || p.meter.has_warmup_or_quota();
    }
    return grown_for(from, ids, rules, ext);
}

TableSizes Datapath::tables_needed(const SetChange &c) const {
    const auto &active = impl_->active;
    if (!impl_->in_sync) { // the next change writes the set whole
        auto set = policies();
        std::erase_if(set, [&](const Policy &p) {
            return std::ranges::find(c.removes, p.id) != c.removes.end() ||
                   std::ranges::find(c.upserts, p.id, &Policy::id) != c.upserts.end();
        });
        set.insert(set.end(), c.upserts.begin(), c.upserts.end());
        return tables_needed(set, impl_->tables);
    }
    uint32_t ids = active.empty() ? 0 : active.rbegin()->first + 1;
    long rules = static_cast<long>(impl_->sets->entries());
    auto drop = [&](uint32_t id) {
        if (auto it = active.find(id); it != active.end())
            rules -= static_cast<long>(rule_entries(it->second, 0, 0).size());
    };
    for (uint32_t id : c.removes)
        drop(id);
    bool ext = false;
    for (const auto &p : c.upserts) {
        drop(p.id);
        rules += static_cast<long>(rule_entries(p, 0, 0).size());
        ids = std::max(ids, p.id + 1);
        ext = ext || p.meter.has_warmup_or_quota();
    }
    return grown_for(impl_->tables, ids, static_cast<size_t>(std::max(rules, 0L)), ext);
}

TableSizes Datapath::tables_for_shrink() const {
    const TableSizes now = impl_->tables;
    if (!impl_->in_sync)
        return now;
    const auto &active = impl_->active;
    const uint32_t ids = active.empty() ? 0 : active.rbegin()->first + 1;
    const bool ext = std::ranges::any_of(
        active, [](const auto &e) { return e.second.meter.has_warmup_or_quota(); });
    TableSizes least = impl_->least_tables;
    least.ext_states = false;
    const TableSizes fit = grown_for(least, 2 * ids, 2 * impl_->sets->entries(), ext);
    return {std::min(now.policy_slots, fit.policy_slots), std::min(now.rule_slots, fit.rule_slots),
            now.ext_states && ext};
}

// The configs and rules of the tables of before (both sets, as they were; into smaller tables
// the active set's, which resize_tables found to fit), at their places in this data path's
// tables: a config's parent is an index in its set's part of the table.
void Datapath::Impl::carry_tables_of_before() {
    auto &tb = *tables_of_before;
    const int cfg_fd = fd(skel->maps.tcm_policy_cfg);
    const uint32_t slots = tables.policy_slots;
    const bool smaller = slots < tb.policy_slots || tables.rule_slots < tb.rule_slots;
    const uint32_t active = runtime->active_set & 1;
    const tcm_policy none{};
    for (uint32_t set = 0; set < TCM_NR_SETS; ++set)
        for (uint32_t slot = 0; slot < std::min(slots, tb.policy_slots); ++slot) {
            if (smaller && set != active)
                break;
            uint32_t from = set * tb.policy_slots + slot, to = set * slots + slot;
            tcm_policy cfg{};
            if (bpf_map_lookup_elem(tb.cfg_fd, &from, &cfg) != 0)
                throw std::runtime_error(
                    fmt::format("cannot read the policy configs of before: {}", errno_text(errno)));
            if (std::memcmp(&cfg, &none, sizeof(cfg)) == 0)
                continue;
            if (cfg.parent)
                cfg.parent = static_cast<__u16>(cfg.parent - set * tb.policy_slots + set * slots);
            if (bpf_map_update_elem(cfg_fd, &to, &cfg, 0) != 0)
                throw std::runtime_error(
                    fmt::format("cannot carry the policy configs over: {}", errno_text(errno)));
        }
    {
        RuleTable old(tb.rules_fd);
        for (uint32_t set = 0; set < TCM_NR_SETS; ++set) {
            if (smaller && set != active)
                continue;
            for (const auto &k : old.keys(set))
                if (auto r = old.find(k); r && rules->put(k, *r) != 0)
                    throw std::runtime_error("the classifier's rules of before do not fit the "
                                             "table");
        }
    }
    close(tb.cfg_fd);
    close(tb.rules_fd);
    tables_of_before.reset();
    // The new tables are whole: the pins of before go (the maps stay while programs of before
    // run on them).
    for (const char *name : kPolicyTablePins)
        unlink((pin_path + "/" + name + kOfBefore).c_str());
}

void Datapath::retire_previous() {
    impl_->retired.reset();
}

std::optional<tcm_flow_meta> Datapath::pinned_flow_table(const std::string &pin_dir) {
    return pinned_flow_layout(fmt::format("{}/abi{}/tcm_flow_meta", pin_dir, TCM_ABI_VERSION));
}

uint64_t Datapath::live_flows() const {
    return __atomic_load_n(&impl_->meta->live, __ATOMIC_RELAXED);
}

uint32_t Datapath::flow_capacity() const {
    return impl_->meta->capacity;
}

void Datapath::load(const DatapathOptions &o) {
    impl_->options = o;
    impl_->testing = o.testing;
    if (o.programs != DatapathOptions::kEveryProgram && !o.testing)
        throw std::logic_error("DatapathOptions::programs: every program loads outside testing");
    impl_->skel = tricolor_dp::open();
    if (!impl_->skel)
        throw std::runtime_error(
            fmt::format("cannot open the BPF data path: {}", errno_text(errno)));
    if (o.flow_capacity == 0)
        throw std::runtime_error("the flow table needs a capacity of at least 1");
    if (o.hot_capacity == 0)
        throw std::runtime_error("the heavy-hitter map needs a capacity of at least 1");
    if (int err = bpf_map__set_max_entries(impl_->skel->maps.tcm_flow_hot, o.hot_capacity); err < 0)
        throw std::runtime_error(fmt::format("cannot size the heavy-hitter map to {}: {}",
                                             o.hot_capacity, errno_text(err)));
    const uint32_t cache = class_cache_size(o.flow_capacity);
    if (int err = bpf_map__set_max_entries(impl_->skel->maps.tcm_class_cache, cache); err < 0)
        throw std::runtime_error(
            fmt::format("cannot size the classification cache to {}: {}", cache, errno_text(err)));
    impl_->skel->rodata->tcm_class_cache_slots = cache;
    impl_->top_keep = o.top_keep;
    impl_->hot_capacity = o.hot_capacity;
    bool ext = o.tables.ext_states;
    if (!o.pin_dir.empty()) {
        namespace fs = std::filesystem;
        impl_->pin_path = fmt::format("{}/abi{}", o.pin_dir, TCM_ABI_VERSION);
        std::error_code ec;
        fs::create_directories(impl_->pin_path, ec);
        if (ec)
            throw std::runtime_error(fmt::format("cannot create the pin directory {}: {}",
                                                 impl_->pin_path, ec.message()));
        impl_->adopted = fs::exists(impl_->pin_path + "/tcm_runtime");
        // Policy tables set aside by a growth that did not finish (the daemon killed while it
        // carried them over): they are what the pins held; the new ones, if any, go.
        // The counter arrays set aside with them go back too: no program counted into the
        // new ones, which the growth attaches only after the load.
        if (!impl_->tables_of_before) {
            if (access((impl_->pin_path + "/" + kPolicyTablePins[0] + kOfBefore).c_str(), F_OK) ==
                0)
                take_back_pins_of_before(impl_->pin_path, kCounterPins);
            take_back_pins_of_before(impl_->pin_path, kPolicyTablePins);
        }
        // The warm-up and quota states: pinned once made; pins of an earlier daemon that made
        // them whole for every host are kept if anything could be using them (a state, or a
        // policy with a warm-up or quota in either set), else dropped (64 MiB for nothing).
        const std::string states = impl_->pin_path + "/tcm_meter_ext";
        if (!ext && access(states.c_str(), F_OK) == 0) {
            if (impl_->drop_ext_states ||
                (pinned_map_empty(states) && pinned_map_empty(impl_->pin_path + "/tcm_policy_ext")))
                unlink(states.c_str());
            else
                ext = true;
        }
        auto [old, prev] = set_aside_old_flow_tables(impl_->pin_path, impl_->flows_moving);
        impl_->prev_layout =
            set_aside_resized_table(impl_->pin_path, o.flow_capacity, impl_->flows_moving);
        if (old)
            if (int err = bpf_map__set_max_entries(impl_->skel->maps.tcm_flows_old, old); err < 0)
                throw std::runtime_error(
                    fmt::format("cannot size tcm_flows_old to {}: {}", old, errno_text(err)));
        if (prev)
            if (int err = bpf_map__set_max_entries(impl_->skel->maps.tcm_flows_prev, prev); err < 0)
                throw std::runtime_error(
                    fmt::format("cannot size tcm_flows_prev to {}: {}", prev, errno_text(err)));
        bpf_map *m;
        bpf_object__for_each_map(m, impl_->skel->obj) {
            // A cache (and its doorkeeper) is not state: a new program starts with an empty
            // one. The heavy hitters go with this program's threshold (in .data, not pinned
            // either); the hot key, the tuple key, the slot key and the cgroup bucket are
            // scratch.
            if (bpf_map__is_internal(m) || m == impl_->skel->maps.tcm_class_cache ||
                m == impl_->skel->maps.tcm_class_door || m == impl_->skel->maps.tcm_flow_hot ||
                m == impl_->skel->maps.tcm_hot_key || m == impl_->skel->maps.tcm_tuple_key ||
                m == impl_->skel->maps.tcm_slot_key || m == impl_->skel->maps.tcm_cgroup_bucket ||
                m == impl_->skel->maps.tcm_ext_scratch ||
                m == impl_->skel->maps.tcm_flow_slots_prev ||
                (m == impl_->skel->maps.tcm_meter_ext && !ext) ||
                (m == impl_->skel->maps.tcm_flows_old && !(impl_->flows_moving & TCM_MOVING_OLD)) ||
                (m == impl_->skel->maps.tcm_flows_prev && !(impl_->flows_moving & TCM_MOVING_PREV)))
                continue;
            std::string path = impl_->pin_path + "/" + bpf_map__name(m);
            if (m == impl_->skel->maps.tcm_fleet)
                drop_pin_of_another_layout(path, sizeof(tcm_fleet_lease));
            if (m == impl_->skel->maps.tcm_cgroup_rules)
                impl_->cgroup_rules_of_before =
                    take_pin_of_other_flags(path, bpf_map__map_flags(m));
            if (int err = bpf_map__set_pin_path(m, path.c_str()); err < 0)
                throw std::runtime_error(fmt::format("cannot pin map {} at {}: {}",
                                                     bpf_map__name(m), path, errno_text(err)));
        }
    }
    // The policy tables: as pinned, else as asked.
    TableSizes t = o.tables;
    t.ext_states = ext;
    if (int err =
            bpf_map__set_max_entries(impl_->skel->maps.tcm_meter_ext, ext ? TCM_EXT_STATES : 1);
        err < 0)
        throw std::runtime_error(
            fmt::format("cannot size the warm-up and quota states: {}", errno_text(err)));
    if (!impl_->pin_path.empty()) {
        if (auto n = pinned_map_size(impl_->pin_path + "/tcm_policy_cfg").first)
            t.policy_slots = n / TCM_NR_SETS;
        if (auto n = pinned_map_size(impl_->pin_path + "/tcm_rule_table").first)
            t.rule_slots = n / TCM_NR_SETS;
    }
    auto power_of_two_in = [](uint32_t v, uint32_t lo, uint32_t hi) {
        return v >= lo && v <= hi && (v & (v - 1)) == 0;
    };
    if (!power_of_two_in(t.policy_slots, 1, TCM_MAX_POLICIES) ||
        !power_of_two_in(t.rule_slots, TCM_RULE_PROBES, TCM_RULE_SLOTS))
        throw std::runtime_error(fmt::format(
            "policy tables of {} configs and {} classifier slots a set: each a power of two, at "
            "most {} and {}",
            t.policy_slots, t.rule_slots, TCM_MAX_POLICIES, TCM_RULE_SLOTS));
    if (bpf_map__set_max_entries(impl_->skel->maps.tcm_policy_cfg, TCM_NR_SETS * t.policy_slots) <
            0 ||
        bpf_map__set_max_entries(impl_->skel->maps.tcm_rule_table, TCM_NR_SETS * t.rule_slots) < 0)
        throw std::runtime_error("cannot size the policy tables");
    detail::set_table_sizes(impl_->skel->rodata, t);
    impl_->tables = t;
    impl_->open_counter_arrays(t.policy_slots);
    // The flow table: sized, and its layout in .rodata, before the load.
    const tcm_flow_meta layout = flow_table_layout(impl_->pin_path, o.flow_capacity);
    if (int err = bpf_map__set_max_entries(impl_->skel->maps.tcm_flow_slots, layout.slots); err < 0)
        throw std::runtime_error(fmt::format("cannot size the flow table to {} slots: {}",
                                             layout.slots, errno_text(err)));
    if (int err = bpf_map__set_max_entries(impl_->skel->maps.tcm_flow_tuples, o.flow_capacity);
        err < 0)
        throw std::runtime_error(
            fmt::format("cannot size the flow table to {}: {}", o.flow_capacity, errno_text(err)));
    impl_->skel->rodata->tcm_test_clock = o.testing ? 1 : 0;
    bpf_program__set_autoload(impl_->skel->progs.tricolor_xdp,
                              o.programs & DatapathOptions::kXdpProgram);
    bpf_program__set_autoload(impl_->skel->progs.tricolor_tc,
                              o.programs & DatapathOptions::kTcProgram);
    bpf_program__set_autoload(impl_->skel->progs.tricolor_sockops,
                              o.programs & DatapathOptions::kSockopsProgram);
    impl_->skel->rodata->tcm_bench_spread = o.bench_spread;
    impl_->skel->rodata->tcm_bench_flows = o.bench_flows;
    detail::set_flow_layout(impl_->skel->rodata, layout, impl_->flows_moving, impl_->prev_layout);
    if (impl_->prev_layout)
        impl_->open_table_of_before();
    if (auto problem = kernel_support_problem(); !problem.empty())
        throw std::runtime_error("cannot load the BPF data path: " + problem);
    if (auto loaded = load_bpf("the BPF data path", [&] { return tricolor_dp::load(impl_->skel); });
        !loaded) {
        std::string hint;
        if (impl_->adopted && loaded.error().find("Permission denied") != std::string::npos)
            hint = fmt::format(" (the maps pinned in {} are not this user's (uid {}): a daemon "
                               "run as another user pinned them; chown -R them to this one)",
                               impl_->pin_path, geteuid());
        else if (impl_->adopted)
            hint = fmt::format(" (the maps pinned in {} do not match this build: a different "
                               "flow capacity? remove them to start afresh)",
                               impl_->pin_path);
        throw std::runtime_error(loaded.error() + hint);
    }
    draw_flow_seed(impl_->fd(impl_->skel->maps.tcm_flow_seed));
    sync_wall_clock();
    impl_->map_flow_table(layout);
    if (impl_->prev_layout)
        impl_->hand_over_table_of_before();
    void *mem = mmap(nullptr, sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, MAP_SHARED,
                     impl_->fd(impl_->skel->maps.tcm_runtime), 0);
    if (mem == MAP_FAILED)
        throw std::runtime_error(fmt::format("cannot map tcm_runtime: {}", errno_text(errno)));
    impl_->runtime = static_cast<tcm_runtime *>(mem);
    mem = mmap(nullptr, Impl::fleet_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED,
               impl_->fd(impl_->skel->maps.tcm_fleet), 0);
    if (mem == MAP_FAILED)
        throw std::runtime_error(fmt::format("cannot map tcm_fleet: {}", errno_text(errno)));
    impl_->fleet = static_cast<tcm_fleet_lease *>(mem);
    auto *maps = &impl_->skel->maps;
    if (impl_->cgroup_rules_of_before >= 0)
        copy_cgroup_rules(impl_->cgroup_rules_of_before, impl_->fd(maps->tcm_cgroup_rules));
    impl_->rules = std::make_unique<RuleTable>(impl_->fd(maps->tcm_rule_table));
    if (impl_->adopted)
        carry_over_rule_hash(impl_->pin_path + "/tcm_rules", *impl_->rules);
    if (impl_->tables_of_before)
        impl_->carry_tables_of_before();
    impl_->sets = std::make_unique<PolicySets>(
        PolicySets::Maps{impl_->fd(maps->tcm_policy_cfg), impl_->fd(maps->tcm_masks),
                         impl_->fd(maps->tcm_sets), impl_->rules.get()},
        !impl_->adopted);
    {
        bpf_map_info info{};
        uint32_t len = sizeof(info);
        if (bpf_obj_get_info_by_fd(impl_->fd(impl_->skel->maps.tcm_flow_slots), &info, &len) == 0)
            impl_->flows_map_id = info.id;
        bpf_program *prog;
        bpf_object__for_each_program(prog, impl_->skel->obj) {
            if (int fd = bpf_program__fd(prog); fd >= 0)
                impl_->own_progs.push_back(obj_id(fd));
        }
    }
    if (!impl_->pin_path.empty())
        pin_programs();
    if (impl_->adopted) {
        impl_->cgroup_rules_known[0] = impl_->cgroup_rules_known[1] = false;
        adopt();
    }
}

// The XDP and tc programs pinned under progs/, by id: the next daemon of this pin directory
// knows what an earlier one left on a hook by its id (the kernel names another process's
// program only to CAP_SYS_ADMIN, which a daemon run as a user of its own does not hold). The
// pins an earlier daemon left are kept (their programs may still run where an attach fails)
// until release_previous_programs.
void Datapath::pin_programs() {
    namespace fs = std::filesystem;
    std::error_code ec;
    const std::string dir = impl_->pin_path + "/progs";
    fs::create_directories(dir, ec);
    for (const auto &e : fs::directory_iterator(dir, ec)) {
        int fd = bpf_obj_get(e.path().c_str());
        if (fd < 0)
            continue;
        uint32_t id = obj_id(fd);
        close(fd);
        if (std::ranges::find(impl_->own_progs, id) == impl_->own_progs.end())
            impl_->previous_progs.emplace_back(id, e.path().string());
    }
    for (auto [name, prog] : {std::pair{"xdp", impl_->skel->progs.tricolor_xdp},
                              std::pair{"tc", impl_->skel->progs.tricolor_tc}}) {
        int fd = bpf_program__fd(prog);
        if (fd < 0)
            continue; // not loaded (DatapathOptions::programs, testing only)
        std::string path = fmt::format("{}/{}_{}", dir, name, obj_id(fd));
        if (int err = bpf_obj_pin(fd, path.c_str()); err < 0 && err != -EEXIST)
            throw std::runtime_error(
                fmt::format("cannot pin the {} program at {}: {}", name, path, errno_text(err)));
    }
}

ProgramIds Datapath::program_ids() const {
    ProgramIds ids = impl_->own_progs;
    for (const auto &[id, path] : impl_->previous_progs)
        ids.push_back(id);
    return ids;
}

void Datapath::drop_cgroup_rules_of_before() {
    if (impl_->cgroup_rules_of_before < 0 || holds_previous_programs())
        return;
    close(impl_->cgroup_rules_of_before);
    impl_->cgroup_rules_of_before = -1;
}

bool Datapath::holds_previous_programs() const {
    return !impl_->previous_progs.empty();
}

size_t Datapath::release_previous_programs(const ProgramIds &still_attached) {
    size_t n = 0;
    std::erase_if(impl_->previous_progs, [&](const auto &p) {
        if (std::ranges::find(still_attached, p.first) != still_attached.end())
            return false;
        n += unlink(p.second.c_str()) == 0;
        return true;
    });
    return n;
}

void Datapath::adopt() {
    impl_->in_sync = false;
    impl_->flows_unclean = true;
    impl_->ext_unclean = true;
    // The active set's ids and names: apply() keeps their buckets and counters.
    uint32_t set = impl_->runtime->active_set & 1;
    tcm_set_info info{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_sets), &set, &info) != 0)
        return;
    // Pins of before tcm_mask.id keyed each mask's rules by its position and left the field 0:
    // name each mask by its position, which the program running now ignores, so that this
    // program reads the set right once it is attached, before anything is applied.
    int masks_fd = impl_->fd(impl_->skel->maps.tcm_masks);
    std::vector<std::pair<uint32_t, tcm_mask>> masks;
    for (uint32_t i = 0; i < info.n_masks && i < TCM_MAX_MASKS; ++i) {
        uint32_t idx = set * TCM_MAX_MASKS + i;
        tcm_mask m{};
        if (bpf_map_lookup_elem(masks_fd, &idx, &m) == 0)
            masks.emplace_back(idx, m);
    }
    if (masks.size() > 1 && std::ranges::all_of(masks, [](auto &m) { return m.second.id == 0; }))
        for (auto &[idx, m] : masks) {
            m.id = idx % TCM_MAX_MASKS;
            bpf_map_update_elem(masks_fd, &idx, &m, 0);
        }
    for (uint32_t slot = 0; slot < info.n_policies && slot < impl_->tables.policy_slots; ++slot) {
        uint32_t idx = set * impl_->tables.policy_slots + slot;
        tcm_policy cfg{};
        // A slot is a policy's id: the slots between hold none (a zero config, no name).
        if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_cfg), &idx, &cfg) != 0 ||
            cfg.name[0] == 0)
            continue;
        Policy p;
        p.id = cfg.policy_id;
        p.name.assign(cfg.name, strnlen(cfg.name, sizeof(cfg.name)));
        impl_->active[p.id] = p;
    }
}

bool Datapath::adopted() const {
    return impl_->adopted;
}
std::string Datapath::pin_path() const {
    return impl_->pin_path;
}

void Datapath::remove_pins(const std::string &pin_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::remove_all(fmt::format("{}/abi{}", pin_dir, TCM_ABI_VERSION), ec);
    fs::remove(pin_dir, ec); // only if empty
}

Datapath::~Datapath() = default;

void Datapath::set_drop_malformed(bool drop) {
    __atomic_store_n(&impl_->runtime->drop_malformed, drop ? 1u : 0u, __ATOMIC_RELEASE);
}

uint32_t Datapath::active_set() const {
    return impl_->runtime->active_set;
}
int Datapath::xdp_prog_fd() const {
    return impl_->prog_fd(impl_->skel->progs.tricolor_xdp, "XDP");
}
int Datapath::tc_prog_fd() const {
    return impl_->prog_fd(impl_->skel->progs.tricolor_tc, "tc");
}

uint64_t Datapath::now_ns() const {
    if (impl_->testing)
        return impl_->skel->bss->tcm_test_clock_ns;
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts); // what bpf_ktime_get_ns() reads
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

} // namespace tricolor
