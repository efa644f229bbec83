// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_counters.cpp: reading what the data path counts: each policy's counters and state,
// and the global counters, summed over CPUs.
#include "datapath_impl.hpp"

namespace tricolor {

std::map<uint32_t, tcm_counters> Datapath::policy_counters() const {
    std::map<uint32_t, tcm_counters> out;
    if (impl_->active.empty())
        return out;
    size_t ncpus = static_cast<size_t>(libbpf_num_possible_cpus());
    // Ids are given lowest first: up to the highest active one, not the whole array (16384
    // policies, per CPU), which a reader once a second (--web) would pay for every time.
    detail::for_each_entry<uint32_t, tcm_counters>(
        impl_->fd(impl_->skel->maps.tcm_policy_stats), ncpus,
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
        },
        impl_->active.rbegin()->first + size_t{1});
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

tcm_flow Datapath::policy_state(uint32_t id) const {
    tcm_flow f{};
    bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_state), &id, &f);
    return f;
}

} // namespace tricolor
