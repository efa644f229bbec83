// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_counters.cpp: reading what the data path counts: each policy's counters and state,
// and the global counters, summed over CPUs.
#include "datapath_impl.hpp"

#include "tricolor/text.hpp"

#include <fmt/format.h>

#include <linux/membarrier.h>
#include <sys/syscall.h>

namespace tricolor {

std::map<uint32_t, tcm_counters> Datapath::policy_counters() const {
    return impl_->counter_sums<tcm_counters>(0);
}

tcm_counters Datapath::policy_counter(uint32_t id) const {
    size_t ncpus = possible_cpus();
    std::vector<tcm_counters> per_cpu(ncpus);
    tcm_counters sum{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_policy_stats), &id, per_cpu.data()))
        return sum;
    for (const auto &c : per_cpu)
        for (int i = 0; i < TCM_NR_COLORS; ++i) {
            sum.packets[i] += c.packets[i];
            sum.bytes[i] += c.bytes[i];
        }
    impl_->add_carried(0, id, reinterpret_cast<uint64_t *>(&sum));
    return sum;
}

bpf_map *Datapath::Impl::counter_map(size_t which) const {
    return which == 0 ? skel->maps.tcm_policy_stats : skel->maps.tcm_tcp_stats;
}

namespace {
// The carried counts of an array whose values are @words u64: a hash map without preallocation
// (a host that never grew pays nothing for it), one entry per policy id and per fold's mark.
int make_carried_map(size_t words) {
    LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_NO_PREALLOC);
    return bpf_map_create(BPF_MAP_TYPE_HASH, "tcm_carried", sizeof(uint32_t),
                          static_cast<uint32_t>(words * sizeof(uint64_t)), TCM_MAX_POLICIES + 64,
                          &opts);
}
} // namespace

void Datapath::Impl::open_counter_arrays(uint32_t slots) {
    for (size_t w = 0; w < counters.size(); ++w) {
        bpf_map *m = counter_map(w);
        CounterArray &c = counters[w];
        c.words = bpf_map__value_size(m) / sizeof(uint64_t);
        if (int err = bpf_map__set_max_entries(m, slots); err < 0)
            throw std::runtime_error(fmt::format("cannot size {} to {} policies: {}",
                                                 kCounterPins[w], slots, errno_text(err)));
        if (pin_path.empty())
            continue;
        const std::string at = pin_path + "/" + kCounterPins[w], prev = at + kOfBefore,
                          carried = at + kCarried;
        bool have_prev = access(prev.c_str(), F_OK) == 0;
        if (auto n = detail::pinned_map_size(at).first; n && n != slots) {
            if (have_prev)
                throw std::runtime_error(fmt::format(
                    "cannot size the counters {} from {} to {} policies: the counters of an "
                    "earlier resize ({}) are not carried over yet (programs of an earlier data "
                    "path still count into them); detach those, or restart the daemon",
                    at, n, slots, prev));
            if (rename(at.c_str(), prev.c_str()) != 0)
                throw std::runtime_error(
                    fmt::format("cannot set the counters {} aside: {}", at, errno_text(errno)));
            counters_set_aside = have_prev = true;
        }
        // Made by the first fold (a host whose tables never grew has none).
        c.carried_fd = bpf_obj_get(carried.c_str());
        if (!have_prev)
            continue;
        c.prev_fd = bpf_obj_get(prev.c_str());
        bpf_map_info info{};
        uint32_t len = sizeof(info);
        if (c.prev_fd < 0 || bpf_obj_get_info_by_fd(c.prev_fd, &info, &len) != 0 ||
            info.value_size != c.words * sizeof(uint64_t))
            throw std::runtime_error(
                fmt::format("cannot read the counters of before {}: {}", prev,
                            c.prev_fd < 0 ? errno_text(errno) : std::string("another layout")));
        c.prev_entries = info.max_entries;
        c.prev_id = info.id;
        // Folded already by a daemon killed before it removed the pin: not twice.
        std::vector<uint64_t> v(c.words);
        uint32_t mark = kFoldMark | info.id;
        if (c.carried_fd >= 0 && bpf_map_lookup_elem(c.carried_fd, &mark, v.data()) == 0) {
            unlink(prev.c_str());
            close(c.prev_fd);
            c.prev_fd = -1;
        }
    }
}

void Datapath::Impl::add_carried(size_t which, uint32_t id, uint64_t *sum) const {
    const CounterArray &c = counters[which];
    const size_t ncpus = possible_cpus();
    std::vector<uint64_t> v(ncpus * c.words);
    if (c.prev_fd >= 0 && id < c.prev_entries && bpf_map_lookup_elem(c.prev_fd, &id, v.data()) == 0)
        detail::add_rows(sum, v.data(), ncpus, c.words);
    if (c.carried_fd >= 0 && bpf_map_lookup_elem(c.carried_fd, &id, v.data()) == 0)
        detail::add_rows(sum, v.data(), 1, c.words);
}

void Datapath::Impl::forget_counters(const std::vector<uint32_t> &ids) const {
    const size_t ncpus = possible_cpus();
    for (const CounterArray &c : counters) {
        std::vector<uint64_t> zero(ncpus * c.words);
        for (uint32_t id : ids) {
            if (c.carried_fd >= 0)
                bpf_map_delete_elem(c.carried_fd, &id);
            if (c.prev_fd >= 0 && id < c.prev_entries)
                bpf_map_update_elem(c.prev_fd, &id, zero.data(), 0);
        }
    }
}

bool Datapath::holds_counters_of_before() const {
    return std::ranges::any_of(impl_->counters, [](const auto &c) { return c.prev_fd >= 0; });
}

// Called once no program of before can count into the arrays of before (every hook runs this
// data path's, the root cgroup's too): after an RCU grace period for a packet still in one,
// each array of before is added into a new map of carried counts, which replaces the old one at
// its pin in one rename, with its mark; then the array's pin goes.
size_t Datapath::fold_counters_of_before() {
    if (!holds_counters_of_before())
        return 0;
    syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
    const size_t ncpus = possible_cpus();
    size_t carried = 0;
    for (size_t w = 0; w < impl_->counters.size(); ++w) {
        auto &c = impl_->counters[w];
        if (c.prev_fd < 0)
            continue;
        std::map<uint32_t, std::vector<uint64_t>> sums;
        auto add = [&](uint32_t id, const uint64_t *v, size_t n) {
            if (!impl_->active.contains(id))
                return;
            auto &s = sums[id];
            s.resize(c.words);
            detail::add_rows(s.data(), v, n, c.words);
        };
        if (c.carried_fd >= 0)
            detail::for_each_entry<uint32_t, uint64_t>(
                c.carried_fd, c.words, [&](uint32_t id, const uint64_t *v) { add(id, v, 1); });
        detail::for_each_entry<uint32_t, uint64_t>(
            c.prev_fd, ncpus * c.words, [&](uint32_t id, const uint64_t *v) { add(id, v, ncpus); },
            c.prev_entries);
        const std::string at = impl_->pin_path + "/" + kCounterPins[w], pin = at + kCarried,
                          next = pin + "_next";
        int nfd = make_carried_map(c.words);
        if (nfd < 0)
            throw std::runtime_error(fmt::format("cannot make the carried counters of {}: {}",
                                                 kCounterPins[w], errno_text(errno)));
        const std::vector<uint64_t> zero(c.words);
        for (const auto &[id, s] : sums)
            if (std::ranges::any_of(s, [](uint64_t x) { return x != 0; }) &&
                bpf_map_update_elem(nfd, &id, s.data(), 0) != 0) {
                int e = errno;
                close(nfd);
                throw std::runtime_error(fmt::format("cannot carry the counters of {}: {}",
                                                     kCounterPins[w], errno_text(e)));
            }
        uint32_t mark = kFoldMark | c.prev_id;
        unlink(next.c_str());
        if (bpf_map_update_elem(nfd, &mark, zero.data(), 0) != 0 ||
            bpf_obj_pin(nfd, next.c_str()) != 0 || rename(next.c_str(), pin.c_str()) != 0) {
            int e = errno;
            unlink(next.c_str());
            close(nfd);
            throw std::runtime_error(
                fmt::format("cannot carry the counters of {}: {}", kCounterPins[w], errno_text(e)));
        }
        unlink((at + kOfBefore).c_str());
        close(c.prev_fd);
        if (c.carried_fd >= 0)
            close(c.carried_fd);
        c.prev_fd = -1;
        c.carried_fd = nfd;
        carried = std::max(carried, sums.size());
    }
    return carried;
}

tcm_global_counters Datapath::global_counters() const {
    const size_t ncpus = possible_cpus();
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
