// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Fleet policies in the data path (docs/spec.md §10) through BPF_PROG_TEST_RUN: the committed
// bucket starts empty, is refilled only by user-space grants (never by time), folds them in exactly
// (capped, the excess counted as spilled), and a revoke empties it.
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

TEST_F(FleetDatapathTest, StartsEmptyAndTimeAddsNothing) {
    apply({fleet_policy()});
    EXPECT_EQ(send(), XDP_DROP);
    dp->set_clock(100'000'000'000ull); // 99 s at CIR would fill C many times
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(green_bytes(), 0u);
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
}

TEST_F(FleetDatapathTest, SpendsExactlyWhatWasGranted) {
    apply({fleet_policy()});
    dp->fleet_grant(7, 3 * kTok - 1); // one token short of three packets
    EXPECT_EQ(dp->fleet_local(7).held, 3 * kTok - 1);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(dp->fleet_local(7).held, kTok - 1);
    dp->fleet_grant(7, 1);
    dp->set_clock(2'000'000'000);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(green_bytes(), 3 * kPkt);
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
}

TEST_F(FleetDatapathTest, GrantsAreCappedAtCbsAndTheRestSpills) {
    apply({fleet_policy()});
    dp->fleet_grant(7, kCbsTok + 5 * kTok);
    EXPECT_EQ(send(), XDP_PASS); // folds: C = CBS, 5 packets' worth spilled
    auto l = dp->fleet_local(7);
    EXPECT_EQ(l.spilled, 5 * kTok);
    EXPECT_EQ(l.held, kCbsTok - kTok);
    int green = 1;
    while (send() == XDP_PASS)
        ++green;
    EXPECT_EQ(static_cast<uint64_t>(green), kCbs / kPkt);
}

TEST_F(FleetDatapathTest, SrtcmGrantsOverflowIntoE) {
    apply({fleet_policy(Algo::srtcm, 1000)});
    // E starts full (it is local); empty it first with yellow packets.
    dp->fleet_grant(7, 0);
    int yellow = 0;
    while (send() == XDP_PASS)
        ++yellow;
    EXPECT_EQ(yellow, 1000 / kPkt);
    dp->fleet_grant(7, kCbsTok + 2 * kTok);
    auto l = dp->fleet_local(7);
    EXPECT_EQ(l.held, kCbsTok + 2 * kTok);
    send();
    EXPECT_EQ(dp->fleet_local(7).spilled, 0u); // E took the 2 packets C could not
    EXPECT_EQ(dp->policy_state(7).meter.e_tokens, 1000 % kPkt * TCM_TOKENS_PER_BYTE + 2 * kTok);
}

TEST_F(FleetDatapathTest, RevokeEmptiesTheBucketAndVoidsPendingGrants) {
    apply({fleet_policy()});
    dp->fleet_grant(7, 4 * kTok);
    EXPECT_EQ(send(), XDP_PASS);
    dp->fleet_grant(7, 10 * kTok); // not folded yet
    dp->fleet_revoke(7);
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
    EXPECT_EQ(send(), XDP_DROP);
    dp->fleet_grant(7, kTok); // a grant after the revoke counts
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(send(), XDP_DROP);
    EXPECT_EQ(green_bytes(), 2 * kPkt);
}

TEST_F(FleetDatapathTest, ALeaseThatRunsOutVoidsTheBucketWithoutUserSpace) {
    apply({fleet_policy()});
    dp->fleet_lease(7, 2'000'000'000);
    dp->fleet_grant(7, 4 * kTok);
    dp->set_clock(2'000'000'000);
    EXPECT_EQ(send(), XDP_PASS); // at the deadline: still leased
    dp->set_clock(2'000'000'001);
    EXPECT_EQ(send(), XDP_DROP); // past it: C and the pending grants are void
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
    dp->fleet_grant(7, kTok); // a grant without a renewed lease is void too
    EXPECT_EQ(send(), XDP_DROP);
    dp->fleet_lease(7, 3'000'000'000); // renewed, then granted: spendable
    dp->fleet_grant(7, kTok);
    EXPECT_EQ(send(), XDP_PASS);
    dp->fleet_lease(7, 0); // no lease (a fallback's own tokens): kept however long
    dp->fleet_grant(7, kTok);
    dp->set_clock(9'000'000'000);
    EXPECT_EQ(send(), XDP_PASS);
    EXPECT_EQ(green_bytes(), 3 * kPkt);
}

TEST_F(FleetDatapathTest, RandomGrantsAndPacketsConserveTokensExactly) {
    apply({fleet_policy()});
    std::mt19937_64 rng(13);
    uint64_t granted = 0;
    for (int i = 0; i < 300; ++i) {
        if (rng() % 3 == 0) {
            uint64_t g = rng() % (2 * kCbsTok / 3);
            dp->fleet_grant(7, g);
            granted += g;
        }
        dp->set_clock(1000000000 + i * 1000000ull);
        send();
        auto l = dp->fleet_local(7);
        // Every granted token is spent green, held, or spilled: none made, none lost.
        ASSERT_EQ(green_bytes() * TCM_TOKENS_PER_BYTE + l.held + l.spilled, granted) << i;
        ASSERT_LE(l.held, kCbsTok);
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

TEST_F(FleetDatapathTest, AFreshPolicyIdDoesNotInheritGrants) {
    apply({fleet_policy()});
    dp->fleet_grant(7, 5 * kTok);
    apply({});
    apply({fleet_policy()});
    EXPECT_EQ(dp->fleet_local(7).held, 0u);
    EXPECT_EQ(send(), XDP_DROP);
}

} // namespace
