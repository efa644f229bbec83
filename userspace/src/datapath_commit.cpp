// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_commit.cpp: changing the policy set (apply, upsert, remove): the checks, then commit,
// which writes the change into the inactive half of the maps and makes it active with one store.
#include "datapath_impl.hpp"
#include "tricolor/rules.hpp"
#include "tricolor/text.hpp"

#include <algorithm>
#include <set>

#include <functional>

#include <linux/membarrier.h>
#include <sys/syscall.h>

#include <fmt/format.h>

namespace tricolor {
namespace {

// The keys K of @fd whose policy id (@policy_of the key) @drop says to delete.
template <typename K, typename PolicyOf, typename Pred>
std::vector<K> keys_to_drop(int fd, PolicyOf policy_of, Pred drop) {
    std::vector<K> gone;
    K k{}, nk{};
    void *prev = nullptr;
    while (bpf_map_get_next_key(fd, prev, &nk) == 0) {
        if (drop(policy_of(nk)))
            gone.push_back(nk);
        k = nk;
        prev = &k;
    }
    return gone;
}

} // namespace

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
    if (const TableSizes need = tables_needed(policies, impl_->tables); need != impl_->tables)
        return std::unexpected(fmt::format(
            "the policies need tables of {} policy slots and {} classifier slots{}; this data "
            "path has {} and {}{} (its tables are grown first: resize_tables)",
            need.policy_slots, need.rule_slots, need.ext_states ? " and warm-up/quota states" : "",
            impl_->tables.policy_slots, impl_->tables.rule_slots,
            impl_->tables.ext_states ? "" : ", no warm-up/quota states"));
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

std::vector<Policy> Datapath::policies() const {
    std::vector<Policy> out;
    for (const auto &[id, p] : impl_->active)
        out.push_back(p);
    return out;
}

// One call of commit: the change, and the Datapath it goes into. Each member function below is
// one of commit's steps; their order is said at commit.
class Datapath::Impl::SetWriter {
  public:
    SetWriter(Datapath &dp, const SetChange &c, const std::vector<Policy> *all);

    // 1. What the new set's policies read outside the set maps, ready before it is active.
    void prepare_policy_maps();
    // ... and its warm-up and quota configs as they were, if 2 fails (the old set stays).
    void undo_policy_ext();
    // 2. The inactive set brought up to the new one.
    Result<void> write_inactive_set();
    // 3. One store makes it active.
    void switch_active_set();
    // What step 4 changed in the map of active policies, for steps 5 and 6.
    struct ActiveChange {
        std::set<uint32_t> removed;                 // ids no longer active
        std::map<uint32_t, const Policy *> changed; // the upserted policies, in the active map
        int shaping_delta = 0; // policies with --shape sockets, counted as they change
    };
    // 4. The map of active policies (Impl::active).
    ActiveChange update_active_policies();
    // 5. The flows of policies that are gone, and the warm-ups' and quotas' state.
    void delete_flows_of_removed(const ActiveChange &change);
    void delete_ext_of_removed(const ActiveChange &change);
    void delete_flows_if(const std::function<bool(uint32_t)> &drop);
    // 6. --shape sockets: each policy's pacing rate.
    void write_socket_shaping(const ActiveChange &change);
    // 7. The set that was active caught up with the new one, once no packet reads it.
    void catch_up_old_set();

  private:
    int fd(bpf_map *m) const { return impl_.fd(m); }

    Datapath &dp_;
    Impl &impl_;
    tricolor_dp *const skel_;
    const SetChange &c_;
    const std::vector<Policy> *const all_; // the whole set after the change, when known
    const uint32_t active_, next_;         // the active set now, and the one written
    // Only what differs is written, unless much changed (or the maps were adopted), when the
    // ranks are laid out afresh and the set written whole.
    const bool whole_;
    std::vector<std::pair<uint32_t, std::optional<tcm_policy_ext>>> ext_before_;
};

// Writes @c (checked) into the inactive set and makes it active. @all: the whole set after
// the change, when the caller has it.
//
// The order is what packets running meanwhile need: everything a policy of the new set reads
// besides the set is in place before the set can be read (1), the set is written while inactive
// (2) and made active by one store (3); only then do the map of active policies, the flows and
// the socket pacing follow the new set (4-6), and the set that was active, once no packet can
// still be reading it, is caught up last (7). A failure in 2 returns with the old set active.
Result<void> Datapath::commit(const SetChange &c, const std::vector<Policy> *all) {
    Impl::SetWriter w(*this, c, all);
    w.prepare_policy_maps();
    if (auto written = w.write_inactive_set(); !written) {
        w.undo_policy_ext();
        return written;
    }
    w.switch_active_set();
    const auto change = w.update_active_policies();
    w.delete_flows_of_removed(change);
    w.delete_ext_of_removed(change);
    w.write_socket_shaping(change);
    w.catch_up_old_set();
    return {};
}

Datapath::Impl::SetWriter::SetWriter(Datapath &dp, const SetChange &c,
                                     const std::vector<Policy> *all)
    : dp_(dp), impl_(*dp.impl_), skel_(impl_.skel), c_(c), all_(all),
      active_(impl_.runtime->active_set & 1), next_(active_ ^ 1),
      whole_(!impl_.in_sync ||
             c.upserts.size() + c.removes.size() > std::max<size_t>(64, impl_.active.size() / 4)) {}

// Fresh state and counters for ids that were not active (an id can be reused); a policy that
// starts (or stops) being a fleet policy holds no tokens from before.
void Datapath::Impl::SetWriter::prepare_policy_maps() {
    const size_t ncpus = possible_cpus();
    std::vector<tcm_counters> zero_counters(ncpus);
    std::set<uint32_t> fresh;
    for (const auto &p : c_.upserts) {
        auto was = impl_.active.find(p.id);
        if (was == impl_.active.end())
            fresh.insert(p.id);
        if (was == impl_.active.end() || was->second.fleet != p.fleet)
            dp_.fleet_set_lease(p.id, {});
    }
    if (!fresh.empty()) {
        // In two batches (a fresh set of 16k policies is 32k entries), else one by one.
        std::vector<uint32_t> ids(fresh.begin(), fresh.end());
        std::vector<tcm_flow> states(ids.size());
        std::vector<tcm_counters> counters(ids.size() * ncpus);
        int state_fd = fd(skel_->maps.tcm_policy_state);
        int stats_fd = fd(skel_->maps.tcm_policy_stats);
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
        int tcp_fd = fd(skel_->maps.tcm_tcp_stats);
        n = static_cast<uint32_t>(ids.size());
        if (bpf_map_update_batch(tcp_fd, ids.data(), tcp.data(), &n, nullptr) != 0)
            for (uint32_t id : ids)
                bpf_map_update_elem(tcp_fd, &id, tcp.data(), 0);
        impl_.forget_counters(ids);
    }
    // --shape edt: the reciprocal of the policy's rate (bpf/lib/edt.h), in place before the set
    // that uses it is active. A packet of the old set that reads a new rate's reciprocal gets a
    // departure the meter still checks: later than needed, or refused (dropped as red).
    for (const auto &p : c_.upserts)
        if (p.shape == TCM_SHAPE_EDT) {
            tcm_edt_cfg e{edt_recip(make_meter_config(p.meter))};
            uint32_t id = p.id;
            bpf_map_update_elem(fd(skel_->maps.tcm_edt_cfg), &id, &e, 0);
        }
    // --warmup, --quota (bpf/lib/quota.h): the config, in place before the set that uses it. The
    // buckets' state stays through a change (a quota's used bytes too); a change of the periods
    // moves gen, so that each bucket's period ends where the new ones do. A fresh id starts
    // with no state (a policy of before may have left some on a reused id).
    if (!fresh.empty())
        impl_.delete_ext_if([&](uint32_t id) { return fresh.contains(id); });
    // A quota given anew (the policy had none) moves epoch: its buckets start from nothing.
    // What each entry held is kept until the set is active: a refused change puts it back.
    int ext_fd = fd(skel_->maps.tcm_policy_ext);
    for (const auto &p : c_.upserts)
        if (p.meter.has_warmup_or_quota()) {
            tcm_policy_ext x = make_policy_ext(p.meter), old{};
            uint32_t id = p.id;
            const bool had = bpf_map_lookup_elem(ext_fd, &id, &old) == 0;
            ext_before_.emplace_back(id, had ? std::optional(old) : std::nullopt);
            if (!fresh.contains(id) && had) {
                const tcm_quota_config &a = old.quota, &b = x.quota;
                x.quota.gen = a.gen + (a.period_ns != b.period_ns || a.anchor_ns != b.anchor_ns ||
                                       a.month_day != b.month_day);
                x.quota.epoch = old.quota.epoch + (!a.bytes && b.bytes);
            }
            bpf_map_update_elem(ext_fd, &id, &x, 0);
        }
    // The flows of an id are deleted when it leaves the set (step 5), so a fresh id has none;
    // maps adopted from pins may hold flows of ids no set holds: the first change deletes them.
    if (impl_.flows_unclean && !fresh.empty())
        delete_flows_if([&](uint32_t id) { return !impl_.active.contains(id); });
}

// Deletes the flows whose policy id @drop says to, from tcm_flow_slots with their tuples and
// from the tables of before while they hold flows.
void Datapath::Impl::SetWriter::delete_flows_if(const std::function<bool(uint32_t)> &drop) {
    for (uint32_t i = 0; i < impl_.meta->slots; ++i) {
        tcm_flow_id id;
        tcm_flow state;
        if (impl_.read_slot(i, id, state) && drop(TCM_FLOW_POLICY(id.head)) &&
            impl_.kill_slot(i, id, nullptr))
            impl_.drop_flow_tuple(id);
    }
    impl_.free_dying();
    if (impl_.prev_slots)
        for (uint32_t i = 0; i < impl_.prev_layout->slots; ++i) {
            tcm_flow_id id;
            tcm_flow state;
            if (impl_.read_slot_of_before(i, id, state) && drop(TCM_FLOW_POLICY(id.head)))
                impl_.kill_slot_of_before(i, id, nullptr);
        }
    if (impl_.flows_moving & TCM_MOVING_PREV) {
        int prev_fd = fd(skel_->maps.tcm_flows_prev);
        auto policy = [](const tcm_flow_id &k) { return TCM_FLOW_POLICY(k.head); };
        for (const auto &g : keys_to_drop<tcm_flow_id>(prev_fd, policy, drop))
            if (bpf_map_delete_elem(prev_fd, &g) == 0)
                impl_.drop_flow_tuple(g);
    }
    if (impl_.flows_moving & TCM_MOVING_OLD) {
        int old_fd = fd(skel_->maps.tcm_flows_old);
        auto old_policy = [](const tcm_flow_key &k) { return k.policy_id; };
        for (const auto &g : keys_to_drop<tcm_flow_key>(old_fd, old_policy, drop))
            bpf_map_delete_elem(old_fd, &g);
    }
}

Result<void> Datapath::Impl::SetWriter::write_inactive_set() {
    Result<void> written;
    if (whole_) {
        std::vector<Policy> whole;
        if (!all_) {
            std::map<uint32_t, Policy> after = impl_.active;
            for (uint32_t id : c_.removes)
                after.erase(id);
            for (const auto &p : c_.upserts)
                after[p.id] = p;
            for (auto &[id, p] : after)
                whole.push_back(std::move(p));
        }
        written = impl_.sets->rebuild(next_, all_ ? *all_ : whole);
    } else {
        written = impl_.sets->write(next_, c_);
    }
    if (!written) {
        impl_.in_sync = impl_.in_sync && !whole_;
        return written;
    }
    // The cgroup rules of the new set, whole: a few entries a cgroup, and ranks may have moved.
    // Refused here, the model already holds the change: it is no longer the active set, and the
    // next change rebuilds from the active policies (a refused change never goes live later).
    auto rules = impl_.cgroup_rules_of_model();
    written = rules ? impl_.write_cgroup_rules(next_, *rules)
                    : Result<void>(std::unexpected(rules.error()));
    if (!written)
        impl_.in_sync = false;
    return written;
}

// The version goes up by one, and its bit 0 is the set. The classification cache serves only
// entries of the active version; after 2^32 switches a version comes back, so the cache is
// emptied before it does.
void Datapath::Impl::SetWriter::switch_active_set() {
    const uint32_t version = impl_.runtime->active_set + 1;
    if (version == 0)
        dp_.clear_class_cache();
    __atomic_store_n(&impl_.runtime->active_set, version, __ATOMIC_RELEASE);
    impl_.switched_at = std::chrono::steady_clock::now();
    impl_.sets->switched(next_);
    impl_.in_sync = true; // the model is the active set now
}

Datapath::Impl::SetWriter::ActiveChange Datapath::Impl::SetWriter::update_active_policies() {
    ActiveChange out;
    auto shapes = [](const Policy &p) { return p.shape == TCM_SHAPE_SOCKETS ? 1 : 0; };
    for (uint32_t id : c_.removes)
        if (auto it = impl_.active.find(id); it != impl_.active.end()) {
            out.shaping_delta -= shapes(it->second);
            impl_.active.erase(it);
            out.removed.insert(id);
        }
    for (const auto &p : c_.upserts)
        if (auto it = impl_.active.find(p.id); it != impl_.active.end())
            out.shaping_delta -= shapes(it->second);
    for (const auto &p : c_.upserts)
        out.shaping_delta += shapes(p);
    if (all_) {
        std::set<uint32_t> ids;
        for (const auto &p : *all_)
            ids.insert(p.id);
        for (auto it = impl_.active.begin(); it != impl_.active.end();)
            if (!ids.contains(it->first)) {
                out.removed.insert(it->first);
                it = impl_.active.erase(it);
            } else {
                ++it;
            }
    }
    for (const auto &p : c_.upserts)
        out.changed[p.id] = &(impl_.active[p.id] = p);
    return out;
}

// A scan of the whole flow table, so only when a policy was removed (a plain update keeps every
// id). After adopting pins, every id no set holds.
void Datapath::Impl::SetWriter::delete_flows_of_removed(const ActiveChange &change) {
    if (impl_.flows_unclean)
        delete_flows_if([&](uint32_t id) { return !impl_.active.contains(id); });
    else if (!change.removed.empty())
        delete_flows_if([&](uint32_t id) { return change.removed.contains(id); });
    impl_.flows_unclean = false;
}

void Datapath::Impl::SetWriter::undo_policy_ext() {
    int ext_fd = fd(skel_->maps.tcm_policy_ext);
    for (const auto &[id, old] : ext_before_)
        if (old)
            bpf_map_update_elem(ext_fd, &id, &*old, 0);
        else
            bpf_map_delete_elem(ext_fd, &id);
}

// The config and the state of policies that are gone or have neither a warm-up nor a quota now
// (a new quota starts from nothing). After adopting pins, of every id no set holds.
void Datapath::Impl::SetWriter::delete_ext_of_removed(const ActiveChange &change) {
    auto without = [&](uint32_t id) {
        auto it = impl_.active.find(id);
        return it == impl_.active.end() || !it->second.meter.has_warmup_or_quota();
    };
    if (impl_.ext_unclean)
        impl_.delete_ext_if(without);
    else if (!change.removed.empty() ||
             std::ranges::any_of(change.changed, [&](auto &c) { return without(c.first); }))
        impl_.delete_ext_if([&](uint32_t id) {
            return change.removed.contains(id) || (change.changed.contains(id) && without(id));
        });
    impl_.ext_unclean = false;
}

// A change bumps the policy's generation so that its sockets re-read their share, and so does a
// policy that left (its sockets go unpaced).
void Datapath::Impl::SetWriter::write_socket_shaping(const ActiveChange &change) {
    int shape_fd = fd(skel_->maps.tcm_shape_cfg);
    auto write_shape = [&](uint32_t id, uint64_t rate, uint32_t per_socket) {
        tcm_shape_cfg old{};
        bpf_map_lookup_elem(shape_fd, &id, &old);
        if (old.rate == rate && old.per_socket == per_socket)
            return;
        tcm_shape_cfg cfg{rate, per_socket, old.gen + 1};
        bpf_map_update_elem(shape_fd, &id, &cfg, 0);
    };
    for (const auto &[id, p] : change.changed) {
        bool on = p->shape == TCM_SHAPE_SOCKETS;
        write_shape(id, on ? shape_payload_rate(*p) : 0, p->per == TCM_PER_5TUPLE);
    }
    for (uint32_t id : change.removed)
        write_shape(id, 0, 0);
    if (all_ || c_.upserts.size() + change.removed.size() > 1) {
        impl_.shaping = 0;
        for (const auto &[id, p] : impl_.active)
            impl_.shaping += p.shape == TCM_SHAPE_SOCKETS;
    } else {
        impl_.shaping += change.shaping_delta;
    }
    __atomic_store_n(&skel_->bss->tcm_shape_policies, impl_.shaping, __ATOMIC_RELEASE);
}

// After a rebuild the other set is far behind the new one. Once no packet can still be reading
// it (an RCU grace period, which membarrier(MEMBARRIER_CMD_GLOBAL) waits for: the programs run
// under RCU), it is brought up too, so that the next change of one policy writes only what it
// changes. Without the grace period, that change catches it up.
void Datapath::Impl::SetWriter::catch_up_old_set() {
    if (whole_ && syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
        (void)impl_.sets->catch_up(active_);
}

// Every slot of every CPU emptied (an answer of 0): one write of all CPUs' values a slot.
void Datapath::clear_class_cache() {
    int fd = impl_->fd(impl_->skel->maps.tcm_class_cache);
    const uint32_t slots = bpf_map__max_entries(impl_->skel->maps.tcm_class_cache);
    const std::vector<tcm_class_cache_entry> empty(possible_cpus());
    for (uint32_t i = 0; i < slots; ++i)
        bpf_map_update_elem(fd, &i, empty.data(), BPF_ANY);
}

} // namespace tricolor
