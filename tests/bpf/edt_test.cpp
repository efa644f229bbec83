// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// --shape edt (docs/spec.md §8, bpf/lib/edt.h) through BPF_PROG_TEST_RUN of the tc program on
// the test clock: a burst beyond CBS leaves at departure times cost/rate apart to the
// nanosecond, in order, none in the past; beyond the horizon it is dropped and counted; a
// sender's later stamp is kept; shape off, tc ingress and XDP are the hard policer.
#include "datapath_fixture.hpp"

#include <gtest/gtest.h>

#include <linux/bpf.h>
#include <linux/pkt_cls.h>

using namespace tricolor;
using test::Packet;

namespace {

constexpr uint64_t kT0 = 1000000000; // the fixture's clock
constexpr uint64_t kHorizon = TCM_EDT_HORIZON_NS;

class EdtTest : public test::DatapathFixture {
  protected:
    uint32_t flow_capacity() const override { return 1024; }
    void configure(DatapathOptions &o) const override { o.programs |= DatapathOptions::kTcProgram; }
    // srtcm, CIR 3 Mbit/s, CBS 3000 bytes, EBS 0: three packets of 1000 bytes, then one every
    // 8000 bits / 3 Mbit/s = 2666666.67 ns, a spacing that is not a whole nanosecond.
    static constexpr uint64_t kCir = 3000000;
    void apply(tcm_shape_mode shape, Algo algo = Algo::srtcm) {
        Policy p;
        p.id = 5;
        p.name = "edt";
        p.meter = test::meter_params(algo, kCir, 3000, algo == Algo::trtcm ? kCir : 0,
                                     algo == Algo::trtcm ? 3000 : 0);
        p.shape = shape;
        DatapathFixture::apply({p});
    }
    static std::vector<uint8_t> frame() {
        return Packet().ipv4("198.18.0.1", "198.18.0.2").tcp(40000, 5201).l3_size(1000).build();
    }
    // The j-th packet after the bucket ran dry at kT0 may leave once j·8000 bits have accrued.
    static uint64_t departure(uint64_t j) {
        return kT0 + (j * 8000 * 1000000000ull + kCir - 1) / kCir;
    }
    Datapath::TestRun run(uint64_t tstamp = 0, bool ingress = false) {
        __sk_buff in{};
        in.tstamp = tstamp;
        if (ingress)
            in.ingress_ifindex = in.ifindex = 1; // at tc ingress skb_iif is the device's own
        return dp->run_tc(frame(), &in);
    }
};

TEST_F(EdtTest, BurstBeyondCbsLeavesSpacedByCostOverRateAndBeyondTheHorizonIsDropped) {
    apply(TCM_SHAPE_EDT);
    for (int i = 1; i <= 3; ++i) {
        auto r = run();
        ASSERT_EQ(r.retval, unsigned(TC_ACT_OK));
        EXPECT_EQ(r.skb_out.tstamp, 0u) << "packet " << i << " is within CBS: it leaves now";
    }
    // 37 fit the 100 ms horizon (37 · 2.667 ms = 98.7 ms); the 38th would leave at 101.3 ms.
    uint64_t last = kT0;
    for (uint64_t j = 1; j <= 37; ++j) {
        auto r = run();
        ASSERT_EQ(r.retval, unsigned(TC_ACT_OK)) << "delayed packet " << j;
        EXPECT_EQ(r.skb_out.tstamp, departure(j)) << "delayed packet " << j;
        EXPECT_GT(r.skb_out.tstamp, last) << "in order, none in the past";
        EXPECT_LE(r.skb_out.tstamp - kT0, kHorizon);
        last = r.skb_out.tstamp;
    }
    for (int i = 0; i < 2; ++i)
        EXPECT_EQ(run().retval, unsigned(TC_ACT_SHOT)) << "beyond the horizon";
    auto t = dp->shape_counters()[5].tcp;
    EXPECT_EQ(t.shape_delayed_packets, 37u);
    EXPECT_EQ(t.shape_delayed_bytes, 37000u);
    EXPECT_EQ(t.shape_dropped_packets, 2u);
    EXPECT_EQ(t.shape_dropped_bytes, 2000u);
    // Colours at departure: every delayed packet found its tokens (green); the dropped are red.
    auto c = dp->policy_counters()[5];
    EXPECT_EQ(c.packets[TCM_GREEN], 40u);
    EXPECT_EQ(c.packets[TCM_RED], 2u);

    // Dropped packets took nothing: 10 ms later the next one leaves right after the 37th.
    dp->set_clock(kT0 + 10000000);
    auto r = run();
    ASSERT_EQ(r.retval, unsigned(TC_ACT_OK));
    EXPECT_EQ(r.skb_out.tstamp, departure(38));
}

TEST_F(EdtTest, TrtcmWaitsForThePeakBucket) {
    apply(TCM_SHAPE_EDT, Algo::trtcm); // CIR = PIR = 3 Mbit/s, CBS = PBS = 3000 bytes
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(run().skb_out.tstamp, 0u);
    for (uint64_t j = 1; j <= 5; ++j)
        EXPECT_EQ(run().skb_out.tstamp, departure(j));
    EXPECT_EQ(dp->policy_counters()[5].packets[TCM_RED], 0u);
}

TEST_F(EdtTest, ASendersLaterStampIsKeptAndTheBucketMetersAtIt) {
    apply(TCM_SHAPE_EDT);
    // A paced sender's packet asks to leave 50 ms from now: metered then, green, stamp kept.
    auto r = run(kT0 + 50000000);
    ASSERT_EQ(r.retval, unsigned(TC_ACT_OK));
    EXPECT_EQ(r.skb_out.tstamp, kT0 + 50000000);
    // Drain the rest of CBS and one more: that one would leave one spacing after 50 ms, but its
    // sender asked for 60 ms, which it keeps.
    run();
    run();
    r = run(kT0 + 60000000);
    EXPECT_EQ(r.skb_out.tstamp, kT0 + 60000000);
    // A stamp beyond the horizon is no departure time the bucket trusts: it is metered at its
    // clock and keeps the stamp, which is later.
    r = run(kT0 + 5000000000ull);
    ASSERT_EQ(r.retval, unsigned(TC_ACT_OK));
    EXPECT_EQ(r.skb_out.tstamp, kT0 + 5000000000ull);
    // Without a stamp the next packet leaves on the bucket's clock, never before it.
    r = run();
    EXPECT_GE(r.skb_out.tstamp, kT0 + 60000000);
    EXPECT_EQ(dp->shape_counters()[5].tcp.shape_delayed_packets, 3u)
        << "the 2nd, 3rd (on the bucket's clock at 50 ms) and the last; not the stamped ones";
}

TEST_F(EdtTest, ShapeOffTcIngressAndXdpAreTheHardPolicer) {
    auto burst = [&](auto send) {
        std::vector<int> verdicts;
        for (int i = 0; i < 6; ++i)
            verdicts.push_back(send());
        return verdicts;
    };
    const std::vector<int> police{TC_ACT_OK,   TC_ACT_OK,   TC_ACT_OK,
                                  TC_ACT_SHOT, TC_ACT_SHOT, TC_ACT_SHOT};
    apply(TCM_SHAPE_OFF);
    EXPECT_EQ(burst([&] {
                  auto r = run();
                  EXPECT_EQ(r.skb_out.tstamp, 0u);
                  return int(r.retval);
              }),
              police);
    EXPECT_EQ(dp->shape_counters()[5].tcp.shape_delayed_packets, 0u);

    dp->set_clock(kT0 + 10000000000ull); // refilled
    apply(TCM_SHAPE_EDT);
    EXPECT_EQ(burst([&] {
                  auto r = run(0, true);
                  EXPECT_EQ(r.skb_out.tstamp, 0u);
                  return int(r.retval);
              }),
              police);
    dp->set_clock(kT0 + 20000000000ull);
    const std::vector<int> xdp{XDP_PASS, XDP_PASS, XDP_PASS, XDP_DROP, XDP_DROP, XDP_DROP};
    EXPECT_EQ(burst([&] { return int(dp->run_xdp(frame()).retval); }), xdp);
    auto t = dp->shape_counters()[5].tcp;
    EXPECT_EQ(t.shape_delayed_packets + t.shape_dropped_packets, 0u);
}

} // namespace
