// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// datapath_shape.cpp: --shape sockets on the data path's side: the interfaces sockets are
// classified against, the sock_ops program, and per policy the paced sockets and the shaping
// and AQM counters.
#include "datapath_impl.hpp"

namespace tricolor {

void Datapath::set_shape_ifaces(const std::vector<uint32_t> &ifindexes) {
    auto *bss = impl_->skel->bss;
    uint32_t n = 0;
    for (uint32_t idx : ifindexes)
        if (n < TCM_SHAPE_MAX_IFACES)
            bss->tcm_shape_ifaces[n++] = idx;
    __atomic_store_n(&bss->tcm_shape_n_ifaces, n, __ATOMIC_RELEASE);
}

int Datapath::sockops_prog_fd() const {
    return impl_->prog_fd(impl_->skel->progs.tricolor_sockops, "sock_ops");
}

std::map<uint32_t, ShapeCounters> Datapath::shape_counters() const {
    std::map<uint32_t, ShapeCounters> out;
    const auto tcp = impl_->counter_sums<tcm_tcp_counters>(1);
    for (const auto &[id, p] : impl_->active) {
        ShapeCounters c;
        tcm_shape_state st{};
        uint32_t key = id;
        if (bpf_map_lookup_elem(impl_->fd(impl_->skel->maps.tcm_shape_state), &key, &st) == 0)
            c.sockets = st.sockets > 0x7fffffffu ? 0 : st.sockets;
        if (auto it = tcp.find(id); it != tcp.end())
            c.tcp = it->second;
        out[id] = c;
    }
    return out;
}

} // namespace tricolor
