// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Classification in the data path (bpf/tricolor.bpf.c) through BPF_PROG_TEST_RUN: precedence,
// later fragments, and the rank order (priority, prefix length, name) with every other factor
// arranged against the winner.
#include "datapath_fixture.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace tricolor;
using namespace tricolor::test; // DatapathTest, Packet, policy(), prefix(), v4udp()

namespace {

// ---- classification -----------------------------------------------------------------------------

TEST_F(DatapathTest, ClassificationPrecedence) {
    Policy wide = policy(1, "wide");
    wide.match.dst = prefix("198.18.0.0/15");
    wide.priority = 10;
    Policy narrow = policy(2, "narrow");
    narrow.match.dst = prefix("198.18.1.0/24");
    narrow.priority = 10;
    Policy udp_ports = policy(3, "udp-ports");
    udp_ports.match.proto = 17;
    udp_ports.match.dport = PortRange{5000, 5010};
    udp_ports.priority = 5;
    Policy vlan = policy(4, "vlan");
    vlan.match.vlan = 42;
    vlan.priority = 1;
    Policy v6 = policy(5, "v6");
    v6.match.src = prefix("2001:db8::/32");
    v6.priority = 10;
    Policy dscp = policy(6, "ef");
    dscp.match.dscp = 46;
    dscp.match.dst = prefix("198.18.0.0/15");
    dscp.priority = 7;
    apply({wide, narrow, udp_ports, vlan, v6, dscp});

    struct Case {
        const char *what;
        Packet packet;
        uint32_t expected; // policy id, 0 for unclassified
    };
    std::vector<Case> cases = {
        {"in /15 only", Packet().ipv4("198.18.9.9", "198.19.0.1").udp(1, 80), 1},
        {"longest prefix at equal priority", Packet().ipv4("198.18.9.9", "198.18.1.7").udp(1, 80),
         2},
        {"lower priority number wins over prefix",
         Packet().ipv4("198.18.9.9", "198.18.1.7").udp(1, 5005), 3},
        {"port range edge low", Packet().ipv4("198.18.9.9", "198.18.1.7").udp(1, 5000), 3},
        {"port range edge high", Packet().ipv4("198.18.9.9", "198.18.1.7").udp(1, 5010), 3},
        {"just outside the range", Packet().ipv4("198.18.9.9", "198.18.1.7").udp(1, 5011), 2},
        {"tcp is not udp", Packet().ipv4("198.18.9.9", "198.18.1.7").tcp(1, 5005), 2},
        {"vlan first", Packet().vlan(42).ipv4("198.18.9.9", "198.18.1.7").udp(1, 5005), 4},
        {"other vlan", Packet().vlan(43).ipv4("198.18.9.9", "198.18.1.7").udp(1, 80), 2},
        {"outside every prefix", Packet().ipv4("198.18.9.9", "198.20.0.1").udp(1, 80), 0},
        {"ipv6 prefix", Packet().ipv6("2001:db8:1::1", "2001:db8::2").udp(1, 80), 5},
        {"ipv6 outside", Packet().ipv6("2001:db9::1", "2001:db8::2").udp(1, 80), 0},
        {"dscp ef", Packet().ipv4("198.18.9.9", "198.18.1.7").dscp(46).udp(1, 80), 6},
        {"ipv4-mapped v6 is not v4",
         Packet().ipv6("::ffff:198.18.9.9", "::ffff:198.18.1.7").udp(1, 80), 0},
    };
    ASSERT_GE(cases.size(), 14u);
    for (auto &c : cases) {
        SCOPED_TRACE(c.what);
        auto before = dp->policy_counters();
        uint64_t unclassified = dp->global_counters().unclassified_packets;
        dp->run_xdp(c.packet.build());
        auto after = dp->policy_counters();
        for (uint32_t id = 1; id <= 6; ++id) {
            uint64_t b = before[id].packets[0] + before[id].packets[1] + before[id].packets[2];
            uint64_t a = after[id].packets[0] + after[id].packets[1] + after[id].packets[2];
            EXPECT_EQ(a - b, id == c.expected ? 1u : 0u) << "policy " << id;
        }
        EXPECT_EQ(dp->global_counters().unclassified_packets - unclassified, c.expected ? 0u : 1u);
    }
}

TEST_F(DatapathTest, LaterFragmentsMatchPortlessPoliciesOnly) {
    Policy ports = policy(1, "udp-5000");
    ports.match.proto = 17;
    ports.match.dport = PortRange{5000, 5000};
    ports.priority = 1;
    Policy proto = policy(2, "udp");
    proto.match.proto = 17;
    proto.priority = 2;
    apply({ports, proto});
    dp->run_xdp(Packet()
                    .ipv4("198.18.0.1", "198.18.0.2")
                    .fragment(0, true)
                    .udp(1, 5000)
                    .payload(64)
                    .build());
    EXPECT_EQ(packets(1), 1u);
    dp->run_xdp(Packet()
                    .ipv4("198.18.0.1", "198.18.0.2")
                    .fragment(9, false)
                    .udp(1, 5000)
                    .payload(64)
                    .build());
    EXPECT_EQ(packets(1), 1u);
    EXPECT_EQ(packets(2), 1u); // the later fragment has no ports: it falls to the portless policy
    dp->run_xdp(Packet()
                    .ipv6("2001:db8::1", "2001:db8::2")
                    .fragment(9, false)
                    .udp(1, 5000)
                    .payload(64)
                    .build());
    EXPECT_EQ(packets(2), 2u);
}

TEST_F(DatapathTest, OfTwoPoliciesWithTheSameMatchTheBetterRankWins) {
    Policy low = policy(1, "low");
    low.match.proto = 17;
    low.priority = 9;
    Policy high = policy(2, "high");
    high.match.proto = 17;
    high.priority = 3;
    for (auto set : {std::vector<Policy>{low, high}, std::vector<Policy>{high, low}}) {
        apply({});
        apply(set);
        dp->run_xdp(v4udp().build());
        EXPECT_EQ(packets(2), 1u);
        EXPECT_EQ(packets(1), 0u);
    }
}

// The rank is a total order: priority (lower first), then the longer prefix (src + dst bits),
// then the name. One case per rule, each with everything the rule does not decide (names, ids,
// the order of the list) arranged AGAINST the expected winner, so that dropping the rule, or
// replacing it by another, picks the wrong policy. Every set is applied in both list orders.
class RankOrder : public DatapathTest {
  protected:
    // The id of the policy @packet is counted against, applying @set in both orders.
    void expect_winner(std::vector<Policy> set, const Packet &packet, uint32_t want) {
        for (int pass = 0; pass < 2; ++pass) {
            SCOPED_TRACE(pass == 0 ? "as listed" : "reversed");
            apply({});
            apply(set);
            dp->run_xdp(packet.build());
            for (const auto &p : set)
                EXPECT_EQ(packets(p.id), p.id == want ? 1u : 0u) << "policy '" << p.name << "'";
            std::ranges::reverse(set);
        }
    }
};

// A lower priority number wins over a longer prefix and over an earlier name and id.
TEST_F(RankOrder, PriorityBeatsPrefixLengthAndName) {
    Policy broad = policy(9, "zz-broad-but-first");
    broad.match.dst = prefix("198.0.0.0/8");
    broad.priority = 1;
    Policy narrow = policy(1, "aa-narrow");
    narrow.match.src = prefix("198.18.0.0/16");
    narrow.match.dst = prefix("198.19.0.0/24");
    narrow.priority = 2;
    expect_winner({narrow, broad}, Packet().ipv4("198.18.0.1", "198.19.0.2").udp(1, 2), 9);
}

// At equal priority the longer prefix wins, counted as src + dst bits: /16 + /16 beats a lone
// /24 (a rule comparing the longest single prefix, or the name, or the id, would pick /24).
TEST_F(RankOrder, AtEqualPriorityTheLongerSrcPlusDstPrefixWins) {
    Policy both = policy(9, "zz-src16-dst16");
    both.match.src = prefix("198.18.0.0/16");
    both.match.dst = prefix("198.19.0.0/16");
    both.priority = 5;
    Policy one = policy(1, "aa-dst24");
    one.match.dst = prefix("198.19.0.0/24");
    one.priority = 5;
    Packet pk = Packet().ipv4("198.18.0.1", "198.19.0.2").udp(1, 2);
    expect_winner({one, both}, pk, 9);
    // And the plain case: a longer dst prefix over a shorter one, the name against it.
    Policy d24 = policy(8, "zz-dst24");
    d24.match.dst = prefix("198.19.0.0/24");
    Policy d16 = policy(2, "aa-dst16");
    d16.match.dst = prefix("198.19.0.0/16");
    expect_winner({d16, d24}, pk, 8);
}

// At equal priority and prefix length the name decides, not the id or the list order; with
// identical matches (one rule key) and with different matches of the same shape length.
TEST_F(RankOrder, AtEqualPriorityAndPrefixTheNameDecides) {
    Policy alpha = policy(9, "alpha");
    alpha.match.proto = 17;
    alpha.priority = 4;
    Policy beta = policy(1, "beta");
    beta.match.proto = 17;
    beta.priority = 4;
    Packet pk = Packet().ipv4("198.18.0.1", "198.19.0.2").udp(1, 2);
    expect_winner({beta, alpha}, pk, 9);
    Policy by_src = policy(9, "alpha-src");
    by_src.match.src = prefix("198.18.0.0/16");
    Policy by_dst = policy(1, "beta-dst");
    by_dst.match.dst = prefix("198.19.0.0/16");
    expect_winner({by_dst, by_src}, pk, 9);
}

// The classifier probes the shapes in order of the best rank each holds, and must keep the best
// match, not the last: here shape /24 (best rank 0) matches rank 2, then shape /16 (best rank
// 1, so still worth probing) matches rank 3, which must not replace rank 2.
TEST_F(RankOrder, AWorseMatchInALaterShapeDoesNotReplaceABetterOne) {
    Policy p0 = policy(1, "p0-dst24"), p1 = policy(2, "p1-dst16"), p2 = policy(3, "zz-p2-dst24"),
           p3 = policy(4, "aa-p3-dst16");
    p0.match.dst = prefix("198.18.5.0/24");
    p0.priority = 1;
    p1.match.dst = prefix("198.20.0.0/16");
    p1.priority = 2;
    p2.match.dst = prefix("198.19.1.0/24");
    p2.priority = 3;
    p3.match.dst = prefix("198.19.0.0/16");
    p3.priority = 4;
    expect_winner({p3, p2, p1, p0}, Packet().ipv4("198.18.0.1", "198.19.1.7").udp(1, 2), 3);
}

} // namespace
