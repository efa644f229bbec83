// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// flow_slots_test.cpp: the flow table of slots (tricolor_abi.h, struct tcm_flow_slot; bpf/lib/
// flow.h): flows that share a home slot, a freed slot in the middle of their probe sequence, and
// two CPUs creating the same flows at once.
#include "datapath_fixture.hpp"
#include "tricolor/flow_sizing.hpp"

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include <bpf/bpf.h>

using namespace tricolor;
using namespace tricolor::test;

namespace {

// A per-source flow's id for the IPv4 source @addr (network order) under policy @policy.
tcm_flow_id src_id(uint32_t policy, uint32_t addr) {
    tcm_flow_id id{};
    id.head = TCM_FLOW_HEAD(policy, TCM_FLOW_SRC);
    id.w[2] = htonl(0xffff);
    id.w[3] = addr;
    return id;
}

std::vector<uint8_t> from(uint32_t addr, uint32_t l3 = 1000) {
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr, text, sizeof(text));
    return Packet().ipv4(text, "198.19.0.1").udp(1, 2).l3_size(l3).build();
}

class FlowSlotsTest : public DatapathFixture {
  protected:
    uint32_t flow_capacity() const override { return 16; } // 256 slots (the least)
    void SetUp() override {
        DatapathFixture::SetUp();
        int fd = map_of_prog(dp->xdp_prog_fd(), "tcm_flow_meta");
        ASSERT_GE(fd, 0) << "no tcm_flow_meta map on the XDP program";
        uint32_t zero = 0;
        ASSERT_EQ(bpf_map_lookup_elem(fd, &zero, &meta), 0);
        close(fd);
        ASSERT_EQ(meta.capacity, flow_capacity());
        ASSERT_EQ(meta.slots, flow_slots_for(flow_capacity()));
        ASSERT_GE(uint64_t{meta.slots} * TCM_SLOT_LOAD_NUM,
                  uint64_t{flow_capacity()} * TCM_SLOT_LOAD_DEN);
    }
    uint32_t home(const tcm_flow_id &id) const {
        return TCM_SLOT_HOME(&id, meta.seed, meta.slots, TCM_SLOT_SHIFT(meta.slots));
    }
    // Sources in 198.18.0.0/16 whose flows under policy 1 have the home slot of the first (or
    // @at): @n.
    std::vector<uint32_t> sharing_a_home(size_t n, std::optional<uint32_t> at = {}) const {
        std::vector<uint32_t> out;
        for (uint32_t i = 1; i < 65536 && out.size() < n; ++i) {
            uint32_t addr = htonl(0xc6120000u | i);
            uint32_t h = home(src_id(1, addr));
            if (at ? h == *at : out.empty() || h == home(src_id(1, out[0])))
                out.push_back(addr);
        }
        return out;
    }
    // The flows listed, by source address.
    std::multimap<uint32_t, Flow> by_source() const {
        std::multimap<uint32_t, Flow> out;
        for (const auto &f : dp->flows())
            out.emplace(f.key.src[3], f);
        return out;
    }
    tcm_flow_meta meta{};
};

// Four sources of one home sit in its slot and the three after it. Deleting the second frees
// its slot without hiding the third, whose next packet finds its own bucket (not a fresh one),
// and a new flow of that home takes the freed slot.
TEST_F(FlowSlotsTest, AFreedSlotHidesNoFlowBeyondItAndIsTakenAgain) {
    Policy p = policy(1, "per-src", Algo::srtcm, 8000, 3000, 0); // 1000 B/s, 3000 B
    p.per = TCM_PER_SRC;
    apply({p});
    auto srcs = sharing_a_home(4);
    ASSERT_EQ(srcs.size(), 4u);
    const uint32_t h = home(src_id(1, srcs[0]));
    uint32_t a = srcs[0], b = srcs[1], c = srcs[2], d = srcs[3];
    for (uint32_t s : {a, b, c})
        EXPECT_EQ(dp->run_xdp(from(s)).retval, XDP_PASS); // 2000 of 3000 left each
    auto flows = by_source();
    ASSERT_EQ(flows.size(), 3u);
    EXPECT_EQ(flows.find(a)->second.slot, h);
    EXPECT_EQ(flows.find(b)->second.slot, (h + 1) % meta.slots);
    EXPECT_EQ(flows.find(c)->second.slot, (h + 2) % meta.slots);

    // A second later b is full again; a and c take another packet each: only b is idle.
    dp->set_clock(2000000000);
    EXPECT_EQ(dp->run_xdp(from(a)).retval, XDP_PASS);
    EXPECT_EQ(dp->run_xdp(from(c)).retval, XDP_PASS); // 2000 left
    EXPECT_EQ(dp->reclaim_idle_flows(), 1u);
    flows = by_source();
    ASSERT_EQ(flows.size(), 2u);
    EXPECT_EQ(flows.count(b), 0u);

    // c, beyond the freed slot, is found: 2000 tokens, two more packets, then red.
    EXPECT_EQ(dp->run_xdp(from(c)).retval, XDP_PASS);
    EXPECT_EQ(dp->run_xdp(from(c)).retval, XDP_PASS);
    EXPECT_EQ(dp->run_xdp(from(c)).retval, XDP_DROP);
    flows = by_source();
    ASSERT_EQ(flows.count(c), 1u) << "c listed twice: a fresh flow beside the old one";
    EXPECT_EQ(flows.find(c)->second.state.counters.packets[TCM_GREEN], 4u);
    EXPECT_EQ(flows.find(c)->second.state.counters.packets[TCM_RED], 1u);

    // d, of the same home, takes b's slot.
    EXPECT_EQ(dp->run_xdp(from(d)).retval, XDP_PASS);
    flows = by_source();
    ASSERT_EQ(flows.count(d), 1u);
    EXPECT_EQ(flows.find(d)->second.slot, (h + 1) % meta.slots);
    EXPECT_EQ(dp->global_counters().table_full, 0u);
}

// A table of any number of slots (1250 for 1000 flows: not a power of two): every home is one of
// them, the last one's probe sequence goes on at slot 0, and a flow placed there is found again
// (its second packet meters in its own bucket: red, where a fresh one would be green).
class FlowSlotsOddTest : public FlowSlotsTest {
  protected:
    uint32_t flow_capacity() const override { return 1000; }
};

TEST_F(FlowSlotsOddTest, TheLastSlotsProbesGoOnAtTheFirst) {
    ASSERT_EQ(meta.slots, 1250u);
    Policy p = policy(1, "per-src", Algo::srtcm, 8000, 1500, 0); // 1000 B/s, 1500 B
    p.per = TCM_PER_SRC;
    apply({p});
    auto srcs = sharing_a_home(2, meta.slots - 1);
    ASSERT_EQ(srcs.size(), 2u) << "no two sources of the last home";
    for (uint32_t s : srcs)
        EXPECT_EQ(dp->run_xdp(from(s)).retval, XDP_PASS);
    auto flows = by_source();
    ASSERT_EQ(flows.size(), 2u);
    EXPECT_EQ(flows.find(srcs[0])->second.slot, meta.slots - 1);
    EXPECT_EQ(flows.find(srcs[1])->second.slot, 0u);
    EXPECT_EQ(dp->run_xdp(from(srcs[1])).retval, XDP_DROP); // 500 tokens left: its own bucket
    flows = by_source();
    ASSERT_EQ(flows.count(srcs[1]), 1u);
    EXPECT_EQ(flows.find(srcs[1])->second.state.counters.packets[TCM_RED], 1u);
    // The homes of 65535 sources cover the slots, none beyond the last.
    std::vector<bool> seen(meta.slots);
    for (uint32_t i = 1; i < 65536; ++i) {
        uint32_t h = home(src_id(1, htonl(0xc6120000u | i)));
        ASSERT_LT(h, meta.slots);
        seen[h] = true;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), meta.slots);
}

// A home whose probe sequence is full (TCM_FLOW_PROBES flows of that home before it) has no
// room for one more even though the table does: that flow is metered in the aggregate bucket
// and counted in table_full, as when the table is full.
class FlowSlotsBigTest : public FlowSlotsTest {
  protected:
    uint32_t flow_capacity() const override { return 160; } // 256 slots: room for the 129th
};

TEST_F(FlowSlotsBigTest, AFullProbeSequenceSendsANewFlowToTheAggregate) {
    Policy p = policy(1, "per-src", Algo::srtcm, 8000, 3000, 0);
    p.per = TCM_PER_SRC;
    apply({p});
    auto srcs = sharing_a_home(TCM_FLOW_PROBES + 1);
    ASSERT_EQ(srcs.size(), TCM_FLOW_PROBES + 1u);
    for (uint32_t i = 0; i < TCM_FLOW_PROBES; ++i)
        EXPECT_EQ(dp->run_xdp(from(srcs[i], 100)).retval, XDP_PASS);
    EXPECT_EQ(dp->flows().size(), size_t{TCM_FLOW_PROBES});
    EXPECT_EQ(dp->global_counters().table_full, 0u);
    EXPECT_EQ(dp->run_xdp(from(srcs[TCM_FLOW_PROBES], 100)).retval, XDP_PASS);
    EXPECT_EQ(dp->flows().size(), size_t{TCM_FLOW_PROBES});
    EXPECT_EQ(dp->global_counters().table_full, 1u);
    EXPECT_EQ(dp->policy_state(1).counters.packets[TCM_GREEN], 1u);
}

// Two CPUs send the same new sources in the same order, in step: each flow is created once
// (the second CPU waits at the home slot's guard, then finds it), so each lists once with both
// packets. Without the guard both CPUs miss, both take a slot, and the flow lists twice.
TEST_F(DatapathTest, TwoCpusCreatingTheSameFlowsMakeEachOnce) {
    if (std::thread::hardware_concurrency() < 2)
        GTEST_SKIP() << "needs two CPUs";
    Policy p = policy(1, "per-src", Algo::srtcm, 8000000, 100000, 0);
    p.per = TCM_PER_SRC;
    apply({p});
    constexpr uint32_t kFlows = 4000;
    std::vector<std::vector<uint8_t>> frames;
    for (uint32_t i = 0; i < kFlows; ++i)
        frames.push_back(from(htonl(0xc6120000u | (i + 1)), 100));
    std::atomic<uint32_t> arrived{0};
    auto run = [&](int cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
        for (uint32_t i = 0; i < kFlows; ++i) {
            // Both at frame i before either sends it.
            arrived.fetch_add(1);
            while (arrived.load() < 2 * (i + 1))
                ;
            LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frames[i].data(),
                        .data_size_in = static_cast<uint32_t>(frames[i].size()), .repeat = 1);
            bpf_prog_test_run_opts(dp->xdp_prog_fd(), &opts);
        }
    };
    std::thread t0(run, 0), t1(run, 1);
    t0.join();
    t1.join();
    auto flows = dp->flows();
    std::map<uint32_t, uint64_t> packets;
    for (const auto &f : flows)
        ++packets[f.key.src[3]];
    EXPECT_EQ(flows.size(), size_t{kFlows}) << "a flow created twice";
    EXPECT_EQ(packets.size(), size_t{kFlows});
    size_t twice = 0, both = 0;
    for (const auto &f : flows) {
        twice += packets[f.key.src[3]] > 1;
        both += f.state.counters.packets[TCM_GREEN] == 2;
    }
    EXPECT_EQ(twice, 0u);
    EXPECT_EQ(both, size_t{kFlows}) << "a flow that did not count both CPUs' packets";
    EXPECT_EQ(dp->global_counters().table_full, 0u);
}

} // namespace
