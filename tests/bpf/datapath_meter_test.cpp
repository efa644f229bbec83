// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Metering in the data path (bpf/tricolor.bpf.c) through BPF_PROG_TEST_RUN: colours equal to
// the vectors' expected files, counters and default actions, L2 length and overhead, colour-aware
// DSCP, multi-buffer frames.
#include "datapath_fixture.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <sstream>

using namespace tricolor;
using namespace tricolor::test; // DatapathTest, Packet, policy(), prefix(), v4udp()

namespace {

// ---- metering ---------------------------------------------------------------------------------

// The data path colours every vector's trace as the vector's .expected file says (computed by
// an exact rational model, independent of meter.h). An IPv4/UDP packet cannot be shorter than
// its 28 bytes of headers, so a byte-mode vector with shorter packets is scaled: every length,
// rate and bucket size times k. Tokens are then k times as many on both sides of every
// comparison (cost len*k*8e9 against CBS*k*8e9 + CIR*k*dt, fill times ceil(k*S/(k*R))
// unchanged), so each colour is exactly the vector's. A quota scales so too (its used bytes are
// k times as many), and so does its over meter; a warm-up's steps are times, unscaled.
TEST_F(DatapathTest, ColoursEqualTheExpectedFilesOnTheVectors) {
    auto vectors = test::load_vectors();
    ASSERT_GE(vectors.size(), 8u);
    size_t checked = 0, over_time = 0;
    for (const auto &v : vectors) {
        SCOPED_TRACE(v.name);
        MeterParams params = test::meter_from_args(v.args);
        over_time += params.warmup_ns || params.quota_bytes;
        std::istringstream in(test::read_file(v.trace_path));
        auto trace = parse_trace(in).value();
        std::vector<std::string> expected;
        std::istringstream ex(v.expected);
        for (std::string line; std::getline(ex, line);)
            if (!line.empty())
                expected.push_back(line.substr(line.rfind(',') + 1));
        ASSERT_EQ(expected.size(), trace.size());
        ASSERT_GE(trace.size(), 100u);
        Policy p;
        p.id = 7;
        p.name = v.name;
        p.meter = params;
        uint32_t shortest = std::ranges::min(trace, {}, &TracePacket::bytes).bytes;
        uint64_t k = p.meter.packet_mode ? 1 : (28 + shortest - 1) / shortest;
        auto scale = [k](std::optional<uint64_t> &x) {
            if (x)
                *x *= k;
        };
        p.meter.cir *= k;
        p.meter.cbs *= k;
        scale(p.meter.ebs);
        scale(p.meter.pir);
        scale(p.meter.pbs);
        scale(p.meter.eir);
        p.meter.quota_bytes *= k;
        if (auto &o = p.meter.over) {
            o->cir *= k;
            o->cbs *= k;
            scale(o->ebs);
            scale(o->pir);
            scale(o->pbs);
            scale(o->eir);
        }
        // Each colour rewrites its own DSCP (CS1, CS2, CS3) and passes: the output tells the
        // colour of every packet; the counters must agree at the end.
        const uint8_t out_dscp[3] = {8, 16, 24};
        for (int col = 0; col < 3; ++col)
            p.actions[col] = parse_action("dscp:" + std::to_string(out_dscp[col])).value();
        apply({});
        apply({p}); // a fresh id each vector: buckets start full
        uint64_t counts[3] = {};
        for (size_t i = 0; i < trace.size(); ++i) {
            const auto &pk = trace[i];
            // Packet mode ignores the length: any IP packet will do.
            uint32_t len = p.meter.packet_mode ? std::max<uint32_t>(pk.bytes, 28) : pk.bytes * k;
            dp->set_clock(pk.time_ns);
            uint8_t dscp = pk.color == Color::green ? 10 : pk.color == Color::yellow ? 12 : 14;
            auto r = dp->run_xdp(Packet()
                                     .ipv4("198.18.0.1", "198.18.0.2")
                                     .dscp(dscp)
                                     .udp(1, 2)
                                     .l3_size(len)
                                     .build());
            auto want = parse_color(expected[i]);
            ASSERT_TRUE(want.has_value()) << expected[i];
            counts[static_cast<int>(*want)]++;
            ASSERT_EQ(r.retval, XDP_PASS);
            ASSERT_GT(r.data_out.size(), 15u);
            ASSERT_EQ(r.data_out[15] >> 2, out_dscp[static_cast<int>(*want)])
                << "packet " << i + 1 << " t=" << pk.time_ns << " len=" << pk.bytes << ": expected "
                << expected[i];
        }
        auto c = dp->policy_counters()[7];
        for (int col = 0; col < 3; ++col)
            EXPECT_EQ(c.packets[col], counts[col]) << "colour " << col;
        ++checked;
    }
    EXPECT_EQ(checked, vectors.size());
    EXPECT_GE(over_time, 7u); // the warm-up and quota vectors are among them
}

TEST_F(DatapathTest, CountersAndDefaultActionsPerColour) {
    Policy p = policy(1, "small", Algo::srtcm, 8000, 1000, 1000); // 1000 B/s: no refill here
    apply({p});
    auto frame = Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(1000).build();
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_PASS); // green
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_PASS); // yellow
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_DROP); // red: dropped by default
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[TCM_GREEN], 1u);
    EXPECT_EQ(c.packets[TCM_YELLOW], 1u);
    EXPECT_EQ(c.packets[TCM_RED], 1u);
    EXPECT_EQ(c.bytes[TCM_GREEN], 1000u);
    EXPECT_EQ(c.bytes[TCM_RED], 1000u);
    dp->set_clock(1000000000 + 1000000000); // one second: 1000 bytes back
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_PASS);
    EXPECT_EQ(dp->policy_counters()[1].packets[TCM_GREEN], 2u);
}

TEST_F(DatapathTest, L2LengthAndOverhead) {
    Policy p = policy(1, "l2", Algo::srtcm, 8000, 1000000, 0);
    p.length = TCM_LEN_L2;
    p.overhead = 24;
    apply({p});
    dp->run_xdp(Packet().vlan(3).ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(100).build());
    EXPECT_EQ(dp->policy_counters()[1].bytes[TCM_GREEN], 18u + 100 + 24);
}

TEST_F(DatapathTest, ColourAwareTakesDscpThroughTheMap) {
    Policy p = policy(1, "aware", Algo::srtcm, 8000, 100000, 100000);
    p.meter.color_aware = true;
    apply({p});
    auto send = [&](uint8_t dscp) {
        dp->run_xdp(
            Packet().ipv4("198.18.0.1", "198.18.0.2").dscp(dscp).udp(1, 2).l3_size(100).build());
    };
    send(10); // AF11 green
    send(12); // AF12 yellow
    send(14); // AF13 red
    send(46); // EF: green under the AF map
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[TCM_GREEN], 2u);
    EXPECT_EQ(c.packets[TCM_YELLOW], 1u);
    EXPECT_EQ(c.packets[TCM_RED], 1u);
}

TEST_F(DatapathTest, MultiBufferFramesAreChargedTheirFullLength) {
    apply({policy(1, "jumbo", Algo::srtcm, 8000, 100000, 0)});
    auto frame = Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(9000).build();
    ASSERT_GT(frame.size(), 4096u); // more than the linear part of a test-run XDP buffer
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_PASS);
    EXPECT_EQ(dp->policy_counters()[1].bytes[TCM_GREEN], 9000u);
    EXPECT_EQ(dp->global_counters().malformed_packets, 0u);
}

} // namespace

namespace {

// docs/spec.md §14: a quota per source keeps each source's use apart; a flow reclaimed idle and
// made again keeps its use of the period, and a period that ends gives every flow its quota back.
TEST_F(DatapathTest, APerSourceQuotaIsEachSourcesAndOutlivesItsFlow) {
    Policy p = policy(1, "per-src", Algo::srtcm, 8000000000ull, 1 << 20, 0); // never red here
    p.per = TCM_PER_SRC;
    p.meter.quota_bytes = 3000;
    p.meter.quota_period_ns = 3600ull * 1000000000; // hours from the epoch
    p.actions[TCM_RED] = parse_action("drop").value();
    apply({p});
    const uint64_t hour = 3600ull * 1000000000, t0 = 10 * hour + 1000000000;
    auto send = [&](const char *src) {
        return dp->run_xdp(Packet().ipv4(src, "198.19.0.1").udp(1, 2).l3_size(1000).build()).retval;
    };
    dp->set_clock(t0);
    for (int i = 0; i < 3; ++i) // 1000, 2000, 3000: the third takes it to the quota, counted whole
        EXPECT_EQ(send("198.18.0.1"), XDP_PASS) << i;
    EXPECT_EQ(send("198.18.0.1"), XDP_DROP);
    EXPECT_EQ(send("198.18.0.2"), XDP_PASS); // another source's quota
    for (const auto &f : dp->flows()) {
        auto q = dp->quota_use(1, &f.id);
        ASSERT_TRUE(q.has_value());
        EXPECT_EQ(q->used, f.key.src[3] == htonl(0xc6120001) ? 3000u : 1000u);
        EXPECT_EQ(q->reset_ns, 11 * hour);
    }
    EXPECT_FALSE(dp->quota_use(1).has_value()); // no aggregate bucket has seen a packet
    // Idle and full: the second source's flow goes (the first is over its quota: not idle), and
    // its state stays: it holds a use of the period.
    dp->set_clock(t0 + 1000000000);
    EXPECT_EQ(dp->reclaim_idle_flows(), 1u);
    EXPECT_EQ(dp->reclaim_ext_states(), 0u);
    EXPECT_EQ(send("198.18.0.1"), XDP_DROP);
    EXPECT_EQ(send("198.18.0.2"), XDP_PASS); // made again: 2000 of 3000
    dp->set_clock(11 * hour);                // the period ends at the hour
    EXPECT_EQ(send("198.18.0.1"), XDP_PASS);
    // Both flows go; the second source's state holds a period that is over: it goes with them.
    dp->set_clock(11 * hour + 1000000000);
    EXPECT_EQ(dp->reclaim_idle_flows(), 2u);
    EXPECT_EQ(dp->reclaim_ext_states(), 1u);
    // The policy gone, its state goes with it.
    apply({});
    EXPECT_EQ(dp->reclaim_ext_states(), 0u);
    apply({p});
    dp->set_clock(11 * hour + 1);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(send("198.18.0.1"), XDP_PASS) << i;
}

} // namespace

namespace {

// A change of a quota's periods keeps what was used and ends the period where the new ones end;
// a quota taken away and given again starts from nothing (docs/spec.md §14).
TEST_F(DatapathTest, AQuotaChangedKeepsItsUseAndOneGivenAnewStartsFromNothing) {
    const uint64_t hour = 3600ull * 1000000000;
    Policy p = policy(1, "q", Algo::srtcm, 8000000000ull, 1 << 20, 0);
    p.meter.quota_bytes = 3000;
    p.meter.quota_period_ns = hour;
    p.meter.warmup_ns = 1000000000;
    p.meter.cold_factor = 2;
    apply({p});
    auto frame = Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1, 2).l3_size(1000).build();
    dp->set_clock(10 * hour + 1);
    dp->run_xdp(frame);
    dp->run_xdp(frame);
    ASSERT_EQ(dp->quota_use(1)->used, 2000u);
    EXPECT_EQ(dp->quota_use(1)->reset_ns, 11 * hour);
    p.meter.quota_period_ns = 24 * hour; // days: this one ends at midnight
    apply({p});
    EXPECT_EQ(dp->quota_use(1)->used, 2000u);
    EXPECT_EQ(dp->quota_use(1)->reset_ns, 24 * hour);
    dp->run_xdp(frame);                             // 3000: used
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_DROP); // over, and over is red: dropped
    EXPECT_EQ(dp->policy_counters()[1].packets[TCM_RED], 1u);
    p.meter.quota_bytes = 0; // the warm-up stays, and with it the bucket's state
    apply({p});
    p.meter.quota_bytes = 3000;
    apply({p});
    dp->run_xdp(frame);
    EXPECT_EQ(dp->quota_use(1)->used, 1000u) << "a quota given anew starts from nothing";
}

// A warm-up given to a running policy: its bucket is warm (cold only after a gap of D), so the
// next packet's refill is at the full rate.
TEST_F(DatapathTest, AWarmUpGivenToARunningPolicyFindsItWarm) {
    Policy p = policy(1, "w", Algo::srtcm, 8000000, 100000, 0); // 10^6 bytes/s
    apply({p});
    dp->set_clock(1000000000);
    dp->run_xdp(Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1, 2).l3_size(60000).build());
    ASSERT_EQ(dp->policy_state(1).meter.c_tokens, 40000 * TCM_TOKENS_PER_BYTE);
    p.meter.warmup_ns = 10000000000ull;
    p.meter.cold_factor = 4;
    apply({p});
    dp->set_clock(1010000000); // 10 ms: 10000 bytes at the full rate (2500 at a quarter)
    dp->run_xdp(Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1, 2).l3_size(1000).build());
    EXPECT_EQ(dp->policy_state(1).meter.c_tokens, 49000 * TCM_TOKENS_PER_BYTE);
}

// A flow over its quota sends on through the over meter while its meter rests: it is not idle,
// and the reclaim leaves it (and its counters) until its period ends.
TEST_F(DatapathTest, AFlowOverItsQuotaIsNotReclaimedAsIdle) {
    Policy p = policy(1, "per-src", Algo::srtcm, 8000000000ull, 1 << 20, 0);
    p.per = TCM_PER_SRC;
    p.meter.quota_bytes = 2000;
    p.meter.quota_period_ns = 3600ull * 1000000000;
    apply({p});
    auto from = [](const char *src) {
        return Packet().ipv4(src, "198.19.0.1").udp(1, 2).l3_size(1000).build();
    };
    dp->set_clock(1000000000);
    for (int i = 0; i < 3; ++i)
        dp->run_xdp(from("198.18.0.1")); // the third is over
    dp->run_xdp(from("198.18.0.2"));
    dp->set_clock(3000000000);
    dp->run_xdp(from("198.18.0.1")); // over, 2 s on: its meter's last packet is at 1 s
    dp->set_clock(3000000001);
    EXPECT_EQ(dp->reclaim_idle_flows(), 1u); // the second source's, full and idle
    ASSERT_EQ(dp->flows().size(), 1u);
    EXPECT_EQ(dp->flows()[0].state.counters.packets[TCM_RED], 2u);
}

} // namespace
