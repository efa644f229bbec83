// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// bpf_replay.cpp: the replay's BPF engine. The program's globals live in the skeleton's .bss,
// which libbpf mmaps, so setting the clock and incoming colour before each run is a store, not
// a syscall: one BPF_PROG_TEST_RUN per packet is the whole cost.
#include "tricolor/replay.hpp"
#include "tricolor/bpf_load.hpp"
#include "tricolor/text.hpp"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include "tricolor_abi.h"
#include "replay.skel.h"

namespace tricolor {
namespace {

constexpr size_t kEthHeader = 14;

} // namespace

struct BpfEngine::Impl {
    replay *skel = nullptr;
    int prog_fd = -1;
    std::vector<uint8_t> frame;

    ~Impl() { replay::destroy(skel); }
};

BpfEngine::BpfEngine(const tcm_meter_config &config, const tcm_warm_config &warm,
                     const tcm_quota_config &quota)
    : impl_(std::make_unique<Impl>()) {
    impl_->skel = replay::open();
    if (!impl_->skel)
        throw std::runtime_error(
            fmt::format("cannot open the BPF replay program: {}", errno_text(errno)));
    impl_->skel->rodata->tcm_test_clock = 1;
    if (auto problem = kernel_support_problem(); !problem.empty())
        throw std::runtime_error("cannot load the BPF replay program: " + problem);
    if (auto loaded = load_bpf("the BPF replay program", [&] { return replay::load(impl_->skel); });
        !loaded)
        throw std::runtime_error(loaded.error());
    impl_->prog_fd = bpf_program__fd(impl_->skel->progs.tricolor_replay);
    auto &io = impl_->skel->bss->replay;
    io = {};
    io.config = config;
    io.ext = {warm, quota};
    // A fixed frame: an Ethernet header (IPv4 ethertype) and zeroes, of the largest length.
    impl_->frame.assign(kEthHeader + kMaxTracePacket, 0);
    impl_->frame[12] = 0x08;
}

BpfEngine::~BpfEngine() = default;

Color BpfEngine::mark(const TracePacket &p) {
    auto *bss = impl_->skel->bss;
    bss->tcm_test_clock_ns = p.time_ns;
    bss->replay.in_color = static_cast<uint32_t>(p.color);

    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = impl_->frame.data(),
                .data_size_in = static_cast<uint32_t>(kEthHeader + p.bytes), .repeat = 1);
    if (int err = bpf_prog_test_run_opts(impl_->prog_fd, &opts); err < 0)
        throw std::runtime_error(fmt::format("BPF_PROG_TEST_RUN of a {}-byte packet failed: {}",
                                             p.bytes, errno_text(err)));
    if (opts.retval != XDP_PASS)
        throw std::runtime_error(
            fmt::format("the BPF replay program returned {}, not XDP_PASS", opts.retval));
    return static_cast<Color>(bss->replay.out_color);
}

tcm_meter_state BpfEngine::state() const {
    return impl_->skel->bss->replay.state;
}

tcm_warm_state BpfEngine::warm_state() const {
    return impl_->skel->bss->replay.ext_state.warm;
}

tcm_quota_state BpfEngine::quota_state() const {
    return impl_->skel->bss->replay.ext_state.quota;
}

} // namespace tricolor
