// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Actions in the data path (bpf/tricolor.bpf.c) through BPF_PROG_TEST_RUN: DSCP remarking (IPv4
// checksum, IPv6 flow label), tc mark, priority and classid, GSO packets charged per segment.
#include "datapath_fixture.hpp"

#include <gtest/gtest.h>

#include <linux/pkt_cls.h>

using namespace tricolor;
using namespace tricolor::test; // DatapathTest, Packet, policy(), prefix(), v4udp()

namespace {

// ---- actions ----------------------------------------------------------------------------------

TEST_F(DatapathTest, DscpRemarkKeepsEcnAndFixesTheIpv4Checksum) {
    Policy p = policy(1, "remark", Algo::srtcm, 8000, 32, 0); // exactly one 32-byte packet
    p.actions[TCM_GREEN] = parse_action("dscp:af41").value();
    p.actions[TCM_RED] = parse_action("dscp:cs1").value();
    apply({p});
    for (uint8_t ecn : {0, 1, 2, 3}) {
        SCOPED_TRACE(int(ecn));
        auto frame = Packet()
                         .ipv4("198.18.0.1", "198.18.0.2")
                         .ip_options(4)
                         .dscp(46)
                         .ecn(ecn)
                         .udp(1, 2)
                         .build();
        auto r = dp->run_xdp(frame); // red after the first: the bucket holds 100 bytes
        ASSERT_EQ(r.retval, XDP_PASS);
        ASSERT_EQ(r.data_out.size(), frame.size());
        uint8_t want = ecn == 0 ? 34 : 8;
        EXPECT_EQ(r.data_out[15] >> 2, want);
        EXPECT_EQ(r.data_out[15] & 3, ecn);
        EXPECT_EQ(test::ipv4_checksum(&r.data_out[14], 24), 0) << "checksum must stay valid";
        // Nothing else changed.
        auto expect = frame;
        expect[15] = r.data_out[15];
        expect[24] = r.data_out[24];
        expect[25] = r.data_out[25];
        EXPECT_EQ(r.data_out, expect);
    }
}

TEST_F(DatapathTest, DscpRemarkOnIpv6KeepsEcnAndFlowLabel) {
    Policy p = policy(1, "remark6", Algo::srtcm, 8000, 100000, 0);
    p.actions[TCM_GREEN] = parse_action("dscp:ef").value();
    apply({p});
    auto frame =
        Packet().vlan(9).ipv6("2001:db8::1", "2001:db8::2").dscp(10).ecn(3).udp(1, 2).build();
    auto r = dp->run_xdp(frame);
    ASSERT_EQ(r.retval, XDP_PASS);
    size_t l3 = 18;
    uint32_t word = uint32_t(r.data_out[l3]) << 24 | r.data_out[l3 + 1] << 16 |
                    r.data_out[l3 + 2] << 8 | r.data_out[l3 + 3];
    EXPECT_EQ(word >> 28, 6u);
    EXPECT_EQ((word >> 22) & 0x3f, 46u);
    EXPECT_EQ((word >> 20) & 3, 3u);
    EXPECT_EQ(word & 0xfffff, 0xabcdeu);
}

TEST_F(DatapathTest, TcMarkPriorityAndClassid) {
    load_tc_too();
    Policy p = policy(1, "tc", Algo::srtcm, 8000, 1000, 1000);
    p.actions[TCM_GREEN] = parse_action("mark:77").value();
    p.actions[TCM_YELLOW] = parse_action("classid:1:10").value();
    p.actions[TCM_RED] = parse_action("priority:5").value();
    apply({p});
    auto frame = Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(1000).build();
    auto g = dp->run_tc(frame);
    EXPECT_EQ(g.retval, unsigned(TC_ACT_OK));
    EXPECT_EQ(g.skb_out.mark, 77u);
    auto y = dp->run_tc(frame);
    EXPECT_EQ(y.skb_out.priority, 0x00010010u);
    auto r = dp->run_tc(frame);
    EXPECT_EQ(r.retval, unsigned(TC_ACT_OK)); // red's action is priority, not drop
    EXPECT_EQ(r.skb_out.priority, 5u);
    p.actions[TCM_RED] = parse_action("drop").value();
    apply({p});
    EXPECT_EQ(dp->run_tc(frame).retval, unsigned(TC_ACT_SHOT));
}

TEST_F(DatapathTest, TcGsoPacketIsChargedPerSegmentWithHeaders) {
    load_tc_too();
    Policy p = policy(1, "gso", Algo::srtcm, 8000, 1000000, 0);
    apply({p});
    // A 3-segment TCP super-packet: 3 x 1000 payload, one set of headers in the buffer (a test
    // run's skb is linear and at most a page, so no more segments fit).
    auto frame = Packet().ipv4("198.18.0.1", "198.18.0.2").tcp(1, 2).payload(3000).build();
    __sk_buff in{};
    in.gso_segs = 3;
    in.gso_size = 1000;
    auto r = dp->run_tc(frame, &in);
    EXPECT_EQ(r.retval, unsigned(TC_ACT_OK));
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[TCM_GREEN], 3u);                  // counted as the wire's packets
    EXPECT_EQ(c.bytes[TCM_GREEN], 3u * (20 + 20 + 1000)); // each segment with its headers
}

} // namespace
