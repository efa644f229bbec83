// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_ext.cpp: the warm-ups' and quotas' maps (bpf/lib/chain.h, ext_meter_packet): their
// config by policy id (tcm_policy_ext, written by commit), their state by bucket
// (tcm_meter_ext, made by the data path), and the data path's UTC (tcm_wall).
#include <time.h>

#include "datapath_impl.hpp"

namespace tricolor {

namespace {

uint64_t clock_ns(clockid_t id) {
    timespec ts{};
    clock_gettime(id, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Every key of the hash map @fd.
template <typename K>
std::vector<K> all_keys(int fd) {
    std::vector<K> keys;
    K key{}, next{};
    const K *at = nullptr;
    while (bpf_map_get_next_key(fd, at, &next) == 0) {
        keys.push_back(next);
        key = next;
        at = &key;
    }
    return keys;
}

// Every entry of the state map, read in batches (a lookup each would cost two syscalls an entry:
// seconds at 10^6 states), or one by one where the kernel has no batches.
std::vector<std::pair<tcm_flow_id, tcm_ext_state>> all_states(int fd) {
    std::vector<std::pair<tcm_flow_id, tcm_ext_state>> out;
    if (auto entries = detail::batch_entries<tcm_flow_id, tcm_ext_state>(fd, false)) {
        for (size_t i = 0; i < entries->first.size(); ++i)
            out.emplace_back(entries->first[i], entries->second[i]);
        return out;
    }
    for (const auto &k : all_keys<tcm_flow_id>(fd)) {
        tcm_ext_state st{};
        if (bpf_map_lookup_elem(fd, &k, &st) == 0)
            out.emplace_back(k, st);
    }
    return out;
}

} // namespace

void Datapath::Impl::delete_ext_if(const std::function<bool(uint32_t)> &drop) {
    int states = fd(skel->maps.tcm_meter_ext), configs = fd(skel->maps.tcm_policy_ext);
    for (const auto &k : all_keys<tcm_flow_id>(states))
        if (drop(TCM_FLOW_POLICY(k.head)))
            bpf_map_delete_elem(states, &k);
    for (uint32_t id : all_keys<uint32_t>(configs))
        if (drop(id))
            bpf_map_delete_elem(configs, &id);
}

void Datapath::sync_wall_clock() {
    if (impl_->testing)
        return;
    // UTC minus CLOCK_MONOTONIC, read between two reads of the other: the pair closest in time.
    uint64_t best = UINT64_MAX, offset = 0;
    for (int i = 0; i < 3; ++i) {
        uint64_t m0 = clock_ns(CLOCK_MONOTONIC), r = clock_ns(CLOCK_REALTIME),
                 m1 = clock_ns(CLOCK_MONOTONIC);
        if (m1 - m0 < best) {
            best = m1 - m0;
            offset = r - (m0 + (m1 - m0) / 2);
        }
    }
    const uint64_t was = wall_offset(), moved = offset > was ? offset - was : was - offset;
    if (moved > 1000000)
        set_wall_offset(offset);
}

uint64_t Datapath::wall_offset() const {
    uint32_t zero = 0;
    tcm_wall w{};
    bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_wall), &zero, &w);
    return w.offset_ns;
}

void Datapath::set_wall_offset(uint64_t offset_ns) {
    uint32_t zero = 0;
    tcm_wall w{offset_ns};
    bpf_map_update_elem(impl_->fd(impl_->skel->maps.tcm_wall), &zero, &w, 0);
}

std::optional<Datapath::QuotaUse> Datapath::quota_use(uint32_t policy_id,
                                                      const tcm_flow_id *flow) const {
    tcm_policy_ext x{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_ext), &policy_id, &x) != 0 ||
        !x.quota.bytes)
        return std::nullopt;
    tcm_flow_id key{};
    key.head = TCM_FLOW_HEAD(policy_id, 0);
    if (flow)
        key = *flow;
    tcm_ext_state st{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_meter_ext), &key, &st) != 0 ||
        !st.quota.period_end)
        return std::nullopt;
    // What the next packet would see: a period over has used nothing (quota.h, quota_used).
    quota_used(&x.quota, &st.quota, now_ns() + wall_offset());
    QuotaUse u;
    u.quota = x.quota.bytes;
    u.used = st.quota.used;
    u.left = u.used < u.quota ? u.quota - u.used : 0;
    u.reset_ns = st.quota.period_end;
    return u;
}

std::vector<Datapath::QuotaSaved> Datapath::quota_uses() const {
    auto &im = *impl_;
    int states = im.fd(im.skel->maps.tcm_meter_ext);
    const uint64_t wall = now_ns() + wall_offset();
    std::vector<QuotaSaved> out;
    std::map<uint32_t, std::optional<tcm_policy_ext>> configs;
    int configs_fd = im.fd(im.skel->maps.tcm_policy_ext);
    for (auto [k, st] : all_states(states)) {
        uint32_t id = TCM_FLOW_POLICY(k.head);
        auto [c, fresh] = configs.try_emplace(id);
        if (fresh) {
            tcm_policy_ext x{};
            if (bpf_map_lookup_elem(configs_fd, &id, &x) == 0 && x.quota.bytes)
                c->second = x;
        }
        if (!c->second || st.quota_epoch != c->second->quota.epoch)
            continue;
        // As the next packet would see it: a period over, or changed, is the config's.
        quota_used(&c->second->quota, &st.quota, wall);
        if (st.quota.used)
            out.push_back({k, st.quota.used, st.quota.period_end});
    }
    return out;
}

std::optional<tcm_ext_state> Datapath::ext_state(const tcm_flow_id &key) const {
    tcm_ext_state st{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_meter_ext), &key, &st) != 0)
        return std::nullopt;
    return st;
}

bool Datapath::restore_quota_use(const QuotaSaved &saved) {
    tcm_ext_state st{};
    st.quota.used = saved.used;
    st.quota.period_end = saved.period_end;
    uint32_t id = TCM_FLOW_POLICY(saved.key.head);
    tcm_policy_ext x{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_ext), &id, &x) != 0 ||
        !x.quota.bytes)
        return false;
    st.quota.gen = x.quota.gen;
    return bpf_map_update_elem(impl_->fd(impl_->skel->maps.tcm_meter_ext), &saved.key, &st,
                               BPF_NOEXIST) == 0;
}

size_t Datapath::reclaim_ext_states() {
    auto &im = *impl_;
    int states = im.fd(im.skel->maps.tcm_meter_ext), configs = im.fd(im.skel->maps.tcm_policy_ext);
    const uint64_t wall = now_ns() + wall_offset();
    size_t n = 0;
    for (const auto &[k, st] : all_states(states)) {
        if (TCM_FLOW_KIND(k.head) == 0)
            continue; // an aggregate's: it goes with its policy
        if (im.find_slot(k) >= 0 || im.find_slot_of_before(k) >= 0)
            continue; // the flow is there
        tcm_policy_ext x{};
        uint32_t id = TCM_FLOW_POLICY(k.head);
        const bool quota = bpf_map_lookup_elem(configs, &id, &x) == 0 && x.quota.bytes;
        if (quota && st.quota.used && st.quota.period_end > wall)
            continue; // a use of this period: the flow made again keeps it
        // A packet may have made the flow again since find_slot: its state goes with this,
        // and it meters on as a flow made afresh (a new state, cold, its quota's use 0).
        n += bpf_map_delete_elem(states, &k) == 0;
    }
    return n;
}

} // namespace tricolor
