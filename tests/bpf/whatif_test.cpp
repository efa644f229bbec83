// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// whatif_test.cpp: `tricolorctl whatif` (docs/spec.md §12) on captures written here: it agrees
// line for line with replay -f on the same packets in every link type, VLAN-tagged, snapped,
// at microsecond stamps; a capture that is bad is named where; the plot's numbers are the run's;
// --suggest finds what an exhaustive grid finds.
#include "pcap_file.hpp"
#include "test_util.hpp"

#include "tricolor/capture.hpp"
#include "tricolor/whatif.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

using namespace tricolor;
using ::testing::HasSubstr;

namespace {

class WhatIfTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!test::is_root())
            GTEST_SKIP() << "needs root (BPF_PROG_TEST_RUN)";
        dir_ = std::filesystem::temp_directory_path() / ("whatif_test." + std::to_string(getpid()));
        std::filesystem::create_directories(dir_);
        engine_ = std::make_unique<HierBpfEngine>(std::vector<Policy>{}); // a load is ~1 s
    }
    void TearDown() override {
        if (!dir_.empty())
            std::filesystem::remove_all(dir_);
    }
    std::string path(const std::string &name) const { return (dir_ / name).string(); }

    static std::vector<FlowTracePacket> trace_of(const std::string &file) {
        std::ifstream in(file);
        auto t = parse_flow_trace(in);
        EXPECT_TRUE(t) << t.error();
        return t ? *t : std::vector<FlowTracePacket>{};
    }
    // replay -f through the data path (its policies fresh), on the trace's times made relative
    // to its first.
    std::string replay_lines(const std::vector<Policy> &policies,
                             std::vector<FlowTracePacket> trace) {
        uint64_t t0 = trace.empty() ? 0 : trace.front().time_ns;
        for (auto &p : trace)
            p.time_ns -= t0;
        EXPECT_TRUE(engine_->datapath().apply({}));
        EXPECT_TRUE(engine_->datapath().apply(policies));
        std::ostringstream out;
        run_hier_replay(*engine_, policies, trace, out);
        return out.str();
    }
    std::string whatif_lines(const std::vector<Policy> &policies, const std::string &pcap,
                             WhatIfResult *result = nullptr) {
        std::ostringstream out;
        WhatIfOptions o;
        o.packets = &out;
        auto r = run_whatif(*engine_, policies, pcap, o);
        EXPECT_TRUE(r) << r.error();
        if (r && result)
            *result = *r;
        return out.str();
    }

    std::filesystem::path dir_;
    std::unique_ptr<HierBpfEngine> engine_;
};

std::vector<std::string> hier_vectors() {
    std::vector<std::string> names;
    for (const auto &e : std::filesystem::directory_iterator(TRICOLOR_VECTOR_DIR))
        if (e.path().extension() == ".yaml" && e.path().stem().string().starts_with("hier-"))
            names.push_back(std::string(TRICOLOR_VECTOR_DIR) + "/" + e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

// Every hier vector, as a capture of each link type (and Ethernet with one and two VLAN tags):
// the same lines as replay -f, and the same colours as the vector's expected output.
TEST_F(WhatIfTest, PacketsAgreeWithReplayOnEveryHierVectorInEveryLinkType) {
    size_t n = 0;
    for (const std::string &base : hier_vectors()) {
        SCOPED_TRACE(base);
        auto policies = load_policy_file(base + ".yaml");
        ASSERT_TRUE(policies) << policies.error();
        auto trace = trace_of(base + ".trace");
        ASSERT_FALSE(trace.empty());
        const std::string want = replay_lines(*policies, trace);
        // The colours of the vector (at its own times) are the replay's at relative times.
        std::string expected = test::read_file(base + ".expected"), colours_want, colours_got;
        for (std::istringstream in(expected); std::getline(in, expected);)
            colours_want += expected.substr(expected.find(',')) + "\n";
        for (std::istringstream in(want); std::getline(in, expected);)
            colours_got += expected.substr(expected.find(',')) + "\n";
        EXPECT_EQ(test::first_difference(colours_got, colours_want), "");
        struct Case {
            int dlt, vlans;
        };
        for (Case c :
             {Case{test::kDltEthernet, 0}, Case{test::kDltEthernet, 1}, Case{test::kDltEthernet, 2},
              Case{test::kDltSll, 0}, Case{test::kDltSll2, 0}, Case{test::kDltRaw, 0}}) {
            SCOPED_TRACE(fmt::format("link type {} with {} VLAN tags", c.dlt, c.vlans));
            std::string pcap = path("v.pcap");
            test::write_pcap(pcap, c.dlt, true, test::trace_packets(trace, c.dlt, c.vlans));
            EXPECT_EQ(test::first_difference(whatif_lines(*policies, pcap), want), "");
            ++n;
        }
    }
    EXPECT_GE(n, 4u * 6u);
}

// A microsecond capture meters at microsecond stamps; a snapped one (64 bytes kept) at each
// packet's length on the wire.
TEST_F(WhatIfTest, MicrosecondStampsAndSnappedPacketsAreMeteredAsTheyWere) {
    const std::string base = hier_vectors().front();
    auto policies = load_policy_file(base + ".yaml");
    ASSERT_TRUE(policies);
    auto trace = trace_of(base + ".trace");
    auto micro = trace;
    for (auto &p : micro)
        p.time_ns -= p.time_ns % 1000;
    std::string pcap = path("us.pcap");
    test::write_pcap(pcap, test::kDltEthernet, false,
                     test::trace_packets(trace, test::kDltEthernet));
    EXPECT_EQ(test::first_difference(whatif_lines(*policies, pcap), replay_lines(*policies, micro)),
              "");

    test::write_pcap(pcap, test::kDltEthernet, true, test::trace_packets(trace, test::kDltEthernet),
                     64);
    std::ifstream f(pcap, std::ios::binary | std::ios::ate);
    EXPECT_LT(static_cast<size_t>(f.tellg()), 24 + trace.size() * (16 + 64) + 1);
    EXPECT_EQ(test::first_difference(whatif_lines(*policies, pcap), replay_lines(*policies, trace)),
              "");
}

// Stamps that go back: said where, printed as they are (as replay -f prints its line) and
// metered as no time passing (the colours of the trace with that packet at its predecessor's
// time).
TEST_F(WhatIfTest, StampsGoingBackAreNamedAndMeteredAsNoTimePassing) {
    const std::string base = hier_vectors().front();
    auto policies = load_policy_file(base + ".yaml");
    ASSERT_TRUE(policies);
    auto trace = trace_of(base + ".trace");
    ASSERT_GT(trace.size(), 10u);
    auto back = trace;
    back[5].time_ns = trace[4].time_ns - 12345;
    auto fixed = trace;
    fixed[5].time_ns = trace[4].time_ns;
    test::write_pcap(path("b.pcap"), test::kDltEthernet, true,
                     test::trace_packets(back, test::kDltEthernet));
    WhatIfResult r;
    std::string got = whatif_lines(*policies, path("b.pcap"), &r);
    EXPECT_EQ(test::first_difference(got, replay_lines(*policies, back)), "");
    auto colours = [](const std::string &lines) {
        std::string out, line;
        for (std::istringstream in(lines); std::getline(in, line);)
            out += line.substr(line.find(',', line.find(',') + 1)) + "\n";
        return out;
    };
    EXPECT_EQ(test::first_difference(colours(got), colours(replay_lines(*policies, fixed))), "");
    EXPECT_EQ(r.backwards, 1u);
    EXPECT_EQ(r.first_backwards, "packet 6, 12345 ns before packet 5");
}

// Bad captures: each named, with the packet where it went wrong, and no result.
TEST_F(WhatIfTest, BadCapturesAreNamedWithThePacket) {
    const std::string base = hier_vectors().front();
    auto policies = load_policy_file(base + ".yaml");
    ASSERT_TRUE(policies);
    auto trace = trace_of(base + ".trace");
    WhatIfOptions o;

    std::ofstream(path("text.pcap")) << "time_ns bytes\n1 100\n";
    auto r = run_whatif(*engine_, *policies, path("text.pcap"), o);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("not a pcap or pcapng capture"));

    EXPECT_THAT(run_whatif(*engine_, *policies, path("absent.pcap"), o).error(),
                HasSubstr("absent.pcap"));

    // Cut in the middle of the 8th packet's data, then in the middle of its record header.
    auto packets = test::trace_packets(trace, test::kDltEthernet);
    test::write_pcap(path("t.pcap"), test::kDltEthernet, true, packets);
    size_t at = 24;
    for (size_t i = 0; i < 7; ++i)
        at += 16 + packets[i].data.size();
    std::filesystem::resize_file(path("t.pcap"), at + 16 + 10);
    r = run_whatif(*engine_, *policies, path("t.pcap"), o);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("packet 8:"));
    EXPECT_THAT(r.error(), HasSubstr("truncated"));
    std::filesystem::resize_file(path("t.pcap"), at + 7);
    r = run_whatif(*engine_, *policies, path("t.pcap"), o);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("packet 8:"));

    // A link type whatif does not read (BSD loopback): named.
    test::write_pcap(path("null.pcap"), test::kDltNull, true,
                     {{0, std::vector<uint8_t>(40, 0), 0}});
    r = run_whatif(*engine_, *policies, path("null.pcap"), o);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("link type NULL (BSD loopback"));
}

// Records no network would carry: a 10-byte Ethernet runt, a raw IP record claiming 4 GiB on the
// wire, a 70000-byte Ethernet frame. Each is metered or counted apart, in order, and the run ends.
TEST_F(WhatIfTest, RuntsAndGiantsAreCountedNotFatal) {
    const std::string base = hier_vectors().front();
    auto policies = load_policy_file(base + ".yaml");
    ASSERT_TRUE(policies);
    auto trace = trace_of(base + ".trace");
    auto eth = test::trace_packets({trace[0]}, test::kDltEthernet)[0].data;
    std::vector<uint8_t> giant = eth;
    giant.resize(70000);
    test::write_pcap(path("odd.pcap"), test::kDltEthernet, true,
                     {{1000, std::vector<uint8_t>(10, 0xff), 0}, {2000, giant, 0}, {3000, eth, 0}});
    WhatIfResult r;
    std::string lines = whatif_lines(*policies, path("odd.pcap"), &r);
    EXPECT_EQ(r.packets, 3u);
    EXPECT_EQ(r.not_ip_packets, 1u) << "the runt";
    EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 3);
    auto raw = test::trace_packets({trace[0]}, test::kDltRaw)[0];
    raw.orig_len = 0xfffffff0u;
    test::write_pcap(path("huge.pcap"), test::kDltRaw, true, {raw});
    auto h = run_whatif(*engine_, *policies, path("huge.pcap"), {});
    ASSERT_TRUE(h) << h.error();
    EXPECT_EQ(h->packets, 1u);
}

// The per-policy table counts what the packet lines say, red's busiest second included; a
// packet counts at its policy and its parent.
TEST_F(WhatIfTest, TotalsAndPeakRedSecondAreThePacketsOwn) {
    const std::string base = hier_vectors().front();
    auto policies = load_policy_file(base + ".yaml");
    ASSERT_TRUE(policies);
    auto trace = trace_of(base + ".trace");
    test::write_pcap(path("p.pcap"), test::kDltEthernet, true,
                     test::trace_packets(trace, test::kDltEthernet));
    WhatIfResult r;
    std::string lines = whatif_lines(*policies, path("p.pcap"), &r);
    std::map<std::string, ColorCounts> want;
    std::map<std::string, std::map<uint64_t, uint64_t>> red_by_second;
    std::map<std::string, std::string> parent;
    for (const Policy &p : *policies)
        parent[p.name] = p.parent;
    for (std::istringstream in(lines); std::getline(in, lines);) {
        std::smatch m;
        ASSERT_TRUE(std::regex_match(lines, m, std::regex(R"re((\d+),(\d+),(\w+),(.+))re")));
        uint64_t t = std::stoull(m[1]), bytes = std::stoull(m[2]);
        Color c = *parse_color(m[3].str());
        for (std::string p = m[4]; !p.empty() && p != "-"; p = parent[p]) {
            want[p].add(c, bytes);
            if (c == Color::red)
                red_by_second[p][t / 1000000000] += bytes;
        }
    }
    ASSERT_EQ(r.policies.size(), policies->size());
    for (const WhatIfPolicy &w : r.policies) {
        SCOPED_TRACE(w.name);
        EXPECT_EQ(w.counts.packets, want[w.name].packets);
        EXPECT_EQ(w.counts.bytes, want[w.name].bytes);
        uint64_t peak = 0, second = 0;
        for (auto [s, b] : red_by_second[w.name])
            if (b > peak)
                peak = b, second = s;
        EXPECT_EQ(w.peak_red_bytes, peak);
        EXPECT_EQ(w.peak_red_second, second);
    }
    EXPECT_GT(r.policies[0].counts.packets[2] + r.policies[1].counts.packets[2], 0u)
        << "the vector has red, so the peak is tested";
}

// Random bursty UDP from four sources at about twice the CIR, aggregate srTCM.
std::vector<FlowTracePacket> bursty(uint64_t seed, size_t packets) {
    std::mt19937_64 rng(seed);
    std::vector<FlowTracePacket> t;
    uint64_t now = 1000000000;
    for (size_t i = 0; i < packets; ++i) {
        FlowTracePacket p;
        now += rng() % 4 == 0 ? 2000000 + rng() % 8000000 : rng() % 200000; // bursts, gaps
        p.time_ns = now;
        p.bytes = static_cast<uint32_t>(64 + rng() % 1437);
        p.src = {198, 18, 0, static_cast<uint8_t>(1 + rng() % 4)};
        p.dst = {198, 19, 0, 1};
        p.proto = 17;
        p.ports = true;
        p.sport = 1000;
        p.dport = 7000;
        t.push_back(p);
    }
    return t;
}

std::vector<Policy> one_policy(uint64_t cir, uint64_t cbs) {
    Policy p;
    p.id = 0;
    p.name = "udp";
    p.meter.algo = Algo::srtcm;
    p.meter.cir = cir;
    p.meter.cbs = cbs;
    p.meter.ebs = 0;
    p.match.proto = 17;
    return {p};
}

double red_share_at(HierBpfEngine &engine, const std::vector<Policy> &pol,
                    const std::string &pcap) {
    auto r = run_whatif(engine, pol, pcap, {});
    EXPECT_TRUE(r);
    const auto &c = r->policies[0].counts;
    return static_cast<double>(c.bytes[2]) / static_cast<double>(c.total_bytes());
}

// --suggest against an exhaustive grid, on three captures: the grid's smallest passing value is
// the first grid point at or above the suggestion, and the suggestion passes where one less
// fails.
TEST_F(WhatIfTest, SuggestFindsWhatAnExhaustiveGridFinds) {
    HierBpfEngine &engine = *engine_;
    for (uint64_t seed : {1, 2, 3}) {
        SCOPED_TRACE(seed);
        std::string pcap = path("s.pcap");
        test::write_pcap(pcap, test::kDltEthernet, true,
                         test::trace_packets(bursty(seed, 400), test::kDltEthernet));
        const double allowed = 0.05;
        for (std::string what : {"cbs", "cir"}) {
            SCOPED_TRACE(what);
            const uint64_t cir = 4000000, cbs = 6000;
            auto pol = one_policy(cir, cbs);
            auto s = suggest_whatif(pol, pcap, "udp", what, allowed);
            ASSERT_TRUE(s) << s.error();
            auto at = [&](uint64_t v) {
                return red_share_at(engine, what == "cbs" ? one_policy(cir, v) : one_policy(v, cbs),
                                    pcap);
            };
            EXPECT_LE(at(s->value), allowed);
            EXPECT_DOUBLE_EQ(at(s->value), s->red_share);
            ASSERT_GT(s->value, 1u);
            EXPECT_GT(at(s->value - 1), allowed);
            const uint64_t step = what == "cbs" ? 2000 : 500000;
            uint64_t grid = 0;
            for (uint64_t v = step; v <= 200 * step; v += step)
                if (at(v) <= allowed) {
                    grid = v;
                    break;
                }
            ASSERT_NE(grid, 0u);
            EXPECT_EQ(grid, (s->value + step - 1) / step * step) << "suggested " << s->value;
        }
    }
}

// The plot's numbers: each bar's bytes sum to the table's, bars are drawn at the panel's scale,
// the CIR line where the axis says, levels within the bucket.
TEST_F(WhatIfTest, ThePlotDrawsTheRunsNumbers) {
    std::string pcap = path("plot.pcap");
    test::write_pcap(pcap, test::kDltEthernet, true,
                     test::trace_packets(bursty(7, 3000), test::kDltEthernet));
    auto pol = one_policy(4000000, 6000);
    WhatIfOptions o;
    o.plot = true;
    auto r = run_whatif(*engine_, pol, pcap, o);
    ASSERT_TRUE(r);
    ASSERT_GT(r->policies[0].bins.size(), 100u);
    ASSERT_LE(r->policies[0].bins.size(), kWhatIfMaxBins);
    std::string svg = whatif_svg(*r, pol);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        svg, m, std::regex(R"re(data-y0="([\d.]+)" data-px-per-bps="([\d.e-]+)")re")));
    const double y0 = std::stod(m[1]), scale = std::stod(m[2]);
    const double bin_s = static_cast<double>(r->bin_ns) / 1e9;
    uint64_t bytes[3] = {};
    std::regex bar(
        R"re(<rect class="bar (\w+)" data-bin="(\d+)" data-bytes="(\d+)" x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)")re");
    size_t bars = 0;
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), bar); it != std::sregex_iterator();
         ++it, ++bars) {
        const auto &b = *it;
        Color c = *parse_color(b[1].str());
        uint64_t n = std::stoull(b[3]);
        bytes[static_cast<size_t>(c)] += n;
        EXPECT_EQ(n, r->policies[0].bins[std::stoul(b[2])].bytes[static_cast<size_t>(c)]);
        EXPECT_NEAR(std::stod(b[5]), 8.0 * static_cast<double>(n) / bin_s * scale, 0.01);
        EXPECT_LE(std::stod(b[4]), y0);
    }
    EXPECT_GT(bars, 100u);
    for (size_t c = 0; c < 3; ++c)
        EXPECT_EQ(bytes[c], r->policies[0].counts.bytes[c]) << c;
    ASSERT_TRUE(std::regex_search(
        svg, m, std::regex(R"re(data-name="CIR" data-bps="(\d+)" x1="[\d.]+" y1="([\d.]+)")re")));
    EXPECT_EQ(m[1], "4000000");
    EXPECT_NEAR(std::stod(m[2]), y0 - 4000000 * scale, 0.01);
    ASSERT_TRUE(
        std::regex_search(svg, m, std::regex(R"re(class="level c" data-values="([\d ]+)")re")));
    std::istringstream levels(m[1].str());
    uint64_t low = UINT64_MAX, high = 0, v;
    size_t n = 0;
    while (levels >> v)
        low = std::min(low, v), high = std::max(high, v), ++n;
    EXPECT_GE(n, r->policies[0].bins.size() - 1);
    EXPECT_EQ(high, 6000u) << "full in the gaps";
    EXPECT_LT(low, 1500u) << "near empty where red was";
}

// docs/spec.md §14 in a capture: a warm-up and a quota metered by the data path (whatif) as
// replay -f's model engine meters them, packet by packet, and the plot's steps and use are the
// run's: the rate from step 1 up to warm, the use rising to the green and yellow bytes.
TEST_F(WhatIfTest, AWarmUpAndAQuotaAreTheModelsAndThePlotShowsThem) {
    auto trace = bursty(11, 3000);
    std::string pcap = path("warm.pcap");
    test::write_pcap(pcap, test::kDltEthernet, true,
                     test::trace_packets(trace, test::kDltEthernet));
    auto pol = one_policy(4000000, 6000);
    pol[0].meter.warmup_ns = 2000000000; // 2 s in 4 steps: the trace runs about 5 s
    pol[0].meter.cold_factor = 4;
    pol[0].meter.quota_bytes = 1000000;           // used up within the trace: then red
    pol[0].meter.quota_period_ns = 3600000000000; // hours from the epoch: one period here
    HierModelEngine model(pol);
    std::ostringstream want;
    auto relative = trace;
    for (auto &p : relative)
        p.time_ns -= trace.front().time_ns;
    run_hier_replay(model, pol, relative, want);
    EXPECT_EQ(test::first_difference(whatif_lines(pol, pcap), want.str()), "");
    WhatIfOptions o;
    o.plot = true;
    auto r = run_whatif(*engine_, pol, pcap, o);
    ASSERT_TRUE(r);
    const auto &w = r->policies[0];
    EXPECT_EQ(w.cold_factor, 4u);
    EXPECT_EQ(w.quota, 1000000u);
    ASSERT_GT(w.counts.bytes[TCM_RED], 0u);
    std::string svg = whatif_svg(*r, pol);
    std::smatch m;
    auto values = [&](const std::string &cls) {
        std::vector<uint64_t> v;
        if (std::regex_search(svg, m,
                              std::regex("class=\"" + cls + "\" data-values=\"([\\d ]+)\""))) {
            std::istringstream in(m[1].str());
            for (uint64_t x; in >> x;)
                v.push_back(x);
        }
        return v;
    };
    auto steps = values("warm-rate"), used = values("quota-used");
    ASSERT_GE(steps.size(), 100u);
    ASSERT_EQ(used.size(), steps.size());
    EXPECT_EQ(steps.front(), 1u);
    EXPECT_EQ(std::ranges::max(steps), 5u); // K + 1: warm
    EXPECT_TRUE(std::ranges::is_sorted(used)) << "one period: the use only grows";
    EXPECT_EQ(used.back(), w.counts.bytes[TCM_GREEN] + w.counts.bytes[TCM_YELLOW]);
    EXPECT_GE(used.back(), 1000000u);
}

// frame_flow reads what synthesize_frame wrote, for every family and protocol replay knows.
TEST(WhatIfFrame, FlowOfASynthesizedFrameIsItsTraceLine) {
    for (const char *line :
         {"0 100 198.18.0.1 198.19.0.2 udp 1000 53", "0 1500 198.18.0.1 198.19.0.2 tcp 40000 443",
          "0 84 198.18.0.1 198.19.0.2 icmp", "0 300 2001:db8::1 2001:db8::2 udp 5353 5353",
          "0 60 2001:db8::1 2001:db8::2 icmpv6", "0 40 198.18.0.1 198.19.0.2"}) {
        SCOPED_TRACE(line);
        auto p = parse_flow_trace_line(line, 1);
        ASSERT_TRUE(p && *p);
        auto f = frame_flow(synthesize_frame(**p));
        ASSERT_TRUE(f);
        EXPECT_EQ(f->bytes, (*p)->bytes);
        EXPECT_EQ(f->ipv6, (*p)->ipv6);
        EXPECT_EQ(f->src, (*p)->src);
        EXPECT_EQ(f->dst, (*p)->dst);
        EXPECT_EQ(f->proto, (*p)->proto);
        EXPECT_EQ(f->ports, (*p)->ports);
        EXPECT_EQ(f->sport, (*p)->sport);
        EXPECT_EQ(f->dport, (*p)->dport);
    }
    EXPECT_FALSE(frame_flow(std::vector<uint8_t>(60, 0))) << "EtherType 0: not IP";
}

} // namespace
