// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_testing.cpp: what tests drive the data path with: testing mode (the test clock,
// programs run through BPF_PROG_TEST_RUN and what the last run decided) and hooks that read or
// set internals directly. In the library, not only in the tests, because testing mode is how
// hier_replay.cpp runs the real programs on a trace, and the BPF tests link this library.
#include "datapath_impl.hpp"
#include "tricolor/text.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace tricolor {

void Datapath::set_clock(uint64_t now_ns) {
    if (!impl_->testing)
        throw std::logic_error("set_clock needs a Datapath loaded in testing mode");
    impl_->skel->bss->tcm_test_clock_ns = now_ns;
    if (impl_->cgin)
        impl_->cgin->bss->tcm_test_clock_ns = now_ns;
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

uint32_t Datapath::run_xdp_verdict(const std::vector<uint8_t> &frame) const {
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()), .repeat = 1);
    if (int err = bpf_prog_test_run_opts(xdp_prog_fd(), &opts); err < 0)
        throw std::runtime_error(fmt::format("XDP test run failed: {}", errno_text(err)));
    return opts.retval;
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

Datapath::TestRun Datapath::run_cgroup_in(const std::vector<uint8_t> &frame) {
    TestRun r;
    int fd = cgroup_in_prog_fd();
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()), .repeat = 1);
    if (int err = bpf_prog_test_run_opts(fd, &opts); err < 0)
        throw std::runtime_error(fmt::format("cgroup test run failed: {}", errno_text(err)));
    r.retval = opts.retval;
    return r;
}

void Datapath::set_version_for_test(uint32_t version) {
    if (!impl_->testing)
        throw std::logic_error("set_version_for_test: testing mode only");
    if ((version & 1) != (impl_->runtime->active_set & 1))
        throw std::logic_error("set_version_for_test: bit 0 must stay the active set");
    __atomic_store_n(&impl_->runtime->active_set, version, __ATOMIC_RELEASE);
}

namespace {

// The keys (of type K) in the map @fd.
template <typename K>
size_t count_keys(int fd) {
    K key{}, next{};
    size_t n = 0;
    for (void *prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &key, ++n)
        key = next;
    return n;
}

} // namespace

// Both walk the cache as the counters' reads walk theirs (detail::for_each_entry: batched).
size_t Datapath::class_cache_entries() const {
    const size_t cpus = possible_cpus();
    size_t n = 0;
    detail::for_each_entry<uint32_t, tcm_class_cache_entry>(
        impl_->fd(impl_->skel->maps.tcm_class_cache), cpus,
        [&](uint32_t, const tcm_class_cache_entry *v) {
            for (size_t k = 0; k < cpus; ++k)
                n += (v[k].answer & TCM_CLASS_CACHED) != 0;
        });
    return n;
}

std::vector<tcm_class_cache_entry> Datapath::class_cache_of_cpu(int cpu) const {
    const size_t cpus = possible_cpus();
    if (cpu < 0 || static_cast<size_t>(cpu) >= cpus)
        throw std::out_of_range(fmt::format("no CPU {} of {}", cpu, cpus));
    std::vector<tcm_class_cache_entry> out(bpf_map__max_entries(impl_->skel->maps.tcm_class_cache));
    detail::for_each_entry<uint32_t, tcm_class_cache_entry>(
        impl_->fd(impl_->skel->maps.tcm_class_cache), cpus,
        [&](uint32_t slot, const tcm_class_cache_entry *v) { out.at(slot) = v[cpu]; });
    return out;
}

void Datapath::set_class_cache_slot(int cpu, uint32_t slot, const tcm_class_cache_entry &e) {
    const int fd = impl_->fd(impl_->skel->maps.tcm_class_cache);
    const size_t cpus = possible_cpus();
    std::vector<tcm_class_cache_entry> v(cpus);
    if (bpf_map_lookup_elem(fd, &slot, v.data()) != 0)
        throw std::runtime_error(fmt::format("no slot {} in tcm_class_cache", slot));
    v.at(static_cast<size_t>(cpu)) = e;
    if (bpf_map_update_elem(fd, &slot, v.data(), BPF_ANY) != 0)
        throw std::runtime_error(fmt::format("cannot write slot {} of tcm_class_cache", slot));
}

size_t Datapath::flow_tuple_entries() const {
    return count_keys<tcm_flow_id>(impl_->fd(impl_->skel->maps.tcm_flow_tuples));
}

tcm_flow_seed Datapath::flow_seed() const {
    uint32_t zero = 0;
    tcm_flow_seed seed{};
    if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_flow_seed), &zero, &seed) != 0)
        throw std::runtime_error("cannot read tcm_flow_seed");
    return seed;
}

size_t Datapath::last_set_writes() const {
    return impl_->sets->last_map_writes();
}

void Datapath::set_hot_threshold_for_test(uint64_t bytes) {
    __atomic_store_n(&impl_->skel->data->tcm_hot_threshold, bytes, __ATOMIC_SEQ_CST);
    if (impl_->cgin)
        __atomic_store_n(&impl_->cgin->data->tcm_hot_threshold, bytes, __ATOMIC_SEQ_CST);
}

std::vector<tcm_flow_key> Datapath::hot_keys() const {
    auto ids = detail::hot_map_keys(impl_->fd(impl_->skel->maps.tcm_flow_hot), false);
    if (!ids)
        throw std::runtime_error("cannot read tcm_flow_hot");
    detail::sort_unique(*ids);
    std::vector<tcm_flow_key> keys;
    for (const auto &id : *ids)
        keys.push_back(detail::flow_key_of_id(id, impl_->fd(impl_->skel->maps.tcm_flow_tuples)));
    return keys;
}

uint64_t Datapath::hot_overflow() const {
    return __atomic_load_n(&impl_->skel->bss->tcm_hot_overflow, __ATOMIC_SEQ_CST);
}

void Datapath::clear_hot_for_test() {
    (void)detail::hot_map_keys(impl_->fd(impl_->skel->maps.tcm_flow_hot), true);
}

} // namespace tricolor
