// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Fleet policies in the data path (docs/fleet.md) through BPF_PROG_TEST_RUN: the committed bucket
// starts empty and earns only at the rate leased to it, exactly, up to the lease's cap (the excess
// counted as spilled), never past the lease's deadline.
#include "datapath_fixture.hpp"
#include "tricolor/bpf_load.hpp"

#include <gtest/gtest.h>

#include <linux/bpf.h>

#include <random>

using namespace tricolor;
using test::Packet;

namespace {

constexpr uint64_t kPkt = 128;                        // IP bytes of the test packet
constexpr uint64_t kTok = kPkt * TCM_TOKENS_PER_BYTE; // its cost in tokens
constexpr uint64_t kCbs = 3000;                       // bytes
constexpr uint64_t kCbsTok = kCbs * TCM_TOKENS_PER_BYTE;

Policy fleet_policy(Algo algo = Algo::rfc4115, uint64_t ebs = 0) {
    Policy p = test::policy(7, "fleet", algo, 8000000, kCbs, ebs, 0);
    p.fleet = true;
    return p;
}

class FleetDatapathTest : public test::DatapathFixture {
  protected:
    uint32_t flow_capacity() const override { return 64; }
    // One packet; true when it was green (passed with the default actions: red drops,
    // and these policies have no yellow unless E holds tokens).
    uint32_t send() { return dp->run_xdp(pkt).retval; }
    uint64_t green_bytes() { return dp->policy_counters()[7].bytes[TCM_GREEN]; }
    std::vector<uint8_t> pkt =
        Packet().ipv4("198.18.0.1", "198.19.0.2").udp(1000, 2000).payload(100).build();
};

constexpr uint64_t kRate = 8000000;       // bit/s = tokens per ns: one byte per µs
constexpr uint64_t kPktNs = kTok / kRate; // 128 µs earn one packet

TEST_F(FleetDatapathTest, StartsEmptyAndEarnsNothingWithoutALease) {
    apply({fleet_policy()});
    EXPECT_EQ(send(), XDP_DROP);
    dp->set_clock(100'000'000'000ull); // 99 s at CIR would fill C many times
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(green_bytes(), 0u);
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
}

TEST_F(FleetDatapathTest, EarnsExactlyTheLeasedRate) {
    apply({fleet_policy()});
    dp->set_clock(1'000'000'000);
    dp->fleet_set_lease(7, {kRate, kCbsTok, 0});
    dp->set_clock(1'000'000'000 + 3 * kPktNs - 1); // one ns short of three packets
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(dp->fleet_local(7).held, kTok - kRate);
    dp->set_clock(1'000'000'000 + 3 * kPktNs);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(green_bytes(), 3 * kPkt);
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
}

TEST_F(FleetDatapathTest, CIsCappedAtTheLeasesCapAndTheRestSpills) {
    apply({fleet_policy()});
    dp->set_clock(1'000'000'000);
    dp->fleet_set_lease(7, {kRate, 10 * kTok, 0});
    dp->set_clock(1'000'000'000 + 15 * kPktNs); // 15 packets' worth, 10 fit
    EXPECT_EQ(send(), XDP_PASS);
    auto l = dp->fleet_local(7);
    EXPECT_EQ(l.spilled, 5 * kTok);
    EXPECT_EQ(l.held, 9 * kTok);
    int green = 1;
    while (send() == XDP_PASS)
        ++green;
    EXPECT_EQ(green, 10);
    // A gap of days at the largest rate: exactly the cap, no overflow.
    dp->fleet_set_lease(7, {1'000'000'000'000ull, kCbsTok, 0});
    dp->set_clock(400'000'000'000'000ull);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(dp->fleet_local(7).held, kCbsTok - kTok);
    // A lower cap cuts what C holds at the next packet.
    dp->fleet_set_lease(7, {1'000'000'000'000ull, 2 * kTok, 0});
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_DROP);
}

TEST_F(FleetDatapathTest, ARateChangeEarnsTheOldRateUpToItAndTheNewFromIt) {
    apply({fleet_policy()});
    dp->set_clock(1'000'000'000);
    dp->fleet_set_lease(7, {kRate, kCbsTok, 0});
    dp->set_clock(1'000'000'000 + kPktNs / 2); // half a packet at the old rate
    dp->fleet_set_lease(7, {2 * kRate, kCbsTok, 0});
    dp->set_clock(1'000'000'000 + kPktNs / 2 + kPktNs / 4 - 1); // a quarter, less 1 ns, at twice
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(dp->fleet_local(7).held, kTok - 2 * kRate);
    dp->set_clock(1'000'000'000 + kPktNs / 2 + kPktNs / 4);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
    // Lowered: from now on half a packet per packet time.
    dp->fleet_set_lease(7, {kRate / 2, kCbsTok, 0});
    dp->set_clock(1'000'000'000 + kPktNs / 2 + kPktNs / 4 + 2 * kPktNs);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_DROP);
}

TEST_F(FleetDatapathTest, SrtcmEarningsOverflowIntoE) {
    apply({fleet_policy(Algo::srtcm, 1000)});
    // E starts full (it is local); empty it first with yellow packets.
    int yellow = 0;
    while (send() == XDP_PASS)
        ++yellow;
    EXPECT_EQ(yellow, 1000 / kPkt);
    dp->set_clock(1'000'000'000);
    dp->fleet_set_lease(7, {kRate, 4 * kTok, 0});
    dp->set_clock(1'000'000'000 + 6 * kPktNs);
    EXPECT_EQ(send(), XDP_PASS); // C held 4, E took the 2 C could not
    EXPECT_EQ(dp->fleet_local(7).spilled, 0u);
    EXPECT_EQ(dp->policy_state(7).meter.e_tokens, 1000 % kPkt * TCM_TOKENS_PER_BYTE + 2 * kTok);
}

TEST_F(FleetDatapathTest, ALeaseThatRunsOutEmptiesCWithoutUserSpace) {
    apply({fleet_policy()});
    dp->set_clock(1'000'000'000);
    dp->fleet_set_lease(7, {kRate, kCbsTok, 2'000'000'000});
    dp->set_clock(2'000'000'000);
    EXPECT_EQ(send(), XDP_PASS); // at the deadline: still leased
    dp->set_clock(2'000'000'001);
    EXPECT_EQ(send(), XDP_DROP); // past it: C is void and earns nothing
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
    dp->set_clock(2'500'000'000);
    EXPECT_EQ(send(), XDP_DROP);
    // Renewed at the same rate: it earns from the renewal, not for the time it had run out.
    dp->fleet_set_lease(7, {kRate, kCbsTok, 3'000'000'000});
    dp->set_clock(2'500'000'000 + kPktNs);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_DROP);
    dp->fleet_set_lease(7, {kRate, kCbsTok, 0}); // no deadline (a fallback's own lease)
    dp->set_clock(9'000'000'000);
    EXPECT_EQ(send(), XDP_PASS);
}

// What C held when its lease ran out with no packet to see it is not spent after a renewal:
// Redis gave that part of CBS to others meanwhile.
TEST_F(FleetDatapathTest, ARenewalAfterTheDeadlineStartsWithCEmpty) {
    apply({fleet_policy()});
    dp->set_clock(1'000'000'000);
    dp->fleet_set_lease(7, {kRate, kCbsTok, 2'000'000'000});
    dp->set_clock(1'000'000'000 + 5 * kPktNs);
    EXPECT_EQ(send(), XDP_PASS); // C holds 4 more
    dp->set_clock(2'500'000'000);
    dp->fleet_set_lease(7, {kRate, kCbsTok, 3'000'000'000});
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
}

// Rates changing at random between packets: every token earned is spent green, held or
// spilled (none made, none lost), and what was earned equals the leases' rates over time,
// computed here independently, segment by segment.
TEST_F(FleetDatapathTest, RandomLeasesConserveTokensExactly) {
    apply({fleet_policy()});
    std::mt19937_64 rng(13);
    uint64_t now = 1'000'000'000, last_pkt = now, earned = 0;
    // One cap throughout: a lowered cap cuts C, which this sum does not follow (the cap's own
    // case above covers it).
    const uint64_t cap = kCbsTok;
    uint64_t rate = 0, from = now, prate = 0, pfrom = now;
    auto seg = [](uint64_t r, uint64_t t0, uint64_t t1) -> uint64_t {
        if (t1 <= t0)
            return 0;
        // Gaps here are far below what would fill C and E (TCM_FLEET_FULL): earned exactly.
        uint64_t dt = t1 - t0;
        EXPECT_LT(dt, meter_fill_ns(TCM_FLEET_FULL, r));
        return dt * r;
    };
    dp->set_clock(now);
    for (int i = 0; i < 400; ++i) {
        if (rng() % 3 == 0) {
            uint64_t r = rng() % 4 == 0 ? 0 : rng() % (4 * kRate);
            if (r != rate) {
                prate = rate;
                pfrom = from;
                rate = r;
                from = now;
            }
            dp->fleet_set_lease(7, {r, cap, 0});
        }
        now += rng() % (3 * kPktNs);
        dp->set_clock(now);
        // The data path's fold, as fleet.h states it: the previous lease up to the change, the
        // current one from it; C holds at most cap.
        earned += seg(prate, std::max(last_pkt, pfrom), std::min(now, from)) +
                  seg(rate, std::max(last_pkt, from), now);
        last_pkt = now;
        send();
        auto l = dp->fleet_local(7);
        ASSERT_EQ(green_bytes() * TCM_TOKENS_PER_BYTE + dp->policy_state(7).meter.c_tokens +
                      l.spilled,
                  earned)
            << i;
        ASSERT_LE(l.held, cap);
    }
    EXPECT_GT(green_bytes(), 0u);
}

TEST_F(FleetDatapathTest, PerKeyFleetPoliciesAreRefused) {
    auto p = fleet_policy();
    p.per = TCM_PER_SRC;
    auto r = dp->apply({p});
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().find("fleet"), std::string::npos);
}

TEST_F(FleetDatapathTest, AFreshPolicyIdDoesNotInheritALease) {
    apply({fleet_policy()});
    dp->set_clock(1'000'000'000);
    dp->fleet_set_lease(7, {kRate, kCbsTok, 0});
    dp->set_clock(1'000'000'000 + 5 * kPktNs);
    apply({});
    apply({fleet_policy()});
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
    dp->set_clock(2'000'000'000);
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(dp->fleet_local(7).spilled, 0u);
}

} // namespace
