// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_flows.cpp: the flow table: reading it, the passes that count and reclaim its flows
// and track the heavy hitters, and flows --top.
#include "datapath_impl.hpp"
#include "tricolor/bpf_load.hpp"

#include <arpa/inet.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstring>
#include <functional>

namespace tricolor {
namespace {

bool key_less(const tcm_flow_key &a, const tcm_flow_key &b) {
    return std::memcmp(&a, &b, sizeof(a)) < 0;
}

// flows --top's order: the most bytes first, ties by key, so that every way of answering gives
// the same list.
bool busier(const Flow &a, const Flow &b) {
    uint64_t x = flow_bytes(a.state), y = flow_bytes(b.state);
    return x != y ? x > y : key_less(a.key, b.key);
}

void v4_mapped(uint32_t out[4], uint32_t addr) {
    out[0] = out[1] = 0;
    out[2] = htonl(0xffff);
    out[3] = addr;
}

// Whether a flow read now is as it was read then: no packet came between (each takes the lock,
// writes the time and counts itself), so deleting it forgets nothing.
bool unchanged_since(const tcm_flow &now, const tcm_flow &then) {
    return now.meter.last_ns == then.meter.last_ns && now.flags == then.flags &&
           std::memcmp(&now.counters, &then.counters, sizeof(now.counters)) == 0;
}

// The slot of the live flow @id in the table @slots of layout @m, or -1 (as flow_slot_lookup in
// bpf/lib/flow.h finds it).
int64_t find_in(const tcm_flow_slot *slots, const tcm_flow_meta &m, const tcm_flow_id &id) {
    uint32_t idx = detail::slot_home(id, m);
    for (uint32_t i = 0; i < TCM_FLOW_PROBES; ++i, idx = TCM_SLOT_NEXT(idx, m.slots)) {
        const tcm_flow_slot *s = &slots[idx];
        const uint32_t head = __atomic_load_n(&s->id.head, __ATOMIC_ACQUIRE);
        if (head == TCM_SLOT_EMPTY)
            return -1;
        if (head == id.head && std::memcmp(s->id.w, id.w, sizeof(id.w)) == 0)
            return idx;
    }
    return -1;
}

// Slot @s's flow, with true, if it holds one that stayed while it was read.
bool read_in(const tcm_flow_slot *s, tcm_flow_id &id, tcm_flow &state) {
    const uint32_t head = __atomic_load_n(&s->id.head, __ATOMIC_ACQUIRE);
    if (!TCM_SLOT_LIVE(head))
        return false;
    std::memcpy(&id, &s->id, sizeof(id));
    std::memcpy(&state, &s->flow, sizeof(state));
    // Still the same flow: a slot's id changes only after it died and was freed.
    return __atomic_load_n(&s->id.head, __ATOMIC_ACQUIRE) == head && id.head == head;
}

// Marks slot @s, if it still holds @id, dead: whatever packets do (no @expect), or under the
// flow's lock, as a packet, only if none came since @expect was read. False if it did not.
bool kill_in(tcm_flow_slot *s, const tcm_flow_id &id, const tcm_flow *expect) {
    if (__atomic_load_n(&s->id.head, __ATOMIC_ACQUIRE) != id.head ||
        std::memcmp(s->id.w, id.w, sizeof(id.w)) != 0)
        return false;
    if (!expect) {
        // Whatever packets do: the head is not the lock's (a packet that holds the flow meters
        // a dead slot, which no one takes before free_dying's grace period).
        uint32_t head = id.head;
        return __atomic_compare_exchange_n(&s->id.head, &head, TCM_SLOT_DYING, false,
                                           __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    uint32_t unlocked = 0;
    if (!__atomic_compare_exchange_n(&s->flow.lock, &unlocked, 1u, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return false;
    const bool same = unchanged_since(s->flow, *expect);
    if (same)
        __atomic_store_n(&s->id.head, TCM_SLOT_DYING, __ATOMIC_SEQ_CST);
    __atomic_store_n(&s->flow.lock, 0u, __ATOMIC_RELEASE);
    return same;
}

} // namespace

int64_t Datapath::Impl::find_slot(const tcm_flow_id &id) const {
    return find_in(slots, *meta, id);
}

bool Datapath::Impl::read_slot(uint32_t idx, tcm_flow_id &id, tcm_flow &state) const {
    return read_in(&slots[idx], id, state);
}

bool Datapath::Impl::kill_slot(uint32_t idx, const tcm_flow_id &id, const tcm_flow *expect) {
    if (!kill_in(&slots[idx], id, expect))
        return false;
    __atomic_fetch_sub(&meta->live, 1, __ATOMIC_SEQ_CST);
    dying.push_back(idx);
    return true;
}

int64_t Datapath::Impl::find_slot_of_before(const tcm_flow_id &id) const {
    return prev_slots ? find_in(prev_slots, *prev_layout, id) : -1;
}

bool Datapath::Impl::read_slot_of_before(uint32_t idx, tcm_flow_id &id, tcm_flow &state) const {
    // A flow moved stays in its slot of before, its lock word saying so.
    return read_in(&prev_slots[idx], id, state) && state.lock != TCM_FLOW_MOVED;
}

bool Datapath::Impl::kill_slot_of_before(uint32_t idx, const tcm_flow_id &id,
                                         const tcm_flow *expect) {
    return kill_in(&prev_slots[idx], id, expect);
}

void Datapath::Impl::free_dying() {
    if (dying.empty())
        return;
    // An RCU grace period (the programs run under rcu_read_lock): no packet that found a slot
    // before it died still holds it. membarrier refuses on nohz_full kernels: then a pause far
    // longer than any program run.
    if (syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) != 0)
        usleep(100 * 1000);
    for (uint32_t idx : dying) {
        uint32_t head = TCM_SLOT_DYING;
        __atomic_compare_exchange_n(&slots[idx].id.head, &head, TCM_SLOT_FREE, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    dying.clear();
}

int64_t Datapath::Impl::read_flow(const tcm_flow_id &id, tcm_flow &state) const {
    const int64_t slot = find_slot(id);
    tcm_flow_id read;
    // The slot read must still hold @id: between the find and the read it can die, be freed
    // (reclaim) and be taken by another flow, whose state is not @id's.
    return slot >= 0 && read_slot(static_cast<uint32_t>(slot), read, state) &&
                   std::memcmp(&read, &id, sizeof(id)) == 0
               ? slot
               : -1;
}

void Datapath::Impl::drop_flow_tuple(const tcm_flow_id &id) const {
    if (TCM_FLOW_KIND(id.head) != TCM_FLOW_5TUPLE6)
        return;
    const int tuples_fd = fd(skel->maps.tcm_flow_tuples);
    tcm_flow_key t{};
    if (bpf_map_lookup_elem(tuples_fd, &id, &t) != 0)
        return;
    bpf_map_delete_elem(tuples_fd, &id);
    // A packet that created the flow again before this delete wrote the same tuple, which the
    // delete took: put it back (a packet after it writes it itself; then this insert fails).
    if (find_slot(id) >= 0)
        bpf_map_update_elem(tuples_fd, &id, &t, BPF_NOEXIST);
}

namespace detail {

tcm_flow_key flow_key_of_id(const tcm_flow_id &id, int tuples_fd) {
    tcm_flow_key k{};
    k.policy_id = TCM_FLOW_POLICY(id.head);
    switch (TCM_FLOW_KIND(id.head)) {
    case TCM_FLOW_SRC:
    case TCM_FLOW_CGROUP: // the bucket id in the first two words, as flow_key_text reads it
        std::memcpy(k.src, id.w, sizeof(k.src));
        break;
    case TCM_FLOW_DST:
        std::memcpy(k.dst, id.w, sizeof(k.dst));
        break;
    case TCM_FLOW_5TUPLE4:
        v4_mapped(k.src, id.w[0]);
        v4_mapped(k.dst, id.w[1]);
        k.sport = static_cast<uint16_t>(id.w[2]);
        k.dport = static_cast<uint16_t>(id.w[2] >> 16);
        k.proto = static_cast<uint8_t>(id.w[3]);
        break;
    case TCM_FLOW_5TUPLE6:
        if (bpf_map_lookup_elem(tuples_fd, &id, &k) != 0) {
            // Not recorded (tcm_flow_tuples was full): the hash, so that flows stay apart.
            k = tcm_flow_key{};
            k.policy_id = TCM_FLOW_POLICY(id.head);
            std::memcpy(k.src, id.w, sizeof(k.src));
        }
        break;
    }
    return k;
}

void sort_unique(std::vector<tcm_flow_id> &keys) {
    auto less = [](const tcm_flow_id &a, const tcm_flow_id &b) {
        return std::memcmp(&a, &b, sizeof(a)) < 0;
    };
    std::ranges::sort(keys, less);
    auto same = [](const tcm_flow_id &a, const tcm_flow_id &b) {
        return std::memcmp(&a, &b, sizeof(a)) == 0;
    };
    keys.erase(std::unique(keys.begin(), keys.end(), same), keys.end());
}

std::optional<std::vector<tcm_flow_id>> hot_map_keys(int fd, bool drain) {
    auto entries = batch_entries<tcm_flow_id, uint8_t>(fd, drain);
    if (!entries)
        return std::nullopt;
    return std::move(entries->first);
}

} // namespace detail

template <typename F>
void Datapath::Impl::for_each_flow(F each) const {
    for (uint32_t i = 0; i < meta->slots; ++i) {
        tcm_flow_id id;
        tcm_flow state;
        if (read_slot(i, id, state))
            each(id, nullptr, state, i);
    }
    // Flows of the tables of before that no packet has moved yet.
    if (prev_slots)
        for (uint32_t i = 0; i < prev_layout->slots; ++i) {
            tcm_flow_id id;
            tcm_flow state;
            if (read_slot_of_before(i, id, state))
                each(id, nullptr, state, Flow::kInSlotsOfBefore | i);
        }
    if (flows_moving & TCM_MOVING_PREV)
        detail::for_each_entry<tcm_flow_id, tcm_flow>(fd(skel->maps.tcm_flows_prev), 1,
                                                      [&](const tcm_flow_id &k, const tcm_flow *v) {
                                                          if (v->lock != TCM_FLOW_MOVED)
                                                              each(k, nullptr, *v, Flow::kInPrev);
                                                      });
    // Flows in a table of the growth's own not yet taken by a growth: made there while a
    // growth loaded, or flows of before put there (spill_flows_of_before; at --max-flows no
    // growth takes them, and they stay until a start moves them into the table).
    if (spill_fd >= 0)
        detail::for_each_entry<tcm_flow_id, tcm_flow>(spill_fd, 1,
                                                      [&](const tcm_flow_id &k, const tcm_flow *v) {
                                                          if (v->lock != TCM_FLOW_MOVED)
                                                              each(k, nullptr, *v, Flow::kInSpill);
                                                      });
    if (flows_moving & TCM_MOVING_OLD)
        detail::for_each_entry<tcm_flow_key, tcm_flow>(
            fd(skel->maps.tcm_flows_old), 1, [&](const tcm_flow_key &k, const tcm_flow *v) {
                if (v->lock != TCM_FLOW_MOVED)
                    each(tcm_flow_id{}, &k, *v, Flow::kInOld);
            });
}

std::vector<Flow> Datapath::flows() const {
    std::vector<Flow> out;
    int tuples = impl_->fd(impl_->skel->maps.tcm_flow_tuples);
    impl_->for_each_flow([&](const tcm_flow_id &id, const tcm_flow_key *whole,
                             const tcm_flow &state, uint32_t slot) {
        out.push_back(Flow{whole ? *whole : detail::flow_key_of_id(id, tuples), state, id, slot});
    });
    return out;
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
        for (const auto &[id, p] : impl_->active) {
            pass.configs[id] = make_meter_config(p.meter);
            if (p.meter.warmup_ns)
                pass.warmups[id] = p.meter.warmup_ns;
            if (p.meter.quota_bytes)
                pass.quotas[id] = p.meter.quota_bytes;
        }
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
    if (impl_->cgin) // the cgroup ingress program's copy (datapath_cgroups.cpp)
        __atomic_store_n(&impl_->cgin->data->tcm_hot_threshold, t, __ATOMIC_SEQ_CST);
    auto drained = detail::hot_map_keys(impl_->fd(impl_->skel->maps.tcm_flow_hot), true);
    uint64_t failed = __atomic_exchange_n(&impl_->skel->bss->tcm_hot_overflow, 0, __ATOMIC_SEQ_CST);
    if (impl_->cgin)
        failed += __atomic_exchange_n(&impl_->cgin->bss->tcm_hot_overflow, 0, __ATOMIC_SEQ_CST);
    // A drained map that was full may have refused an insert whose count is not visible yet.
    if (!drained || failed || drained->size() >= impl_->hot_capacity || foreign_flow_writers())
        keep = false;
    hot.threshold = t;
    if (keep) {
        hot.keys.insert(hot.keys.end(), drained->begin(), drained->end());
        detail::sort_unique(hot.keys);
    } else {
        hot.valid = false;
        hot.keys.clear();
    }
    pass.threshold = t;
    pass.now = now_ns();
    pass.wall = pass.now + wall_offset();
    return pass;
}

void Datapath::walk_flow_pass(FlowPass &pass) const {
    auto &top = pass.top;
    // @key: the flow's whole key if it is in tcm_flows_old (its @k is then 0), else unused.
    auto each = [&](const tcm_flow_id &k, const tcm_flow_key &key, const tcm_flow *v,
                    uint32_t slot) {
        ++pass.flows;
        const uint64_t bytes = flow_bytes(*v);
        if (bytes >= pass.threshold) {
            if (!Flow::in_table(slot))
                pass.heavy_over_cap = true; // not tracked there: flows --top walks
            else if (pass.heavy.size() < pass.heavy_cap)
                pass.heavy.push_back(k);
            else
                pass.heavy_over_cap = true;
        }
        if (pass.reclaim) {
            auto cfg = pass.configs.find(k.head ? TCM_FLOW_POLICY(k.head) : key.policy_id);
            if (cfg != pass.configs.end() && !v->lock) {
                // Exactly what the next packet would see: the shared refill code on a copy.
                tcm_meter_state s = v->meter;
                // Under a warm-up, full at the full rates from D after the last packet: by then
                // the meter is cold, as a flow made again is, and its warm-up over (it earns no
                // more than the full rates before).
                auto warm = pass.warmups.find(cfg->first);
                bool may_go = true;
                if (warm != pass.warmups.end()) {
                    may_go = pass.now > s.last_ns && pass.now - s.last_ns >= warm->second;
                    s.last_ns += may_go ? warm->second : 0;
                }
                meter_refill(&cfg->second, &s, pass.now);
                // Over its quota, the over meter takes its packets and its meter's last_ns
                // stays: it is not idle, and stays until its period ends.
                if (auto q = pass.quotas.find(cfg->first); q != pass.quotas.end() && k.head) {
                    auto x = ext_state(k);
                    may_go = may_go &&
                             !(x && x->quota.used >= q->second && x->quota.period_end > pass.wall);
                }
                const bool started = v->flags & TCM_FLOW_F_STARTED;
                if (!started || (may_go && s.c_tokens >= cfg->second.c_size &&
                                 s.e_tokens >= cfg->second.e_size)) {
                    // Seen recently: left for an operator to look at, unless under pressure.
                    if (pass.min_idle_ns && started &&
                        pass.now - std::min<uint64_t>(pass.now, v->meter.last_ns) <
                            pass.min_idle_ns) {
                        pass.full_recent.push_back({key, *v, k, slot});
                    } else {
                        pass.reclaimable.push_back({key, *v, k, slot});
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
    };
    impl_->for_each_flow([&](const tcm_flow_id &id, const tcm_flow_key *whole,
                             const tcm_flow &state, uint32_t slot) {
        pass.old_flows += slot == Flow::kInOld;
        pass.prev_flows += slot == Flow::kInPrev;
        each(id, whole ? *whole : tcm_flow_key{}, &state, slot);
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
    auto &im = *impl_;
    const size_t end =
        todo.size() - pass.next_reclaim > max ? pass.next_reclaim + max : todo.size();
    for (; pass.next_reclaim < end; ++pass.next_reclaim) {
        // Only if no packet came since the walk read it: one that did may have taken tokens.
        const Flow &f = todo[pass.next_reclaim];
        if (Flow::in_table(f.slot)) {
            if (im.kill_slot(f.slot, f.id, &f.state)) {
                ++pass.reclaimed;
                im.drop_flow_tuple(f.id);
            }
            continue;
        }
        if (f.slot < Flow::kInSpill) { // in the table of slots of before a resize
            if (im.prev_slots &&
                im.kill_slot_of_before(f.slot - Flow::kInSlotsOfBefore, f.id, &f.state))
                ++pass.reclaimed;
            continue;
        }
        // In a table of before or the growth's own: by its key there (the whole key in
        // tcm_flows_old).
        const bool old = f.slot == Flow::kInOld, spilled = f.slot == Flow::kInSpill;
        if (spilled && im.spill_fd < 0)
            continue; // taken by a growth since the walk
        const int in =
            spilled ? im.spill_fd
                    : im.fd(old ? im.skel->maps.tcm_flows_old : im.skel->maps.tcm_flows_prev);
        const void *key = old ? static_cast<const void *>(&f.key) : &f.id;
        tcm_flow now{};
        if (bpf_map_lookup_elem(in, key, &now) != 0 || now.lock || !unchanged_since(now, f.state))
            continue;
        if (bpf_map_delete_elem(in, key) == 0) {
            ++pass.reclaimed;
            if (!spilled)
                --(old ? pass.old_flows : pass.prev_flows);
            if (!old)
                im.drop_flow_tuple(f.id);
        }
    }
    // Their slots free for new flows once no packet can hold them (one grace period a chunk).
    im.free_dying();
    return pass.next_reclaim < todo.size();
}

void Datapath::end_flow_pass(FlowPass &pass) {
    impl_->counted_flows = pass.flows - std::min(pass.flows, pass.reclaimed);
    impl_->delete_moved_prev();
    // A table of before is empty: its pin goes (the programs keep the map until replaced).
    if (!impl_->pin_path.empty()) {
        if ((impl_->flows_moving & TCM_MOVING_OLD) && pass.old_flows == 0) {
            unlink((impl_->pin_path + "/tcm_flows_old").c_str());
            impl_->flows_moving &= ~TCM_MOVING_OLD;
        }
        if ((impl_->flows_moving & TCM_MOVING_PREV) && pass.prev_flows == 0) {
            unlink((impl_->pin_path + "/tcm_flows_prev").c_str());
            impl_->flows_moving &= ~TCM_MOVING_PREV;
        }
    }
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
    detail::sort_unique(hot.keys);
    hot.valid = pass.threshold != ~0ull && !pass.heavy_over_cap && foreign_flow_writers() == 0;
    if (!hot.valid)
        hot.keys.clear();
}

TopTracking Datapath::top_tracking() const {
    return {impl_->hot.valid, impl_->hot.threshold, impl_->hot.keys.size()};
}

size_t Datapath::foreign_flow_writers() const {
    return programs_using(impl_->flows_map_id);
}

size_t Datapath::programs_using(uint32_t map_id) const {
    size_t n = 0;
    uint32_t id = 0;
    for (;;) {
        if (bpf_prog_get_next_id(id, &id) != 0) {
            if (errno == ENOENT)
                return n;
            // Cannot list programs (no CAP_SYS_ADMIN): the writers it can know of are an
            // earlier daemon's programs that may still run on a hook (none once every hook runs
            // this one's: release_previous_programs).
            return impl_->previous_progs.size();
        }
        if (std::ranges::find(impl_->own_progs, id) != impl_->own_progs.end())
            continue;
        int fd = bpf_prog_get_fd_by_id(id);
        if (fd < 0)
            continue; // gone meanwhile
        auto maps = prog_map_ids(fd);
        close(fd);
        if (std::ranges::find(maps, map_id) != maps.end())
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
        auto live = detail::hot_map_keys(impl_->fd(impl_->skel->maps.tcm_flow_hot), false);
        // A full map may have refused an insert whose count is not visible yet.
        if (!live || live->size() >= impl_->hot_capacity || foreign_flow_writers())
            return false;
        std::vector<tcm_flow_id> candidates = hot.keys;
        candidates.insert(candidates.end(), live->begin(), live->end());
        detail::sort_unique(candidates);
        int tuples = impl_->fd(impl_->skel->maps.tcm_flow_tuples);
        for (const auto &id : candidates) {
            if (!wanted(TCM_FLOW_POLICY(id.head)))
                continue;
            Flow f{{}, {}, id};
            const int64_t slot = impl_->read_flow(id, f.state);
            f.slot = static_cast<uint32_t>(slot);
            if (slot >= 0 && flow_bytes(f.state) >= hot.threshold) {
                f.key = detail::flow_key_of_id(id, tuples);
                out.push_back(f);
            }
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

} // namespace tricolor
