// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Parsing in the data path (bpf/tricolor.bpf.c) through BPF_PROG_TEST_RUN: unmatched and
// non-IP traffic, every header template, truncation at every offset, inconsistent headers.
#include "datapath_fixture.hpp"

#include <gtest/gtest.h>

using namespace tricolor;
using namespace tricolor::test; // DatapathTest, Packet, policy(), prefix(), v4udp()

namespace {

// ---- parse ------------------------------------------------------------------------------------

TEST_F(DatapathTest, UnmatchedIpPassesAsUnclassified) {
    auto r = dp->run_xdp(v4udp().build());
    EXPECT_EQ(r.retval, XDP_PASS);
    auto g = dp->global_counters();
    EXPECT_EQ(g.unclassified_packets, 1u);
    EXPECT_EQ(g.unclassified_bytes, 128u); // IP 20 + UDP 8 + 100
    EXPECT_EQ(g.malformed_packets, 0u);
}

TEST_F(DatapathTest, NonIpIsCountedApartAndPasses) {
    apply({policy(1, "all")});
    auto r = dp->run_xdp(Packet().ethertype(0x0806).payload(28).build());
    EXPECT_EQ(r.retval, XDP_PASS);
    EXPECT_EQ(dp->global_counters().non_ip_packets, 1u);
    EXPECT_EQ(packets(1), 0u);
}

struct Template {
    const char *name;
    Packet packet;
};

std::vector<Template> templates() {
    return {
        {"ipv4 udp", v4udp()},
        {"ipv4 tcp with options", Packet().ipv4("198.18.0.1", "198.18.0.2").tcp(1, 2, 12)},
        {"ipv4 options + sctp",
         Packet().ipv4("198.18.0.1", "198.18.0.2").ip_options(8).sctp(5, 6).payload(4)},
        {"ipv4 icmp", Packet().ipv4("198.18.0.1", "198.18.0.2").icmp()},
        {"qinq ipv4 udp",
         Packet().vlan(100, 0x88a8).vlan(200).ipv4("198.18.0.1", "198.18.0.2").udp(7, 8)},
        {"ipv6 udp", Packet().ipv6("2001:db8::1", "2001:db8::2").udp(1, 2).payload(10)},
        {"ipv6 ext chain",
         Packet().ipv6("2001:db8::1", "2001:db8::2").ext(0, 8).ext(43, 24).ext(60, 16).tcp(3, 4)},
        {"ipv6 first fragment",
         Packet().ipv6("2001:db8::1", "2001:db8::2").fragment(0, true).udp(1, 2)},
        {"ipv6 ah", Packet().ipv6("2001:db8::1", "2001:db8::2").ext(51, 24).udp(1, 2)},
        {"vlan ipv6 icmp", Packet().vlan(5).ipv6("2001:db8::1", "2001:db8::2").icmp()},
    };
}

TEST_F(DatapathTest, EveryTemplateParsesAndIsMetered) {
    Policy all = policy(1, "all", Algo::srtcm, 8000000, 1000000, 0);
    apply({all});
    uint64_t n = 0;
    ASSERT_GE(templates().size(), 10u);
    for (auto &t : templates()) {
        SCOPED_TRACE(t.name);
        auto r = dp->run_xdp(t.packet.build());
        EXPECT_EQ(r.retval, XDP_PASS);
        EXPECT_EQ(packets(1), ++n);
        EXPECT_EQ(dp->global_counters().malformed_packets, 0u);
    }
}

TEST_F(DatapathTest, TruncationAtEveryOffsetIsMalformedAndNeverMetered) {
    apply({policy(1, "all", Algo::srtcm, 8000000, 1000000, 0)});
    uint64_t malformed = 0;
    ASSERT_GE(templates().size(), 10u);
    for (auto &t : templates()) {
        auto frame = t.packet.build();
        for (size_t len = 14; len < frame.size(); ++len) {
            SCOPED_TRACE(::testing::Message() << t.name << " cut to " << len);
            std::vector<uint8_t> cut(frame.begin(), frame.begin() + len);
            auto r = dp->run_xdp(cut);
            EXPECT_EQ(r.retval, XDP_PASS); // passed by default
            ASSERT_EQ(dp->global_counters().malformed_packets, ++malformed);
        }
    }
    EXPECT_EQ(packets(1), 0u);
    // ...or dropped, when the operator asks.
    dp->set_drop_malformed(true);
    auto frame = v4udp().build();
    frame.resize(30);
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_DROP);
}

TEST_F(DatapathTest, InconsistentHeadersAreMalformed) {
    apply({policy(1, "all", Algo::srtcm, 8000000, 1000000, 0)});
    auto frame = v4udp().build();
    auto bad = [&](std::vector<uint8_t> f, const char *what) {
        SCOPED_TRACE(what);
        uint64_t before = dp->global_counters().malformed_packets;
        dp->run_xdp(f);
        EXPECT_EQ(dp->global_counters().malformed_packets, before + 1);
    };
    auto f = frame;
    f[14] = 0x44; // IHL 4 (16 bytes)
    bad(f, "ihl below 5");
    f = frame;
    f[14] = 0x65;
    bad(f, "version 6 in an IPv4 ethertype");
    f = frame;
    f[16] = 0;
    f[17] = 10; // total length below the header
    bad(f, "total length < ihl");
    f = frame;
    f[17] += 1; // one byte more than the frame holds
    bad(f, "total length beyond the frame");
    auto tcp = Packet().ipv4("198.18.0.1", "198.18.0.2").tcp(1, 2).build();
    tcp[14 + 20 + 12] = 0x40; // data offset 4
    bad(tcp, "tcp doff below 5");
    // Ethernet padding after the IP packet is fine.
    uint64_t before = dp->global_counters().malformed_packets;
    dp->run_xdp(Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).trailer(18).build());
    EXPECT_EQ(dp->global_counters().malformed_packets, before);
    EXPECT_EQ(dp->policy_counters()[1].bytes[TCM_GREEN], 28u); // the IP packet, not the padding
}

} // namespace
