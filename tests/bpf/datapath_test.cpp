// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The data path (bpf/tricolor.bpf.c) through BPF_PROG_TEST_RUN: parsing and truncation,
// classification precedence, metering against the model, actions' output bytes, counters,
// tc contexts with GSO, policy updates, and two CPUs on one flow.
#include "packet.hpp"
#include "test_util.hpp"
#include "tricolor/datapath.hpp"
#include "tricolor/replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <linux/bpf.h>

#include <bpf/bpf.h>
#include <linux/pkt_cls.h>

#include <random>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

using namespace tricolor;
using test::Packet;

namespace {


Policy policy(uint32_t id, std::string name, Algo algo = Algo::srtcm, uint64_t cir = 8000000,
              uint64_t cbs = 3000, uint64_t second = 3000) {
    Policy p;
    p.id = id;
    p.name = std::move(name);
    p.meter = test::meter_params(algo, cir, cbs, algo == Algo::trtcm ? cir * 2 : cir, second);
    return p;
}

Prefix prefix(const char *text) {
    return parse_prefix(text).value();
}

class DatapathTest : public ::testing::Test {
  protected:
    virtual uint32_t flow_capacity() const { return 8192; }
    void SetUp() override {
        TRICOLOR_REQUIRE_ROOT();
        quiet_libbpf_logging();
        DatapathOptions o;
        o.testing = true;
        o.flow_capacity = flow_capacity();
        dp = std::make_unique<Datapath>(o);
        dp->set_clock(1000000000);
    }
    void apply(const std::vector<Policy> &ps) {
        auto r = dp->apply(ps);
        ASSERT_TRUE(r.has_value()) << r.error();
    }
    uint64_t packets(uint32_t id) {
        auto c = dp->policy_counters()[id];
        return c.packets[0] + c.packets[1] + c.packets[2];
    }
    std::unique_ptr<Datapath> dp;
};

Packet v4udp() {
    return Packet().ipv4("198.18.0.1", "198.19.0.2").udp(1000, 2000).payload(100);
}

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

// ---- metering ---------------------------------------------------------------------------------

// The data path colours every vector's trace as the vector's .expected file says (computed by
// an exact rational model, independent of meter.h). An IPv4/UDP packet cannot be shorter than
// its 28 bytes of headers, so a byte-mode vector with shorter packets is scaled: every length,
// rate and bucket size times k. Tokens are then k times as many on both sides of every
// comparison (cost len*k*8e9 against CBS*k*8e9 + CIR*k*dt, fill times ceil(k*S/(k*R))
// unchanged), so each colour is exactly the vector's.
TEST_F(DatapathTest, ColoursEqualTheExpectedFilesOnTheVectors) {
    auto vectors = test::load_vectors();
    ASSERT_GE(vectors.size(), 8u);
    size_t checked = 0;
    for (const auto &v : vectors) {
        SCOPED_TRACE(v.name);
        auto parsed = parse_meter_spec(test::spec_from_args(v.args));
        ASSERT_TRUE(parsed.has_value());
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
        p.meter = parsed->params;
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

// ---- per-flow state, updates
// ---------------------------------------------------------------------

TEST_F(DatapathTest, PerSourceKeysGiveOneFlowPerSender) {
    Policy p = policy(1, "per-src", Algo::srtcm, 8000, 1000, 0);
    p.per = TCM_PER_SRC;
    apply({p});
    for (int rep = 0; rep < 2; ++rep)
        for (const char *src : {"198.18.0.1", "198.18.0.2", "198.18.0.3"})
            dp->run_xdp(Packet().ipv4(src, "198.19.0.1").udp(rep, 2).l3_size(600).build());
    auto flows = dp->flows();
    ASSERT_EQ(flows.size(), 3u);
    for (const auto &f : flows) {
        EXPECT_EQ(f.key.policy_id, 1u);
        EXPECT_EQ(f.state.counters.packets[TCM_GREEN], 1u); // 1000-byte bucket: one 600-byte packet
        EXPECT_EQ(f.state.counters.packets[TCM_RED], 1u);
    }
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[TCM_GREEN], 3u);
    EXPECT_EQ(c.packets[TCM_RED], 3u);
    // An update keeps the flows; removing the policy takes them away.
    apply({p});
    EXPECT_EQ(dp->flows().size(), 3u);
    apply({});
    EXPECT_TRUE(dp->flows().empty());
}

TEST_F(DatapathTest, PolicyUpdateKeepsTokensCappedAndCounters) {
    Policy p = policy(1, "p", Algo::srtcm, 8000, 3000, 0);
    apply({p});
    auto frame = Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(1000).build();
    dp->run_xdp(frame); // 2000 tokens left
    p.meter.cbs = 1500; // shrink: tokens are capped to 1500
    apply({p});
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_PASS); // 1500 -> 500
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_DROP); // 500 < 1000
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[TCM_GREEN], 2u); // counters kept across the update
    EXPECT_EQ(c.packets[TCM_RED], 1u);
    EXPECT_EQ(dp->policy_state(1).meter.c_tokens, 500 * TCM_TOKENS_PER_BYTE);
    // A policy removed and added again is new: full buckets, zero counters.
    apply({});
    apply({p});
    EXPECT_EQ(packets(1), 0u);
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_PASS);
}

TEST_F(DatapathTest, RefusedApplyChangesNothing) {
    Policy good = policy(1, "good");
    apply({good});
    uint32_t set = dp->active_set();
    Policy bad = policy(2, "bad");
    bad.meter.cbs = 0;
    Policy dup = policy(1, "dup-id");
    auto r = dp->apply({good, bad, dup});
    ASSERT_FALSE(r.has_value());
    EXPECT_THAT(r.error(), ::testing::HasSubstr("policy 'bad': CBS 0 bytes"));
    EXPECT_THAT(r.error(), ::testing::HasSubstr("policy 'dup-id': id 1 is used twice"));
    EXPECT_EQ(dp->active_set(), set);
    dp->run_xdp(v4udp().build());
    EXPECT_EQ(packets(1), 1u);
}

TEST_F(DatapathTest, TooManyShapesIsRefused) {
    std::vector<Policy> ps;
    for (uint32_t i = 0; i < 70; ++i) {
        Policy p = policy(i, "p" + std::to_string(i));
        p.match.dst = Prefix{false, {198, 18, 0, 0}, static_cast<uint8_t>(i % 33)};
        p.match.dport = PortRange{uint16_t(i), uint16_t(i)};
        p.match.src = Prefix{false, {}, static_cast<uint8_t>(i / 33)};
        ps.push_back(p);
    }
    auto r = dp->apply(ps);
    ASSERT_FALSE(r.has_value());
    EXPECT_THAT(r.error(), ::testing::HasSubstr("distinct match shapes"));
}

TEST_F(DatapathTest, SixteenThousandPoliciesClassify) {
    std::vector<Policy> ps;
    for (uint32_t i = 0; i < TCM_MAX_POLICIES; ++i) {
        Policy p = policy(i, "p" + std::to_string(i));
        p.match.dst = Prefix{false, {198, 18, uint8_t(i >> 8), uint8_t(i & 0xff)}, 32};
        ps.push_back(p);
    }
    apply(ps);
    dp->run_xdp(Packet().ipv4("198.18.0.1", "198.18.12.34").udp(1, 2).build());
    EXPECT_EQ(packets(12 * 256 + 34), 1u);
}

// ---- concurrency --------------------------------------------------------------------------------

// Two threads on different CPUs hammer one aggregate flow with the clock stopped: the meter
// may admit at most what the buckets hold, exactly, however the runs interleave.
TEST_F(DatapathTest, TwoCpusOnOneFlowNeverOverAdmit) {
    if (std::thread::hardware_concurrency() < 2)
        GTEST_SKIP() << "needs two CPUs";
    Policy p = policy(1, "shared", Algo::srtcm, 8, 64 * 1000, 64 * 1000); // 1 B/s
    apply({p});
    auto frame = Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(100).build();
    test::run_on_two_cpus(dp->xdp_prog_fd(), frame, 200000);
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[0] + c.packets[1] + c.packets[2], 400000u);
    EXPECT_LE(c.bytes[TCM_GREEN], 64000u);  // never more than CBS...
    EXPECT_LE(c.bytes[TCM_YELLOW], 64000u); // ...or EBS
    // ...and nothing short of them but what a lock timeout coloured red (each could have
    // taken 100 bytes): with no timeouts, exactly CBS and EBS.
    uint64_t timeouts = dp->global_counters().lock_timeouts;
    EXPECT_GE(c.bytes[TCM_GREEN] + c.bytes[TCM_YELLOW] + 100 * timeouts, 128000u);
    EXPECT_EQ(dp->policy_state(1).counters.bytes[TCM_GREEN], c.bytes[TCM_GREEN]);
}

} // namespace

namespace {

class SmallTableTest : public DatapathTest {
  protected:
    uint32_t flow_capacity() const override { return 4; }
};

// A full table never hands out a fresh burst: new flows are metered in the policy's aggregate
// bucket and counted; flows whose buckets are full can be reclaimed without changing a colour.
TEST_F(SmallTableTest, FullTableFallsBackToTheAggregateBucketAndReclaimsIdleFlows) {
    Policy p = policy(1, "per-src", Algo::srtcm, 8000, 1000, 0); // 1000 B/s, 1000 B buckets
    p.per = TCM_PER_SRC;
    apply({p});
    auto from = [](int i) {
        return Packet()
            .ipv4("198.18.0." + std::to_string(i), "198.19.0.1")
            .udp(1, 2)
            .l3_size(600)
            .build();
    };
    for (int i = 1; i <= 4; ++i)
        EXPECT_EQ(dp->run_xdp(from(i)).retval, XDP_PASS);
    EXPECT_EQ(dp->flows().size(), 4u);
    // Sources 5 and 6 find no room: they share the aggregate bucket (1000 bytes: one passes).
    EXPECT_EQ(dp->run_xdp(from(5)).retval, XDP_PASS);
    EXPECT_EQ(dp->run_xdp(from(6)).retval, XDP_DROP);
    EXPECT_EQ(dp->global_counters().table_full, 2u);
    EXPECT_EQ(dp->flows().size(), 4u);
    EXPECT_EQ(dp->policy_state(1).counters.packets[TCM_GREEN], 1u);

    // 0.4 s later each flow holds 400 + 400 = 800 of 1000 bytes: not idle, nothing reclaimed.
    dp->set_clock(1400000000);
    EXPECT_EQ(dp->reclaim_idle_flows(), 0u);
    // At 0.6 s they are full again: all four go, and a new source gets a flow of its own.
    dp->set_clock(1600000000);
    EXPECT_EQ(dp->reclaim_idle_flows(), 4u);
    EXPECT_EQ(dp->flows().size(), 0u);
    EXPECT_EQ(dp->run_xdp(from(7)).retval, XDP_PASS);
    EXPECT_EQ(dp->flows().size(), 1u);
    EXPECT_EQ(dp->global_counters().table_full, 2u);
}

TEST_F(DatapathTest, PerKeyModes) {
    struct Mode {
        const char *name;
        tcm_per per;
        uint8_t prefix4;
        size_t flows; // from the six packets below
    };
    // Sources .1 .2 in 198.18.0.0/24 and .1 in 198.18.1.0/24, each to two destinations.
    for (const Mode &m : {Mode{"src", TCM_PER_SRC, 32, 3}, Mode{"src/24", TCM_PER_SRC, 24, 2},
                          Mode{"dst", TCM_PER_DST, 32, 2}, Mode{"dst/8", TCM_PER_DST, 8, 1},
                          Mode{"5tuple", TCM_PER_5TUPLE, 32, 6}}) {
        SCOPED_TRACE(m.name);
        Policy p = policy(1, m.name, Algo::srtcm, 8000, 100000, 0);
        p.per = m.per;
        p.prefix4 = m.prefix4;
        apply({});
        apply({p});
        for (const char *src : {"198.18.0.1", "198.18.0.2", "198.18.1.1"})
            for (const char *dst : {"198.19.0.1", "198.19.0.2"})
                dp->run_xdp(Packet().ipv4(src, dst).udp(1, 2).build());
        EXPECT_EQ(dp->flows().size(), m.flows);
    }
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

TEST_F(DatapathTest, ListsMoreFlowsThanOneBatch) {
    Policy p = policy(1, "5tuple", Algo::srtcm, 8000, 100000, 0);
    p.per = TCM_PER_5TUPLE;
    apply({p});
    for (uint16_t port = 1; port <= 5000; ++port)
        dp->run_xdp(Packet().ipv4("198.18.0.1", "198.19.0.1").udp(port, 2).build());
    auto flows = dp->flows();
    ASSERT_EQ(flows.size(), 5000u);
    std::set<uint16_t> ports;
    for (const auto &f : flows)
        ports.insert(f.key.sport);
    EXPECT_EQ(ports.size(), 5000u); // each once, across batches of 4096
}

} // namespace

namespace {

TEST_F(DatapathTest, UpsertAndRemoveOnePolicyAtATime) {
    ASSERT_TRUE(dp->upsert(policy(1, "a")).has_value());
    ASSERT_TRUE(dp->upsert(policy(2, "b")).has_value());
    EXPECT_EQ(dp->policies().size(), 2u);
    dp->run_xdp(v4udp().build());
    Policy changed = policy(1, "a", Algo::srtcm, 16000000);
    ASSERT_TRUE(dp->upsert(changed).has_value());
    EXPECT_EQ(dp->policies().size(), 2u);
    EXPECT_EQ(dp->policies()[0].meter.cir, 16000000u);
    EXPECT_EQ(packets(1) + packets(2), 1u); // counters kept across the update
    auto bad = policy(3, "b");              // a second "b"
    EXPECT_THAT(dp->upsert(bad).error(), ::testing::HasSubstr("the name is used twice"));
    EXPECT_EQ(dp->policies().size(), 2u);
    ASSERT_TRUE(dp->remove(2).has_value());
    EXPECT_EQ(dp->policies().size(), 1u);
    EXPECT_THAT(dp->remove(2).error(), ::testing::HasSubstr("no policy with id 2"));
}

} // namespace

namespace {

// What a daemon restart relies on: a new Datapath on the same pin directory finds the active
// set, every counter and every token where the old one left them.
TEST(DatapathPinning, ANewDatapathAdoptsBucketsCountersAndTheActiveSet) {
    TRICOLOR_REQUIRE_ROOT();
    quiet_libbpf_logging();
    std::string pin = "/sys/fs/bpf/tricolor-test-" + std::to_string(getpid());
    Datapath::remove_pins(pin);
    DatapathOptions o;
    o.testing = true;
    o.flow_capacity = 64;
    o.pin_dir = pin;
    Policy p = policy(3, "kept", Algo::srtcm, 8000, 3000, 0);
    auto frame = Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(1000).build();
    {
        Datapath a(o);
        EXPECT_FALSE(a.adopted());
        ASSERT_TRUE(a.apply({p}).has_value());
        a.set_clock(5000000000);
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_PASS); // 2000 left
    }
    {
        Datapath b(o);
        EXPECT_TRUE(b.adopted());
        ASSERT_EQ(b.policies().size(), 1u);
        EXPECT_EQ(b.policies()[0].id, 3u);
        EXPECT_EQ(b.policies()[0].name, "kept");
        b.set_clock(5000000000);
        // Still policing before any apply: the pinned set is the active one.
        EXPECT_EQ(b.run_xdp(frame).retval, XDP_PASS); // 1000 left
        ASSERT_TRUE(b.apply({p}).has_value());        // same id: kept
        EXPECT_EQ(b.run_xdp(frame).retval, XDP_PASS); // 0 left
        EXPECT_EQ(b.run_xdp(frame).retval, XDP_DROP);
        auto c = b.policy_counters()[3];
        EXPECT_EQ(c.packets[TCM_GREEN], 3u); // one counted by a, two by b
        EXPECT_EQ(c.packets[TCM_RED], 1u);
    }
    {
        DatapathOptions bigger = o;
        bigger.flow_capacity = 128;
        try {
            Datapath c(bigger);
            ADD_FAILURE() << "a pinned table of another capacity must be refused";
        } catch (const std::runtime_error &e) {
            EXPECT_THAT(e.what(), ::testing::HasSubstr("do not match this build"));
        }
    }
    Datapath::remove_pins(pin);
    EXPECT_FALSE(std::filesystem::exists(pin));
}

} // namespace

namespace {

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

} // namespace

namespace {

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

} // namespace

namespace {

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
