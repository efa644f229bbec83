// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// --aqm drop|ecn (docs/spec.md §8, bpf/lib/aqm.h) through BPF_PROG_TEST_RUN: where the signal
// falls, CE only on ECN-capable packets (IPv4 checksum verified, IPv6 traffic class), drops for the
// rest, nothing once the bucket has refilled, and colours (so §1's bounds) exactly as without.
#include "datapath_fixture.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <linux/bpf.h>

#include <functional>

using namespace tricolor;
using test::Packet;

namespace {

class AqmTest : public test::DatapathFixture {
  protected:
    uint32_t flow_capacity() const override { return 1024; }
    // srtcm, CIR 8000 bit/s (1000 bytes/s), CBS 8000 bytes, EBS 0: 80 packets of 100 bytes.
    void apply(tcm_aqm_mode aqm, Action red = Action{TCM_ACT_KIND_DROP, 0}) {
        Policy p;
        p.id = 3;
        p.name = "aqm";
        p.meter = test::meter_params(Algo::srtcm, 8000, 8000, 8000, 0);
        p.aqm = aqm;
        p.actions[TCM_RED] = red;
        DatapathFixture::apply({p});
    }
    static std::vector<uint8_t> frame(uint8_t ecn, bool v6 = false) {
        Packet p;
        if (v6)
            p.ipv6("2001:db8::1", "2001:db8::2");
        else
            p.ipv4("198.18.0.1", "198.18.0.2");
        return p.ecn(ecn).tcp(40000, 5201).l3_size(100).build();
    }
    // The slow-start tests' policy: srtcm, CIR 800 kbit/s (100 bytes/ms), CBS 8000 bytes
    // (eighths of 1000 bytes, 10 packets), EBS 0: 80 ms refill the bucket between bursts.
    void apply_slow_start(tcm_aqm_mode aqm, uint32_t id = 3, tcm_shape_mode shape = TCM_SHAPE_OFF) {
        Policy p;
        p.id = id;
        p.name = "aqm";
        p.meter = test::meter_params(Algo::srtcm, 800000, 8000, 8000, 0);
        p.aqm = aqm;
        p.shape = shape;
        DatapathFixture::apply({p});
    }
    // One RTT's burst of @n packets, 100 ms after the last (the bucket refilled): @t moves on and
    // the clock with it; @signalled(i) sends packet i and says whether it got the signal. The
    // packets signalled.
    std::vector<int> burst(uint64_t &t, int n, const std::function<bool()> &signalled) {
        t += 100000000;
        dp->set_clock(t);
        std::vector<int> got;
        for (int i = 1; i <= n; ++i)
            if (signalled())
                got.push_back(i);
        return got;
    }
};

uint8_t ecn_of(const std::vector<uint8_t> &f) {
    return f[15] & 3;
}

TEST_F(AqmTest, EcnMarksOnceAtSixEighthsOnlyEctAndFixesTheChecksum) {
    apply(TCM_AQM_ECN);
    std::vector<int> marked;
    for (int i = 1; i <= 80; ++i) {
        auto f = frame(2); // ECT(0)
        auto r = dp->run_xdp(f);
        ASSERT_EQ(r.retval, XDP_PASS) << "packet " << i << " is green and ECN-capable";
        if (ecn_of(r.data_out) == 3) {
            marked.push_back(i);
            EXPECT_EQ(test::ipv4_checksum(&r.data_out[14], 20), 0) << "packet " << i;
            auto expect = f;
            expect[15] |= 3;
            expect[24] = r.data_out[24];
            expect[25] = r.data_out[25];
            EXPECT_EQ(r.data_out, expect) << "only the ECN bits and the checksum change";
        } else {
            EXPECT_EQ(r.data_out, f);
        }
    }
    // Deficit after packet i is 100·i bytes of 8000: the signal at 6/8, once (one drain from
    // full, no drain before it to double).
    EXPECT_EQ(marked, (std::vector<int>{60}));
    // Red is red: dropped by its action, never marked instead.
    EXPECT_EQ(dp->run_xdp(frame(2)).retval, XDP_DROP);
    auto t = dp->shape_counters()[3].tcp;
    EXPECT_EQ(t.aqm_marked_packets, 1u);
    EXPECT_EQ(t.aqm_marked_bytes, 100u);
    EXPECT_EQ(t.aqm_dropped_packets, 0u);
}

TEST_F(AqmTest, NonEctPacketsAreDroppedInsteadAndIpv6GetsItsTrafficClassMarked) {
    apply(TCM_AQM_ECN);
    auto drain = [&](uint8_t ecn, std::vector<int> &signalled) {
        for (int i = 1; i <= 75; ++i) {
            auto r = dp->run_xdp(frame(ecn, true));
            uint32_t word = uint32_t(r.data_out[14]) << 24 | r.data_out[15] << 16;
            if (r.retval == XDP_DROP || ((word >> 20) & 3) == 3)
                signalled.push_back(i);
            if (r.retval == XDP_PASS && i != 60) {
                EXPECT_EQ((word >> 20) & 3, ecn) << "packet " << i;
            }
        }
    };
    std::vector<int> dropped, marked;
    drain(0, dropped); // not ECN-capable: dropped instead
    EXPECT_EQ(dropped, (std::vector<int>{60}));
    dp->set_clock(1000000000 + 9000000000ull); // full again
    drain(1, marked);                          // ECT(1): CE in the traffic class
    EXPECT_EQ(marked, (std::vector<int>{60}));
    // IPv4, not ECN-capable: the signal is a drop, and no packet leaves with CE set.
    dp->set_clock(1000000000 + 18000000000ull); // full again
    std::vector<int> dropped4;
    for (int i = 1; i <= 75; ++i) {
        auto r = dp->run_xdp(frame(0, false));
        if (r.retval == XDP_DROP)
            dropped4.push_back(i);
        else
            EXPECT_EQ(r.data_out[15] & 3, 0) << "IPv4 packet " << i << " left with ECN bits";
    }
    EXPECT_EQ(dropped4, (std::vector<int>{60}));
    auto t = dp->shape_counters()[3].tcp;
    EXPECT_EQ(t.aqm_dropped_packets, 2u);
    EXPECT_EQ(t.aqm_marked_packets, 1u);
}

TEST_F(AqmTest, EarlyDropsNeverAfterTheBucketRefillsAndColoursAreUnchanged) {
    apply(TCM_AQM_DROP);
    auto drain = [&](int n) {
        std::vector<int> drops;
        for (int i = 1; i <= n; ++i)
            if (dp->run_xdp(frame(2)).retval == XDP_DROP)
                drops.push_back(i);
        return drops;
    };
    EXPECT_EQ(drain(75), (std::vector<int>{60}));
    // Refill completely (8 s at 1000 bytes/s), then drain to just short of 6/8: nothing.
    const uint64_t t1 = 1000000000 + 9000000000ull;
    dp->set_clock(t1);
    EXPECT_EQ(drain(59), std::vector<int>{});
    // Re-armed: the signal at 6/8 again, once.
    EXPECT_EQ(drain(11), (std::vector<int>{1}));
    // Partly refilled (5 s: deficit 7000 - 5000 = 2000, under half): re-armed from there, and
    // nothing until 6/8 again (deficit 3500 + 100 k >= 6000 at the 25th packet).
    const uint64_t t2 = t1 + 5000000000ull;
    dp->set_clock(t2);
    EXPECT_EQ(drain(15), std::vector<int>{});
    EXPECT_EQ(drain(30), (std::vector<int>{25}));

    // The colours are §1's: the same packets with --aqm off colour identically.
    auto with = dp->policy_counters()[3];
    load(options());
    apply(TCM_AQM_OFF);
    drain(75);
    dp->set_clock(t1);
    drain(70);
    dp->set_clock(t2);
    drain(45);
    auto without = dp->policy_counters()[3];
    for (int c = 0; c < TCM_NR_COLORS; ++c) {
        EXPECT_EQ(with.packets[c], without.packets[c]) << "colour " << c;
        EXPECT_EQ(with.bytes[c], without.bytes[c]) << "colour " << c;
    }
    EXPECT_EQ(dp->shape_counters()[3].tcp.aqm_dropped_packets, 0u);
}

// Slow start: a sender with no bottleneck before the policer sends its window as a burst every
// RTT, and the window doubles. A drain twice as deep as the one before (itself no shallower than
// twice its predecessor) gets a signal as soon as it is a quarter of the bucket deep, long before
// 6/8; drains of steady depth (congestion avoidance) get none (apply_slow_start's policy).
TEST_F(AqmTest, ADrainThatDoublesIsSignalledAtAQuarterAndSteadyDrainsAreNot) {
    uint64_t t = 1000000000;
    for (auto aqm : {TCM_AQM_DROP, TCM_AQM_ECN}) {
        SCOPED_TRACE(aqm == TCM_AQM_DROP ? "drop" : "ecn");
        apply_slow_start(aqm, aqm == TCM_AQM_DROP ? 3 : 4); // a fresh bucket for each
        auto burst = [&](int n) {
            return AqmTest::burst(t, n, [&] {
                auto r = dp->run_xdp(frame(2));
                return r.retval == XDP_DROP || ecn_of(r.data_out) == 3;
            });
        };
        // Doubling: 15 packets (an eighth deep), then 30: signalled at 2/8 (the 20th packet).
        EXPECT_EQ(burst(15), std::vector<int>{});
        EXPECT_EQ(burst(30), (std::vector<int>{20}));
        // Then the window is cut: bursts of 25 packets, again and again: no signal.
        for (int k = 0; k < 4; ++k)
            EXPECT_EQ(burst(25), std::vector<int>{}) << "steady burst " << k;
        // Growing by one eighth a burst is not doubling either; the late signal still comes.
        EXPECT_EQ(burst(35), std::vector<int>{});
        EXPECT_EQ(burst(45), std::vector<int>{});
        EXPECT_EQ(burst(65), (std::vector<int>{60}));
        // After a second without packets the history is gone: a new sender's doubling is seen
        // from its second burst again (15 then 30), not hidden by the old sender's drains.
        t += 2000000000;
        EXPECT_EQ(burst(15), std::vector<int>{});
        EXPECT_EQ(burst(30), (std::vector<int>{20}));
        // Without the idle second, the same pair after steady 45-packet drains is no doubling.
        for (int k = 0; k < 3; ++k)
            burst(45);
        EXPECT_EQ(burst(15), std::vector<int>{});
        EXPECT_EQ(burst(30), std::vector<int>{});
    }
}

// The data path reads a packet's time before it locks the bucket (bpf/lib/chain.h), so a packet
// can arrive with a time before the bucket's last one (another CPU went in between). That is no
// idle second: the drains' history stays, and a 15-then-30 pair after steady drains of 45 is
// still no doubling. Here the test clock steps back a nanosecond, as such a packet would see it.
TEST_F(AqmTest, APacketStampedBeforeTheBucketsLastTimeKeepsTheDrainsHistory) {
    apply_slow_start(TCM_AQM_ECN);
    uint64_t t = 1000000000;
    auto burst = [&](int n) {
        return AqmTest::burst(t, n, [&] { return ecn_of(dp->run_xdp(frame(2)).data_out) == 3; });
    };
    for (int k = 0; k < 4; ++k)
        burst(45);
    // The bucket full again; a packet at t, then one stamped before it (both too shallow to be
    // a drain of their own).
    t += 100000000;
    dp->set_clock(t);
    ASSERT_EQ(ecn_of(dp->run_xdp(frame(2)).data_out), 2);
    dp->set_clock(t - 1);
    ASSERT_EQ(ecn_of(dp->run_xdp(frame(2)).data_out), 2);
    EXPECT_EQ(burst(15), std::vector<int>{});
    EXPECT_EQ(burst(30), std::vector<int>{}) << "the history of 45-packet drains was forgotten";
}

// The same under --shape edt on tc, where a bucket's last time runs ahead of the clock without
// another CPU: a sender's later departure stamp is metered at that time (bpf/lib/edt.h), and
// the next packet, unstamped, arrives before it.
TEST_F(AqmTest, AfterASendersLaterStampUnderShapeEdtTheDrainsHistoryStays) {
    load_tc_too();
    apply_slow_start(TCM_AQM_ECN, 3, TCM_SHAPE_EDT);
    uint64_t t = 1000000000;
    auto send = [&](uint64_t stamp) {
        __sk_buff in{};
        in.tstamp = stamp;
        return ecn_of(dp->run_tc(frame(2), &in).data_out) == 3;
    };
    auto burst = [&](int n) { return AqmTest::burst(t, n, [&] { return send(0); }); };
    for (int k = 0; k < 4; ++k)
        EXPECT_EQ(burst(45), std::vector<int>{}) << "steady burst " << k;
    t += 100000000;
    dp->set_clock(t);
    ASSERT_FALSE(send(t + 1000000)) << "stamped 1 ms ahead: metered then";
    ASSERT_FALSE(send(0)) << "unstamped, before the bucket's last time";
    EXPECT_EQ(burst(15), std::vector<int>{});
    EXPECT_EQ(burst(30), std::vector<int>{}) << "the history of 45-packet drains was forgotten";
}

TEST_F(AqmTest, RedPacketsThatPassAreNeverSignalled) {
    apply(TCM_AQM_ECN, Action{TCM_ACT_KIND_PASS, 0});
    int marks = 0;
    for (int i = 1; i <= 200; ++i) {
        auto r = dp->run_xdp(frame(2));
        ASSERT_EQ(r.retval, XDP_PASS);
        if (ecn_of(r.data_out) == 3) {
            ++marks;
            EXPECT_LE(i, 80) << "packet " << i << " is red";
        }
    }
    EXPECT_EQ(marks, 1);
}

} // namespace
