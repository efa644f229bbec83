// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath.cpp: the data path facade: loads and pins the BPF objects, writes a compiled policy
// set (rules.hpp) into the inactive half of the maps and flips it active with one store, and
// reads counters, flows and state back.
#include "tricolor/datapath.hpp"
#include "tricolor/policy_sets.hpp"
#include "tricolor/rules.hpp"
#include "tricolor/bpf_load.hpp"
#include "tricolor/hierarchy.hpp"
#include "tricolor/text.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>

#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <set>
#include <stdexcept>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include "tricolor_dp.skel.h"

namespace tricolor {
namespace {

// Deletes the flows whose policy id @drop says to.
template <typename Pred>
void delete_flows_if(int flows_fd, Pred drop) {
    std::vector<tcm_flow_key> gone;
    tcm_flow_key k{}, nk{};
    void *prev = nullptr;
    while (bpf_map_get_next_key(flows_fd, prev, &nk) == 0) {
        if (drop(nk.policy_id))
            gone.push_back(nk);
        k = nk;
        prev = &k;
    }
    for (const auto &g : gone)
        bpf_map_delete_elem(flows_fd, &g);
}

bool key_less(const tcm_flow_key &a, const tcm_flow_key &b) {
    return std::memcmp(&a, &b, sizeof(a)) < 0;
}

void sort_unique(std::vector<tcm_flow_key> &keys) {
    std::ranges::sort(keys, key_less);
    auto same = [](const tcm_flow_key &a, const tcm_flow_key &b) {
        return std::memcmp(&a, &b, sizeof(a)) == 0;
    };
    keys.erase(std::unique(keys.begin(), keys.end(), same), keys.end());
}

// flows --top's order: the most bytes first, ties by key, so that every way of answering gives
// the same list.
bool busier(const Flow &a, const Flow &b) {
    uint64_t x = flow_bytes(a.state), y = flow_bytes(b.state);
    return x != y ? x > y : key_less(a.key, b.key);
}

uint32_t obj_id(int fd) {
    bpf_prog_info info{}; // a map's info starts with its type and id too, but differs after
    uint32_t len = sizeof(info);
    return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
}

// The keys of the heavy-hitter map, deleting them if @drain; nullopt if the map could not be
// read whole.
std::optional<std::vector<tcm_flow_key>> hot_map_keys(int fd, bool drain) {
    std::vector<tcm_flow_key> out;
    size_t chunk = 1024;
    std::vector<tcm_flow_key> keys(chunk);
    std::vector<uint8_t> values(chunk);
    uint32_t in_batch = 0, out_batch = 0;
    bool first = true;
    for (;;) {
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
        out.insert(out.end(), keys.begin(), keys.begin() + count);
        if (err == -ENOENT) // that was the last batch
            return out;
        in_batch = out_batch;
        first = false;
    }
}

} // namespace

struct Datapath::Impl {
    tricolor_dp *skel = nullptr;
    bool testing = false;
    bool adopted = false;
    std::string pin_path;
    tcm_runtime *runtime = nullptr;    // the mmapped entry of the tcm_runtime map
    tcm_fleet_grant *fleet = nullptr;  // the mmapped tcm_fleet array
    std::map<uint32_t, Policy> active; // id -> policy of the active set
    size_t counted_flows = 0;          // as of the last reclaim pass or count_flows()
    std::unique_ptr<PolicySets> sets;  // the model of the set and what each set's maps hold
    // The model is the active set: false after adopting pins, until a change is applied.
    bool in_sync = true;
    // Adopted pins: the flow table may hold flows of ids no set holds.
    bool flows_unclean = false;
    uint32_t shaping = 0; // active policies with --shape sockets
    // flows --top from the heavy hitters (docs/datapath.md, "flows --top at 2^20").
    uint32_t top_keep = 0, hot_capacity = 0;
    struct Hot {
        bool valid = false;             // the keys below and tcm_flow_hot hold every flow
                                        // with at least `threshold` bytes
        uint64_t threshold = ~0ull;     // installed in the data path
        std::vector<tcm_flow_key> keys; // sorted: read at or above it, or drained from the map
        uint64_t next = ~0ull;          // for the next pass
    } hot;
    uint32_t flows_map_id = 0;
    std::vector<uint32_t> own_progs; // this Datapath's program ids
    static size_t fleet_bytes() {
        size_t page = sysconf(_SC_PAGESIZE);
        return (sizeof(tcm_fleet_grant) * TCM_MAX_POLICIES + page - 1) / page * page;
    }
    ~Impl() {
        if (fleet)
            munmap(fleet, fleet_bytes());
        if (runtime)
            munmap(runtime, sysconf(_SC_PAGESIZE));
        tricolor_dp::destroy(skel);
    }

    int fd(bpf_map *m) const { return bpf_map__fd(m); }
};

Datapath::Datapath(const DatapathOptions &o) : impl_(std::make_unique<Impl>()) {
    impl_->testing = o.testing;
    impl_->skel = tricolor_dp::open();
    if (!impl_->skel)
        throw std::runtime_error(
            fmt::format("cannot open the BPF data path: {}", errno_text(errno)));
    if (o.flow_capacity == 0)
        throw std::runtime_error("the flow table needs a capacity of at least 1");
    if (int err = bpf_map__set_max_entries(impl_->skel->maps.tcm_flows, o.flow_capacity); err < 0)
        throw std::runtime_error(
            fmt::format("cannot size the flow table to {}: {}", o.flow_capacity, errno_text(err)));
    if (o.hot_capacity == 0)
        throw std::runtime_error("the heavy-hitter map needs a capacity of at least 1");
    if (int err = bpf_map__set_max_entries(impl_->skel->maps.tcm_flow_hot, o.hot_capacity); err < 0)
        throw std::runtime_error(fmt::format("cannot size the heavy-hitter map to {}: {}",
                                             o.hot_capacity, errno_text(err)));
    impl_->top_keep = o.top_keep;
    impl_->hot_capacity = o.hot_capacity;
    if (!o.pin_dir.empty()) {
        namespace fs = std::filesystem;
        impl_->pin_path = fmt::format("{}/abi{}", o.pin_dir, TCM_ABI_VERSION);
        std::error_code ec;
        fs::create_directories(impl_->pin_path, ec);
        if (ec)
            throw std::runtime_error(fmt::format("cannot create the pin directory {}: {}",
                                                 impl_->pin_path, ec.message()));
        impl_->adopted = fs::exists(impl_->pin_path + "/tcm_runtime");
        bpf_map *m;
        bpf_object__for_each_map(m, impl_->skel->obj) {
            // A cache is not state: a new program starts with an empty one. The heavy hitters
            // go with this program's threshold (in .data, not pinned either); the hot key is
            // scratch.
            if (bpf_map__is_internal(m) || m == impl_->skel->maps.tcm_class_cache ||
                m == impl_->skel->maps.tcm_flow_hot || m == impl_->skel->maps.tcm_hot_key)
                continue;
            std::string path = impl_->pin_path + "/" + bpf_map__name(m);
            if (int err = bpf_map__set_pin_path(m, path.c_str()); err < 0)
                throw std::runtime_error(fmt::format("cannot pin map {} at {}: {}",
                                                     bpf_map__name(m), path, errno_text(err)));
        }
    }
    impl_->skel->rodata->tcm_test_clock = o.testing ? 1 : 0;
    impl_->skel->rodata->tcm_bench_spread = o.bench_spread;
    if (auto problem = kernel_support_problem(); !problem.empty())
        throw std::runtime_error("cannot load the BPF data path: " + problem);
    if (auto loaded = load_bpf("the BPF data path", [&] { return tricolor_dp::load(impl_->skel); });
        !loaded) {
        std::string hint;
        if (impl_->adopted)
            hint = fmt::format(" (the maps pinned in {} do not match this build: a different "
                               "flow capacity? remove them to start afresh)",
                               impl_->pin_path);
        throw std::runtime_error(loaded.error() + hint);
    }
    void *mem = mmap(nullptr, sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, MAP_SHARED,
                     impl_->fd(impl_->skel->maps.tcm_runtime), 0);
    if (mem == MAP_FAILED)
        throw std::runtime_error(fmt::format("cannot map tcm_runtime: {}", errno_text(errno)));
    impl_->runtime = static_cast<tcm_runtime *>(mem);
    mem = mmap(nullptr, Impl::fleet_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED,
               impl_->fd(impl_->skel->maps.tcm_fleet), 0);
    if (mem == MAP_FAILED)
        throw std::runtime_error(fmt::format("cannot map tcm_fleet: {}", errno_text(errno)));
    impl_->fleet = static_cast<tcm_fleet_grant *>(mem);
    auto *maps = &impl_->skel->maps;
    impl_->sets = std::make_unique<PolicySets>(
        PolicySets::Maps{impl_->fd(maps->tcm_policy_cfg), impl_->fd(maps->tcm_masks),
                         impl_->fd(maps->tcm_rules), impl_->fd(maps->tcm_sets)},
        !impl_->adopted);
    {
        bpf_map_info info{};
        uint32_t len = sizeof(info);
        if (bpf_obj_get_info_by_fd(impl_->fd(impl_->skel->maps.tcm_flows), &info, &len) == 0)
            impl_->flows_map_id = info.id;
        bpf_program *prog;
        bpf_object__for_each_program(prog, impl_->skel->obj) {
            if (int fd = bpf_program__fd(prog); fd >= 0)
                impl_->own_progs.push_back(obj_id(fd));
        }
    }
    if (impl_->adopted)
        adopt();
}

void Datapath::adopt() {
    impl_->in_sync = false;
    impl_->flows_unclean = true;
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
    for (uint32_t slot = 0; slot < info.n_policies && slot < TCM_MAX_POLICIES; ++slot) {
        uint32_t idx = set * TCM_MAX_POLICIES + slot;
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

Result<void> Datapath::check(const std::vector<Policy> &policies) const {
    auto errors = policy_set_problems(policies);
    if (!errors.empty()) {
        return std::unexpected(join_lines(errors));
    }
    return {};
}

Result<void> Datapath::apply(const std::vector<Policy> &policies) {
    if (auto ok = check(policies); !ok)
        return ok;
    SetChange c;
    std::set<uint32_t> ids;
    for (const auto &p : policies) {
        ids.insert(p.id);
        auto it = impl_->active.find(p.id);
        if (it == impl_->active.end() || !(it->second == p))
            c.upserts.push_back(p);
    }
    for (const auto &[id, p] : impl_->active)
        if (!ids.contains(id))
            c.removes.push_back(id);
    return commit(c, &policies);
}

Result<void> Datapath::upsert(const Policy &policy) {
    if (auto it = impl_->active.find(policy.id); it != impl_->active.end() && it->second == policy)
        return {};
    if (!impl_->in_sync) { // adopted: the next change writes a set whole anyway
        auto set = policies();
        auto it = std::ranges::find(set, policy.id, &Policy::id);
        if (it != set.end())
            *it = policy;
        else
            set.push_back(policy);
        return apply(set);
    }
    SetChange c{{policy}, {}};
    if (auto errors = impl_->sets->problems(c); !errors.empty())
        return std::unexpected(join_lines(errors));
    return commit(c, nullptr);
}

Result<void> Datapath::remove(uint32_t policy_id) {
    if (!impl_->active.contains(policy_id))
        return std::unexpected(fmt::format("no policy with id {}", policy_id));
    if (!impl_->in_sync) {
        auto set = policies();
        std::erase_if(set, [&](const Policy &p) { return p.id == policy_id; });
        return apply(set);
    }
    SetChange c{{}, {policy_id}};
    if (auto errors = impl_->sets->problems(c); !errors.empty())
        return std::unexpected(join_lines(errors));
    return commit(c, nullptr);
}

// Writes @c (checked) into the inactive set and makes it active. @all: the whole set after
// the change, when the caller has it.
Result<void> Datapath::commit(const SetChange &c, const std::vector<Policy> *all) {
    auto *skel = impl_->skel;
    const uint32_t active = impl_->runtime->active_set & 1, next = active ^ 1;

    // 1. Fresh state and counters for ids that were not active (an id can be reused); a policy
    // that starts (or stops) being a fleet policy holds no tokens from before.
    int ncpus = libbpf_num_possible_cpus();
    std::vector<tcm_counters> zero_counters(ncpus);
    std::set<uint32_t> fresh;
    for (const auto &p : c.upserts) {
        auto was = impl_->active.find(p.id);
        if (was == impl_->active.end())
            fresh.insert(p.id);
        if (was == impl_->active.end() || was->second.fleet != p.fleet)
            fleet_revoke(p.id);
    }
    if (!fresh.empty()) {
        // In two batches (a fresh set of 16k policies is 32k entries), else one by one.
        std::vector<uint32_t> ids(fresh.begin(), fresh.end());
        std::vector<tcm_flow> states(ids.size());
        std::vector<tcm_counters> counters(ids.size() * ncpus);
        int state_fd = impl_->fd(skel->maps.tcm_policy_state);
        int stats_fd = impl_->fd(skel->maps.tcm_policy_stats);
        uint32_t n = static_cast<uint32_t>(ids.size());
        if (bpf_map_update_batch(state_fd, ids.data(), states.data(), &n, nullptr) != 0)
            for (uint32_t id : ids)
                bpf_map_update_elem(state_fd, &id, &states[0], 0);
        n = static_cast<uint32_t>(ids.size());
        if (bpf_map_update_batch(stats_fd, ids.data(), counters.data(), &n, nullptr) != 0)
            for (uint32_t id : ids)
                bpf_map_update_elem(stats_fd, &id, zero_counters.data(), 0);
        // The --aqm and --shape edt counters too: a new policy on a reused id started with the
        // marks and drops of the one that had it before.
        std::vector<tcm_tcp_counters> tcp(ids.size() * ncpus);
        int tcp_fd = impl_->fd(skel->maps.tcm_tcp_stats);
        n = static_cast<uint32_t>(ids.size());
        if (bpf_map_update_batch(tcp_fd, ids.data(), tcp.data(), &n, nullptr) != 0)
            for (uint32_t id : ids)
                bpf_map_update_elem(tcp_fd, &id, tcp.data(), 0);
    }
    // --shape edt: the reciprocal of the policy's rate (bpf/lib/edt.h), in place before the set
    // that uses it is active. A packet of the old set that reads a new rate's reciprocal gets a
    // departure the meter still checks: later than needed, or refused (dropped as red).
    for (const auto &p : c.upserts)
        if (p.shape == TCM_SHAPE_EDT) {
            tcm_edt_cfg e{edt_recip(make_meter_config(p.meter))};
            uint32_t id = p.id;
            bpf_map_update_elem(impl_->fd(skel->maps.tcm_edt_cfg), &id, &e, 0);
        }
    // The flows of an id are deleted when it leaves the set (5. below), so a fresh id has none;
    // maps adopted from pins may hold flows of ids no set holds: the first change deletes them.
    int flows_fd = impl_->fd(skel->maps.tcm_flows);
    if (impl_->flows_unclean && !fresh.empty())
        delete_flows_if(flows_fd, [&](uint32_t id) { return !impl_->active.contains(id); });

    // 2. The inactive set brought up to the new one: only what differs, unless much changed
    // (or the maps were adopted), when the ranks are laid out afresh and the set written whole.
    const bool bulk = !impl_->in_sync || c.upserts.size() + c.removes.size() >
                                             std::max<size_t>(64, impl_->active.size() / 4);
    Result<void> written;
    if (bulk) {
        std::vector<Policy> whole;
        if (!all) {
            std::map<uint32_t, Policy> after = impl_->active;
            for (uint32_t id : c.removes)
                after.erase(id);
            for (const auto &p : c.upserts)
                after[p.id] = p;
            for (auto &[id, p] : after)
                whole.push_back(std::move(p));
        }
        written = impl_->sets->rebuild(next, all ? *all : whole);
    } else {
        written = impl_->sets->write(next, c);
    }
    if (!written) {
        impl_->in_sync = impl_->in_sync && !bulk;
        return written;
    }

    // 3. One store makes the new set active: the version goes up by one, and its bit 0 is the
    // set. The classification cache serves only entries of the active version; after 2^32
    // switches a version comes back, so the cache is emptied before it does.
    const uint32_t version = impl_->runtime->active_set + 1;
    if (version == 0)
        clear_class_cache();
    __atomic_store_n(&impl_->runtime->active_set, version, __ATOMIC_RELEASE);
    impl_->sets->switched(next);

    // 4. The active map of policies.
    std::set<uint32_t> removed;
    int shaping_delta = 0; // policies with --shape sockets, counted as they change
    auto shapes = [](const Policy &p) { return p.shape == TCM_SHAPE_SOCKETS ? 1 : 0; };
    for (uint32_t id : c.removes)
        if (auto it = impl_->active.find(id); it != impl_->active.end()) {
            shaping_delta -= shapes(it->second);
            impl_->active.erase(it);
            removed.insert(id);
        }
    for (const auto &p : c.upserts)
        if (auto it = impl_->active.find(p.id); it != impl_->active.end())
            shaping_delta -= shapes(it->second);
    for (const auto &p : c.upserts)
        shaping_delta += shapes(p);
    if (all) {
        std::set<uint32_t> ids;
        for (const auto &p : *all)
            ids.insert(p.id);
        for (auto it = impl_->active.begin(); it != impl_->active.end();)
            if (!ids.contains(it->first)) {
                removed.insert(it->first);
                it = impl_->active.erase(it);
            } else {
                ++it;
            }
    }
    std::map<uint32_t, const Policy *> changed;
    for (const auto &p : c.upserts)
        changed[p.id] = &(impl_->active[p.id] = p);

    // 5. The flows of policies that are gone: a scan of the whole flow table, so only when a
    // policy was removed (a plain update keeps every id). After adopting pins, every id no set
    // holds.
    if (impl_->flows_unclean)
        delete_flows_if(flows_fd, [&](uint32_t id) { return !impl_->active.contains(id); });
    else if (!removed.empty())
        delete_flows_if(flows_fd, [&](uint32_t id) { return removed.contains(id); });
    impl_->flows_unclean = false;

    // 6. --shape sockets: each policy's pacing rate; a change bumps its generation so that its
    // sockets re-read their share, and so does a policy that left (its sockets go unpaced).
    int shape_fd = impl_->fd(skel->maps.tcm_shape_cfg);
    auto write_shape = [&](uint32_t id, uint64_t rate, uint32_t per_socket) {
        tcm_shape_cfg old{};
        bpf_map_lookup_elem(shape_fd, &id, &old);
        if (old.rate == rate && old.per_socket == per_socket)
            return;
        tcm_shape_cfg cfg{rate, per_socket, old.gen + 1};
        bpf_map_update_elem(shape_fd, &id, &cfg, 0);
    };
    for (const auto &[id, p] : changed) {
        bool on = p->shape == TCM_SHAPE_SOCKETS;
        write_shape(id, on ? shape_payload_rate(*p) : 0, p->per == TCM_PER_5TUPLE);
    }
    for (uint32_t id : removed)
        write_shape(id, 0, 0);
    if (all || c.upserts.size() + removed.size() > 1) {
        impl_->shaping = 0;
        for (const auto &[id, p] : impl_->active)
            impl_->shaping += p.shape == TCM_SHAPE_SOCKETS;
    } else {
        impl_->shaping += shaping_delta;
    }
    __atomic_store_n(&skel->bss->tcm_shape_policies, impl_->shaping, __ATOMIC_RELEASE);
    impl_->in_sync = true;

    // 7. After a rebuild the other set is far behind the new one. Once no packet can still be
    // reading it (an RCU grace period, which membarrier(MEMBARRIER_CMD_GLOBAL) waits for: the
    // programs run under RCU), it is brought up too, so that the next change of one policy
    // writes only what it changes. Without the grace period, that change catches it up.
    if (bulk && syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
        (void)impl_->sets->catch_up(active);
    return {};
}

void Datapath::set_shape_ifaces(const std::vector<uint32_t> &ifindexes) {
    auto *bss = impl_->skel->bss;
    uint32_t n = 0;
    for (uint32_t idx : ifindexes)
        if (n < TCM_SHAPE_MAX_IFACES)
            bss->tcm_shape_ifaces[n++] = idx;
    __atomic_store_n(&bss->tcm_shape_n_ifaces, n, __ATOMIC_RELEASE);
}

int Datapath::sockops_prog_fd() const {
    return bpf_program__fd(impl_->skel->progs.tricolor_sockops);
}

std::map<uint32_t, ShapeCounters> Datapath::shape_counters() const {
    std::map<uint32_t, ShapeCounters> out;
    int ncpus = libbpf_num_possible_cpus();
    std::vector<tcm_tcp_counters> per_cpu(ncpus);
    for (const auto &[id, p] : impl_->active) {
        ShapeCounters c;
        tcm_shape_state st{};
        uint32_t key = id;
        if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_shape_state), &key, &st) == 0)
            c.sockets = st.sockets > 0x7fffffffu ? 0 : st.sockets;
        if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_tcp_stats), &key, per_cpu.data()) ==
            0) {
            constexpr size_t n = sizeof(tcm_tcp_counters) / sizeof(uint64_t);
            auto *s = reinterpret_cast<uint64_t *>(&c.tcp);
            for (const auto &v : per_cpu) {
                auto *w = reinterpret_cast<const uint64_t *>(&v);
                for (size_t i = 0; i < n; ++i)
                    s[i] += w[i];
            }
        }
        out[id] = c;
    }
    return out;
}

namespace {

// Reads every entry of @fd in batches of keys K and values V (V per CPU: @values_per_key of
// them), calling @each(key, values). Falls back to one lookup a key where batching is missing.
template <typename K, typename V, typename F>
void for_each_entry(int fd, size_t values_per_key, F each) {
    size_t chunk = 4096;
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
        for (uint32_t i = 0; i < count; ++i)
            each(keys[i], &values[i * values_per_key]);
        if (err < 0) // ENOENT: that was the last batch
            return;
        in_batch = out_batch;
        first = false;
    }
}

} // namespace

std::vector<Policy> Datapath::policies() const {
    std::vector<Policy> out;
    for (const auto &[id, p] : impl_->active)
        out.push_back(p);
    return out;
}

std::map<uint32_t, tcm_counters> Datapath::policy_counters() const {
    std::map<uint32_t, tcm_counters> out;
    size_t ncpus = static_cast<size_t>(libbpf_num_possible_cpus());
    for_each_entry<uint32_t, tcm_counters>(impl_->fd(impl_->skel->maps.tcm_policy_stats), ncpus,
                                           [&](uint32_t id, const tcm_counters *per_cpu) {
                                               if (!impl_->active.contains(id))
                                                   return;
                                               tcm_counters sum{};
                                               for (size_t c = 0; c < ncpus; ++c)
                                                   for (int i = 0; i < TCM_NR_COLORS; ++i) {
                                                       sum.packets[i] += per_cpu[c].packets[i];
                                                       sum.bytes[i] += per_cpu[c].bytes[i];
                                                   }
                                               out[id] = sum;
                                           });
    return out;
}

tcm_counters Datapath::policy_counter(uint32_t id) const {
    size_t ncpus = static_cast<size_t>(libbpf_num_possible_cpus());
    std::vector<tcm_counters> per_cpu(ncpus);
    tcm_counters sum{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_stats), &id, per_cpu.data()))
        return sum;
    for (const auto &c : per_cpu)
        for (int i = 0; i < TCM_NR_COLORS; ++i) {
            sum.packets[i] += c.packets[i];
            sum.bytes[i] += c.bytes[i];
        }
    return sum;
}

tcm_global_counters Datapath::global_counters() const {
    int ncpus = libbpf_num_possible_cpus();
    std::vector<tcm_global_counters> per_cpu(ncpus);
    tcm_global_counters sum{};
    uint32_t zero = 0;
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_global_stats), &zero, per_cpu.data()) !=
        0)
        return sum;
    constexpr size_t n = sizeof(tcm_global_counters) / sizeof(uint64_t);
    auto *s = reinterpret_cast<uint64_t *>(&sum);
    for (const auto &c : per_cpu) {
        auto *v = reinterpret_cast<const uint64_t *>(&c);
        for (size_t i = 0; i < n; ++i)
            s[i] += v[i];
    }
    return sum;
}

std::vector<Flow> Datapath::flows() const {
    std::vector<Flow> out;
    for_each_entry<tcm_flow_key, tcm_flow>(impl_->fd(impl_->skel->maps.tcm_flows), 1,
                                           [&](const tcm_flow_key &k, const tcm_flow *v) {
                                               out.push_back(Flow{k, *v});
                                           });
    return out;
}

tcm_flow Datapath::policy_state(uint32_t id) const {
    tcm_flow f{};
    bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_state), &id, &f);
    return f;
}

void Datapath::fleet_grant(uint32_t id, uint64_t tokens) {
    if (id >= TCM_MAX_POLICIES || tokens == 0)
        return;
    tcm_fleet_grant &g = impl_->fleet[id];
    __atomic_store_n(&g.granted, g.granted + tokens, __ATOMIC_RELEASE); // the only writer
}

void Datapath::fleet_revoke(uint32_t id) {
    if (id >= TCM_MAX_POLICIES)
        return;
    tcm_fleet_grant &g = impl_->fleet[id];
    __atomic_store_n(&g.revoke_upto, __atomic_load_n(&g.granted, __ATOMIC_RELAXED),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&g.revoke_seq, g.revoke_seq + 1, __ATOMIC_RELEASE);
}

void Datapath::fleet_lease(uint32_t id, uint64_t until_ns) {
    if (id < TCM_MAX_POLICIES)
        __atomic_store_n(&impl_->fleet[id].lease_until_ns, until_ns, __ATOMIC_RELEASE);
}

FleetLocal Datapath::fleet_local(uint32_t id) const {
    FleetLocal out;
    if (id >= TCM_MAX_POLICIES)
        return out;
    const tcm_fleet_grant &g = impl_->fleet[id];
    // drained before C: a fold between the reads counts its tokens twice, never zero times.
    uint64_t drained = __atomic_load_n(&g.drained, __ATOMIC_ACQUIRE);
    uint64_t seen = __atomic_load_n(&g.revoke_seen, __ATOMIC_ACQUIRE);
    out.granted = __atomic_load_n(&g.granted, __ATOMIC_ACQUIRE);
    out.spilled = __atomic_load_n(&g.spilled, __ATOMIC_ACQUIRE);
    uint64_t pending = out.granted > drained ? out.granted - drained : 0;
    if (seen != __atomic_load_n(&g.revoke_seq, __ATOMIC_ACQUIRE)) {
        uint64_t upto = __atomic_load_n(&g.revoke_upto, __ATOMIC_ACQUIRE);
        pending = out.granted > std::max(upto, drained) ? out.granted - std::max(upto, drained) : 0;
        out.held = pending; // C is emptied at the next packet
        return out;
    }
    out.held = pending + policy_state(id).meter.c_tokens;
    return out;
}

uint64_t Datapath::now_ns() const {
    if (impl_->testing)
        return impl_->skel->bss->tcm_test_clock_ns;
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts); // what bpf_ktime_get_ns() reads
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void Datapath::clear_class_cache() {
    int fd = impl_->fd(impl_->skel->maps.tcm_class_cache);
    tcm_class_key key{};
    while (bpf_map_get_next_key(fd, nullptr, &key) == 0 && bpf_map_delete_elem(fd, &key) == 0) {
    }
}

size_t Datapath::class_cache_entries() const {
    int fd = impl_->fd(impl_->skel->maps.tcm_class_cache);
    tcm_class_key key{}, next{};
    size_t n = 0;
    for (void *prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &key, ++n)
        key = next;
    return n;
}

size_t Datapath::last_set_writes() const {
    return impl_->sets->last_map_writes();
}

void Datapath::set_version_for_test(uint32_t version) {
    if (!impl_->testing)
        throw std::logic_error("set_version_for_test: testing mode only");
    if ((version & 1) != (impl_->runtime->active_set & 1))
        throw std::logic_error("set_version_for_test: bit 0 must stay the active set");
    __atomic_store_n(&impl_->runtime->active_set, version, __ATOMIC_RELEASE);
}

size_t Datapath::reclaim_idle_flows() {
    return reclaim_idle_flows(0, 0);
}

size_t Datapath::reclaim_idle_flows(uint64_t min_idle_ns, size_t pressure_at) {
    FlowPass pass = begin_flow_pass(true, min_idle_ns, pressure_at);
    walk_flow_pass(pass);
    while (reclaim_some(pass, SIZE_MAX)) {
    }
    end_flow_pass(pass);
    return pass.reclaimed;
}

size_t Datapath::count_flows() {
    FlowPass pass = begin_flow_pass(false);
    walk_flow_pass(pass);
    end_flow_pass(pass);
    return impl_->counted_flows;
}

size_t Datapath::counted_flows() const {
    return impl_->counted_flows;
}

// The heavy hitters (docs/datapath.md, "flows --top at 2^20"). A pass installs a threshold T,
// empties tcm_flow_hot, walks the table and keeps the flows read at T or more: from then on every
// flow with T bytes or more is one of those, or crossed T after the walk read it, hence after T
// was installed, and the data path put it in tcm_flow_hot (bpf/lib/hot.h has why the order of
// the reads makes that so), unless an insert failed (counted, and then flows --top walks).
//
// A pass that raises T (or keeps it) keeps the last pass's answer valid through its own walk:
// what it empties from tcm_flow_hot joins the last walk's flows as candidates, and a flow with
// the new T or more either had the old T then (a candidate) or crossed the new T after it was
// installed (recorded). Lowering T cannot be done that way (a flow between the two thresholds
// when it is installed is in neither), so until that pass's walk is done flows --top walks; T
// is only lowered when fewer than half of top_keep flows still stand at or above it.
FlowPass Datapath::begin_flow_pass(bool reclaim, uint64_t min_idle_ns, size_t pressure_at) {
    FlowPass pass;
    pass.reclaim = reclaim;
    pass.min_idle_ns = min_idle_ns;
    pass.pressure_at = pressure_at;
    if (reclaim)
        for (const auto &[id, p] : impl_->active)
            pass.configs[id] = make_meter_config(p.meter);
    pass.version = impl_->runtime->active_set;
    pass.top_keep = impl_->top_keep;
    // As many as the data path can record, and never fewer than 16 top_keeps: a threshold picked
    // from the last walk usually has about top_keep flows at or above it.
    pass.heavy_cap = std::max<size_t>(impl_->hot_capacity, size_t{16} * impl_->top_keep);
    auto &hot = impl_->hot;
    const uint64_t t = hot.next;
    bool keep = hot.valid && t >= hot.threshold;
    // T first (a full barrier), then the map emptied, then the failed inserts read and zeroed.
    __atomic_store_n(&impl_->skel->data->tcm_hot_threshold, t, __ATOMIC_SEQ_CST);
    auto drained = hot_map_keys(impl_->fd(impl_->skel->maps.tcm_flow_hot), true);
    uint64_t failed = __atomic_exchange_n(&impl_->skel->bss->tcm_hot_overflow, 0, __ATOMIC_SEQ_CST);
    // A drained map that was full may have refused an insert whose count is not visible yet.
    if (!drained || failed || drained->size() >= impl_->hot_capacity || foreign_flow_writers())
        keep = false;
    hot.threshold = t;
    if (keep) {
        hot.keys.insert(hot.keys.end(), drained->begin(), drained->end());
        sort_unique(hot.keys);
    } else {
        hot.valid = false;
        hot.keys.clear();
    }
    pass.threshold = t;
    pass.now = now_ns();
    return pass;
}

void Datapath::walk_flow_pass(FlowPass &pass) const {
    auto &top = pass.top;
    for_each_entry<tcm_flow_key, tcm_flow>(
        impl_->fd(impl_->skel->maps.tcm_flows), 1, [&](const tcm_flow_key &k, const tcm_flow *v) {
            ++pass.flows;
            const uint64_t bytes = flow_bytes(*v);
            if (bytes >= pass.threshold) {
                if (pass.heavy.size() < pass.heavy_cap)
                    pass.heavy.push_back(k);
                else
                    pass.heavy_over_cap = true;
            }
            if (pass.reclaim) {
                auto cfg = pass.configs.find(k.policy_id);
                if (cfg != pass.configs.end() && !v->lock) {
                    // Exactly what the next packet would see: the shared refill code on a copy.
                    tcm_meter_state s = v->meter;
                    meter_refill(&cfg->second, &s, pass.now);
                    const bool started = v->flags & TCM_FLOW_F_STARTED;
                    if (!started ||
                        (s.c_tokens >= cfg->second.c_size && s.e_tokens >= cfg->second.e_size)) {
                        // Seen recently: left for an operator to look at, unless under pressure.
                        if (pass.min_idle_ns && started &&
                            pass.now - std::min<uint64_t>(pass.now, v->meter.last_ns) <
                                pass.min_idle_ns) {
                            pass.full_recent.push_back({k, *v});
                        } else {
                            pass.reclaimable.push_back({k, *v});
                            return; // going: not one of the next threshold's flows
                        }
                    }
                }
            }
            if (pass.top_keep == 0)
                return;
            if (top.size() < pass.top_keep) {
                top.push_back(bytes);
                std::ranges::push_heap(top, std::greater<>());
            } else if (bytes > top.front()) {
                std::ranges::pop_heap(top, std::greater<>());
                top.back() = bytes;
                std::ranges::push_heap(top, std::greater<>());
            }
        });
    if (pass.pressure_at && pass.flows > pass.pressure_at)
        pass.reclaimable.insert(pass.reclaimable.end(), pass.full_recent.begin(),
                                pass.full_recent.end());
    pass.full_recent.clear();
}

bool Datapath::reclaim_some(FlowPass &pass, size_t max) {
    auto &todo = pass.reclaimable;
    if (pass.next_reclaim >= todo.size())
        return false;
    if (impl_->runtime->active_set != pass.version) {
        pass.next_reclaim = todo.size(); // decided on configs that changed since
        return false;
    }
    int fd = impl_->fd(impl_->skel->maps.tcm_flows);
    const size_t end =
        todo.size() - pass.next_reclaim > max ? pass.next_reclaim + max : todo.size();
    for (; pass.next_reclaim < end; ++pass.next_reclaim) {
        // Only if no packet came since the walk read it: one that did may have taken tokens.
        const Flow &f = todo[pass.next_reclaim];
        tcm_flow now{};
        if (bpf_map_lookup_elem(fd, &f.key, &now) != 0 || now.lock ||
            now.meter.last_ns != f.state.meter.last_ns || now.flags != f.state.flags ||
            std::memcmp(&now.counters, &f.state.counters, sizeof(now.counters)) != 0)
            continue;
        if (bpf_map_delete_elem(fd, &f.key) == 0)
            ++pass.reclaimed;
    }
    return pass.next_reclaim < todo.size();
}

void Datapath::end_flow_pass(FlowPass &pass) {
    impl_->counted_flows = pass.flows - std::min(pass.flows, pass.reclaimed);
    auto &hot = impl_->hot;
    // The next threshold: the bytes of the top_keep-th busiest flow read (none: tracking off,
    // a walk is cheap then), unless that lowers it while enough flows stand at or above it.
    const uint64_t kth =
        pass.top_keep && pass.top.size() >= pass.top_keep ? pass.top.front() : ~0ull;
    const bool enough = pass.heavy_over_cap || pass.heavy.size() >= (pass.top_keep + 1) / 2;
    hot.next = kth >= pass.threshold || !enough ? kth : pass.threshold;
    // From now on the flows read at or above this pass's threshold and tcm_flow_hot hold every
    // flow that has it.
    hot.keys = std::move(pass.heavy);
    sort_unique(hot.keys);
    hot.valid = pass.threshold != ~0ull && !pass.heavy_over_cap && foreign_flow_writers() == 0;
    if (!hot.valid)
        hot.keys.clear();
}

TopTracking Datapath::top_tracking() const {
    return {impl_->hot.valid, impl_->hot.threshold, impl_->hot.keys.size()};
}

size_t Datapath::foreign_flow_writers() const {
    size_t n = 0;
    uint32_t id = 0;
    for (;;) {
        if (bpf_prog_get_next_id(id, &id) != 0)
            // Cannot list programs (no CAP_SYS_ADMIN): it cannot be ruled out.
            return errno == ENOENT ? n : n + 1;
        if (std::ranges::find(impl_->own_progs, id) != impl_->own_progs.end())
            continue;
        int fd = bpf_prog_get_fd_by_id(id);
        if (fd < 0)
            continue; // gone meanwhile
        auto maps = prog_map_ids(fd);
        close(fd);
        if (std::ranges::find(maps, impl_->flows_map_id) != maps.end())
            ++n;
    }
}

std::vector<Flow> Datapath::top_flows(size_t k, const std::function<bool(uint32_t)> &want,
                                      bool force_walk, std::string *via) const {
    auto wanted = [&](uint32_t id) { return !want || want(id); };
    std::vector<Flow> out;
    const auto &hot = impl_->hot;
    // The heavy hitters answer if they hold at least k flows of T bytes or more (then every
    // flow of the true top k has T or more, and each of those is a candidate).
    auto from_hot = [&]() -> bool {
        if (k == 0 || force_walk || !hot.valid || hot.threshold == ~0ull)
            return false;
        auto live = hot_map_keys(impl_->fd(impl_->skel->maps.tcm_flow_hot), false);
        // A full map may have refused an insert whose count is not visible yet.
        if (!live || live->size() >= impl_->hot_capacity || foreign_flow_writers())
            return false;
        std::vector<tcm_flow_key> candidates = hot.keys;
        candidates.insert(candidates.end(), live->begin(), live->end());
        sort_unique(candidates);
        int fd = impl_->fd(impl_->skel->maps.tcm_flows);
        for (const auto &key : candidates) {
            Flow f{key, {}};
            if (wanted(key.policy_id) && bpf_map_lookup_elem(fd, &key, &f.state) == 0 &&
                flow_bytes(f.state) >= hot.threshold)
                out.push_back(f);
        }
        // Read after the candidates: an insert refused before them has been counted by now.
        if (__atomic_load_n(&impl_->skel->bss->tcm_hot_overflow, __ATOMIC_SEQ_CST) != 0 ||
            out.size() < k) {
            out.clear();
            return false;
        }
        return true;
    };
    bool hit = from_hot();
    if (!hit) {
        out = flows();
        std::erase_if(out, [&](const Flow &f) { return !wanted(f.key.policy_id); });
    }
    if (k && out.size() > k) {
        std::ranges::partial_sort(out, out.begin() + static_cast<std::ptrdiff_t>(k), busier);
        out.resize(k);
    } else {
        std::ranges::sort(out, busier);
    }
    if (via)
        *via = hit ? "hot" : "walk";
    return out;
}

void Datapath::set_hot_threshold_for_test(uint64_t bytes) {
    __atomic_store_n(&impl_->skel->data->tcm_hot_threshold, bytes, __ATOMIC_SEQ_CST);
}

std::vector<tcm_flow_key> Datapath::hot_keys() const {
    auto keys = hot_map_keys(impl_->fd(impl_->skel->maps.tcm_flow_hot), false);
    if (!keys)
        throw std::runtime_error("cannot read tcm_flow_hot");
    sort_unique(*keys);
    return *keys;
}

uint64_t Datapath::hot_overflow() const {
    return __atomic_load_n(&impl_->skel->bss->tcm_hot_overflow, __ATOMIC_SEQ_CST);
}

void Datapath::clear_hot_for_test() {
    (void)hot_map_keys(impl_->fd(impl_->skel->maps.tcm_flow_hot), true);
}

void Datapath::set_drop_malformed(bool drop) {
    __atomic_store_n(&impl_->runtime->drop_malformed, drop ? 1u : 0u, __ATOMIC_RELEASE);
}

uint32_t Datapath::active_set() const {
    return impl_->runtime->active_set;
}
int Datapath::xdp_prog_fd() const {
    return bpf_program__fd(impl_->skel->progs.tricolor_xdp);
}
int Datapath::tc_prog_fd() const {
    return bpf_program__fd(impl_->skel->progs.tricolor_tc);
}

void Datapath::set_clock(uint64_t now_ns) {
    if (!impl_->testing)
        throw std::logic_error("set_clock needs a Datapath loaded in testing mode");
    impl_->skel->bss->tcm_test_clock_ns = now_ns;
}

Datapath::Verdict Datapath::last_verdict() const {
    if (!impl_->testing)
        throw std::logic_error("last_verdict needs a Datapath loaded in testing mode");
    Verdict v;
    if (uint32_t id = impl_->skel->bss->tcm_test_last_policy; id != 0) {
        v.policy_id = id - 1;
        v.color = static_cast<Color>(impl_->skel->bss->tcm_test_last_color);
    }
    return v;
}

Datapath::TestRun Datapath::run_xdp(const std::vector<uint8_t> &frame) const {
    TestRun r;
    r.data_out.resize(frame.size() + 256);
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = r.data_out.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()),
                .data_size_out = static_cast<uint32_t>(r.data_out.size()), .repeat = 1);
    if (int err = bpf_prog_test_run_opts(xdp_prog_fd(), &opts); err < 0)
        throw std::runtime_error(fmt::format("XDP test run failed: {}", errno_text(err)));
    r.retval = opts.retval;
    r.data_out.resize(opts.data_size_out);
    return r;
}

Datapath::TestRun Datapath::run_tc(const std::vector<uint8_t> &frame,
                                   const __sk_buff *skb_in) const {
    TestRun r;
    __sk_buff in{};
    if (skb_in)
        in = *skb_in;
    r.data_out.resize(frame.size() + 256);
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = r.data_out.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()),
                .data_size_out = static_cast<uint32_t>(r.data_out.size()), .ctx_in = &in,
                .ctx_out = &r.skb_out, .ctx_size_in = sizeof(in), .ctx_size_out = sizeof(r.skb_out),
                .repeat = 1);
    if (int err = bpf_prog_test_run_opts(tc_prog_fd(), &opts); err < 0)
        throw std::runtime_error(fmt::format("tc test run failed: {}", errno_text(err)));
    r.retval = opts.retval;
    r.data_out.resize(opts.data_size_out);
    return r;
}

} // namespace tricolor
