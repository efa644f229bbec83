// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The packet parser under hostile frames: templates of every header the parser walks (VLAN and
// QinQ stacks, IPv4 options and fragments, IPv6 extension chains, TCP options, SCTP, ICMP, ARP)
// mutated at random (cut at any byte, bytes flipped, header fields set to any value, garbage
// appended) and run through the real programs with BPF_PROG_TEST_RUN, XDP and tc. Checked:
//  - every verdict is pass or drop, and a drop is a red packet of the policy whose red drops;
//  - every frame is counted exactly once: in a policy, unclassified, non-IP or malformed (the
//    sums compared after every frame);
//  - green bytes never exceed the committed bucket's bound, CBS + CIR*T, for the aggregate
//    policies (the test clock advances 1 us a frame: tokens flow while frames arrive).
// 10^6 frames a hook (about 20 s here; TRICOLOR_FRAMES to change), a tenth of it in
// the 6.1 guest (divided by TRICOLOR_TIME_SCALE); the seed is printed and TRICOLOR_FUZZ_SEED
// replays one.
#include "datapath_fixture.hpp"

#include <fmt/format.h>
#include <linux/pkt_cls.h>

#include <array>
#include <cstdlib>
#include <random>

namespace tricolor::test {
namespace {

constexpr uint64_t kCir = 8'000'000; // bit/s: 1 byte a microsecond
constexpr uint64_t kCbs = 3000;
constexpr uint64_t kStepNs = 1000;

uint64_t env_or(const char *name, uint64_t fallback) {
    const char *v = std::getenv(name);
    return v && *v ? std::strtoull(v, nullptr, 0) : fallback;
}

std::vector<Packet> templates() {
    return {
        v4udp(),
        Packet().ipv4("198.18.0.1", "198.19.0.2").tcp(1000, 2000, 12).payload(200),
        Packet().ipv4("198.18.0.7", "198.19.0.2").ip_options(8).udp(5, 2000).payload(60),
        Packet().ipv4("198.18.0.1", "198.19.0.2").fragment(0, true).udp(1000, 2000).payload(80),
        Packet().ipv4("198.18.0.1", "198.19.0.2").fragment(10, false).payload(80),
        Packet().vlan(10).ipv4("198.18.0.1", "198.19.0.2").udp(1000, 2000).payload(100),
        Packet().vlan(10, 0x88a8).vlan(20).ipv4("198.18.0.1", "198.19.0.2").udp(1, 2000).payload(9),
        Packet().ipv6("2001:db8::1", "2001:db8::2").udp(1000, 2000).payload(100),
        Packet()
            .ipv6("2001:db8::1", "2001:db8::2")
            .ext(0, 8)
            .ext(43, 24)
            .ext(60, 16)
            .tcp(1000, 2000)
            .payload(40),
        Packet().ipv6("2001:db8::1", "2001:db8::2").fragment(0, true).udp(1000, 2000).payload(30),
        Packet().vlan(7).ipv6("2001:db8::9", "2001:db8::2").sctp(1, 2).payload(20),
        Packet().ipv4("198.18.0.3", "198.19.0.2").icmp().payload(56),
        Packet().ipv4("198.18.0.3", "198.19.0.2").proto(47).payload(56),
        Packet().ethertype(0x0806).payload(28),
        Packet().ipv4("198.18.0.1", "198.19.0.2").udp(1000, 2000).payload(10).trailer(12),
    };
}

class FrameFuzz : public DatapathFixture {
  protected:
    void configure(DatapathOptions &o) const override { o.programs |= DatapathOptions::kTcProgram; }
    void SetUp() override {
        DatapathFixture::SetUp();
        if (IsSkipped() || HasFatalFailure())
            return;
        // Aggregate srtcm on UDP to 2000 (red dropped, yellow remarked), aggregate trtcm on
        // 2001:db8::/32, per-source srtcm on the rest of 198.18.0.0/15 (red passes).
        Policy udp = policy(1, "udp", Algo::srtcm, kCir, kCbs, kCbs);
        udp.match.proto = 17;
        udp.match.dport = PortRange{2000, 2000};
        udp.actions[TCM_YELLOW] = parse_action("dscp:af12").value();
        Policy v6 = policy(2, "v6", Algo::trtcm, kCir, kCbs, kCbs);
        v6.match.src = prefix("2001:db8::/32");
        v6.actions[TCM_RED] = parse_action("pass").value();
        Policy per = policy(3, "per", Algo::srtcm, kCir, kCbs, kCbs);
        per.match.src = prefix("198.18.0.0/15");
        per.per = TCM_PER_SRC;
        per.priority = 10;
        per.actions[TCM_RED] = parse_action("pass").value();
        apply({udp, v6, per});
    }

    // The three policies' counters and the global ones, read once a frame.
    struct Counts {
        std::array<tcm_counters, 4> policy{}; // by id: 1 udp, 2 v6, 3 per
        tcm_global_counters global{};
        static uint64_t packets(const tcm_counters &c) {
            return c.packets[0] + c.packets[1] + c.packets[2];
        }
        // Every frame lands in exactly one of these.
        uint64_t counted() const {
            return packets(policy[1]) + packets(policy[2]) + packets(policy[3]) +
                   global.unclassified_packets + global.non_ip_packets + global.malformed_packets;
        }
    };
    Counts read_counts() const {
        Counts c;
        for (uint32_t id : {1u, 2u, 3u})
            c.policy[id] = dp->policy_counter(id);
        c.global = dp->global_counters();
        return c;
    }

    // One mutation of @frame, whose headers end at @ends.
    static void mutate(std::vector<uint8_t> &frame, const std::vector<size_t> &ends,
                       std::mt19937_64 &rng) {
        auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
        switch (rng() % 6) {
        case 0: // cut anywhere, header boundaries (and a byte either side) most often
            if (rng() % 2 && !ends.empty()) {
                size_t at = ends[pick(ends.size())] + pick(3);
                frame.resize(std::min(frame.size(), at > 0 ? at - 1 : 0));
            } else {
                frame.resize(pick(frame.size() + 1));
            }
            break;
        case 1: // flip a few bits anywhere
            for (size_t k = 1 + pick(4); k > 0 && !frame.empty(); --k)
                frame[pick(frame.size())] ^= static_cast<uint8_t>(1u << pick(8));
            break;
        case 2: // any value in the bytes just before a header's end (lengths, IHL, next header)
            if (!ends.empty() && !frame.empty()) {
                size_t end = std::min(ends[pick(ends.size())], frame.size());
                size_t at = end > 8 ? end - 1 - pick(8) : pick(frame.size());
                frame[at] = static_cast<uint8_t>(rng());
            }
            break;
        case 3: // garbage appended
            for (size_t k = pick(64); k > 0; --k)
                frame.push_back(static_cast<uint8_t>(rng()));
            break;
        case 4: // two mutations
            mutate(frame, ends, rng);
            mutate(frame, ends, rng);
            break;
        default: // as built
            break;
        }
    }

    void run(bool tc) {
        const double scale = std::max(1.0, time_scale());
        const uint64_t frames = static_cast<uint64_t>(
            static_cast<double>(env_or("TRICOLOR_FRAMES", 1'000'000)) / scale);
        const uint64_t seed = env_or("TRICOLOR_FUZZ_SEED", std::random_device{}());
        std::printf("%s: %llu frames, seed %llu (TRICOLOR_FUZZ_SEED replays it)\n",
                    tc ? "tc" : "XDP", static_cast<unsigned long long>(frames),
                    static_cast<unsigned long long>(seed));
        SCOPED_TRACE(::testing::Message() << "TRICOLOR_FUZZ_SEED=" << seed);
        std::mt19937_64 rng(seed);
        auto tpl = templates();
        std::vector<std::vector<uint8_t>> built;
        std::vector<std::vector<size_t>> ends;
        for (const auto &t : tpl) {
            built.push_back(t.build());
            ends.push_back(t.header_ends());
        }
        uint64_t now = 1'000'000'000, first = now, drops = 0, refused = 0;
        const uint64_t before = read_counts().counted();
        for (uint64_t i = 0; i < frames; ++i) {
            size_t k = static_cast<size_t>(rng() % built.size());
            std::vector<uint8_t> frame = built[k];
            mutate(frame, ends[k], rng);
            if (frame.size() < 14) // BPF_PROG_TEST_RUN's own floor: an Ethernet header
                frame.resize(14, 0);
            dp->set_clock(now);
            Datapath::TestRun r;
            try {
                r = tc ? dp->run_tc(frame) : dp->run_xdp(frame);
            } catch (const std::exception &e) {
                // The kernel's test runner builds an skb for tc and refuses (EINVAL) an IP
                // header cut short, before the program runs: such frames are XDP's to test.
                std::string hex;
                for (uint8_t b : frame)
                    hex += fmt::format("{:02x}", b);
                ASSERT_TRUE(tc) << "frame " << i << " (template " << k << "): " << e.what() << ": "
                                << hex;
                ++refused;
                now += kStepNs;
                continue;
            }
            const unsigned pass = tc ? unsigned(TC_ACT_OK) : unsigned(XDP_PASS);
            const unsigned drop = tc ? unsigned(TC_ACT_SHOT) : unsigned(XDP_DROP);
            ASSERT_TRUE(r.retval == pass || r.retval == drop) << "frame " << i << ": " << r.retval;
            if (r.retval == drop) {
                ++drops;
                auto v = dp->last_verdict();
                ASSERT_EQ(v.policy_id, std::optional<uint32_t>(1)) << "frame " << i;
                ASSERT_EQ(v.color, Color::red) << "frame " << i;
            }
            const Counts n = read_counts();
            ASSERT_EQ(n.counted() - before, i + 1 - refused)
                << "frame " << i << " (template " << k << ", " << frame.size() << " bytes)";
            // Aggregate buckets, started full at their first packet: green <= CBS + CIR*T.
            const uint64_t bound = kCbs + kCir * (now - first) / 8'000'000'000;
            ASSERT_LE(n.policy[1].bytes[TCM_GREEN], bound) << "udp, frame " << i;
            ASSERT_LE(n.policy[2].bytes[TCM_GREEN], bound) << "v6, frame " << i;
            now += kStepNs;
        }
        const Counts n = read_counts();
        const tcm_global_counters &g = n.global;
        std::printf(
            "%s: policies %llu/%llu/%llu packets, unclassified %llu, non-IP %llu, "
            "malformed %llu, dropped %llu, refused by the test runner %llu\n",
            tc ? "tc" : "XDP", static_cast<unsigned long long>(Counts::packets(n.policy[1])),
            static_cast<unsigned long long>(Counts::packets(n.policy[2])),
            static_cast<unsigned long long>(Counts::packets(n.policy[3])),
            static_cast<unsigned long long>(g.unclassified_packets),
            static_cast<unsigned long long>(g.non_ip_packets),
            static_cast<unsigned long long>(g.malformed_packets),
            static_cast<unsigned long long>(drops), static_cast<unsigned long long>(refused));
        // The mix reached every way out: a harness whose frames all parse, or all fail, tests
        // less than it claims.
        EXPECT_GT(g.malformed_packets, 0u);
        EXPECT_GT(g.non_ip_packets, 0u);
        EXPECT_GT(g.unclassified_packets, 0u);
        EXPECT_GT(drops, 0u);
    }
};

TEST_F(FrameFuzz, XdpCountsEveryFrameOnceAndKeepsTheBound) {
    run(false);
}

TEST_F(FrameFuzz, TcCountsEveryFrameOnceAndKeepsTheBound) {
    run(true);
}

} // namespace
} // namespace tricolor::test
