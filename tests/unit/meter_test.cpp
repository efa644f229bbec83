// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The meter core (bpf/lib/meter.h) in user space: the conformance vectors, the parameter rules,
// properties over long random runs, and the extremes of docs/spec.md §1.
#include "test_util.hpp"
#include "tricolor/meter.hpp"
#include "tricolor/replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <sstream>

using namespace tricolor;
using ::testing::HasSubstr;

namespace {

using i128 = __int128;
constexpr uint64_t kByte = TCM_TOKENS_PER_BYTE;
constexpr uint64_t kSecond = 1000000000;
constexpr uint64_t kYear = 365ull * 24 * 3600 * kSecond;

MeterParams params(Algo algo, uint64_t cir, uint64_t cbs, std::optional<uint64_t> ebs = {},
                   std::optional<uint64_t> pir = {}, std::optional<uint64_t> pbs = {},
                   std::optional<uint64_t> eir = {}) {
    MeterParams p;
    p.algo = algo;
    p.cir = cir;
    p.cbs = cbs;
    p.ebs = ebs;
    p.pir = pir;
    p.pbs = pbs;
    p.eir = eir;
    return p;
}

Meter meter_for(const MeterParams &p) {
    auto v = validate(p);
    EXPECT_TRUE(v.ok()) << (v.errors.empty() ? "" : v.errors[0]);
    return Meter(make_meter_config(p));
}

// --- conformance vectors --------------------------------------------------------------------

TEST(MeterVectors, ModelMatchesEveryVectorExactly) {
    auto vectors = test::load_vectors();
    ASSERT_GE(vectors.size(), 8u);
    for (const auto &v : vectors) {
        auto out = test::replay_vector(v, [](const MeterParams &p) {
            return std::make_unique<ModelEngine>(make_meter_config(p), make_warm_config(p),
                                                 make_quota_config(p));
        });
        EXPECT_EQ(test::first_difference(out, v.expected), "") << v.name;
    }
}

// --- parameter rules ------------------------------------------------------------------------

struct Rule {
    const char *description;
    MeterSpec spec;
    const char *error; // substring of the error, or nullptr when valid
};

MeterSpec spec(std::string algo, std::string cir, std::string cbs,
               std::optional<std::string> ebs = {}, std::optional<std::string> pir = {},
               std::optional<std::string> pbs = {}, std::optional<std::string> eir = {},
               bool packet_mode = false) {
    MeterSpec s;
    s.algo = std::move(algo);
    s.cir = std::move(cir);
    s.cbs = std::move(cbs);
    s.ebs = std::move(ebs);
    s.pir = std::move(pir);
    s.pbs = std::move(pbs);
    s.eir = std::move(eir);
    s.packet_mode = packet_mode;
    return s;
}

TEST(MeterRules, EachRuleRefusesWithAMessage) {
    const std::vector<Rule> rules = {
        {"srtcm ok", spec("srtcm", "10mbit", "15k", "30k"), nullptr},
        {"srtcm without EBS", spec("srtcm", "10mbit", "15k"), nullptr},
        {"trtcm ok", spec("trtcm", "10mbit", "15k", {}, "20mbit", "30k"), nullptr},
        {"rfc4115 EIR 0", spec("rfc4115", "10mbit", "15k", "15k", {}, {}, "0"), nullptr},
        {"rfc4115 minimal", spec("rfc4115", "1", "1"), nullptr},
        {"extremes", spec("trtcm", "1tbit", "1g", {}, "1tbit", "1g"), nullptr},
        {"packet mode", spec("srtcm", "1000", "10", "20", {}, {}, {}, true), nullptr},
        {"CBS 0", spec("srtcm", "10mbit", "0"), "CBS 0 bytes is out of range"},
        {"CIR 0", spec("srtcm", "0", "1500"), "CIR 0bit is out of range"},
        {"CIR above 1 Tbit/s", spec("srtcm", "1001gbit", "1500"), "out of range 1bit..1tbit"},
        {"CBS above 1 GiB", spec("srtcm", "1mbit", "1025m"), "CBS 1074790400 bytes"},
        {"EBS above 1 GiB", spec("srtcm", "1mbit", "1k", "2g"), "EBS"},
        {"PIR < CIR", spec("trtcm", "20mbit", "15k", {}, "10mbit", "15k"), "PIR 10mbit is below"},
        {"PBS 0", spec("trtcm", "1mbit", "15k", {}, "2mbit", "0"), "PBS 0 bytes is out of range"},
        {"trtcm without PIR", spec("trtcm", "1mbit", "15k", {}, {}, "15k"), "trtcm needs PIR"},
        {"trtcm without PBS", spec("trtcm", "1mbit", "15k", {}, "2mbit"), "trtcm needs PBS"},
        {"trtcm with EBS", spec("trtcm", "1mbit", "15k", "1k", "2mbit", "15k"),
         "EBS does not apply to trtcm"},
        {"srtcm with PIR", spec("srtcm", "1mbit", "15k", {}, "2mbit"), "PIR does not apply"},
        {"srtcm with EIR", spec("srtcm", "1mbit", "15k", {}, {}, {}, "1mbit"),
         "EIR does not apply"},
        {"rfc4115 with PBS", spec("rfc4115", "1mbit", "15k", {}, {}, "1k"), "PBS does not apply"},
        {"unknown algo", spec("tbf", "1mbit", "15k"), "algo 'tbf' is not"},
        {"bad unit", spec("srtcm", "1mbyte", "15k"), "CIR: invalid rate '1mbyte'"},
        {"bits in packet mode", spec("srtcm", "1mbit", "15", {}, {}, {}, {}, true),
         "invalid packet rate '1mbit'"},
        {"packet sizes are counts", spec("srtcm", "100", "1k", {}, {}, {}, {}, true),
         "invalid packet count '1k'"},
    };
    ASSERT_GE(rules.size(), 20u);
    for (const auto &rule : rules) {
        SCOPED_TRACE(rule.description);
        auto r = parse_meter_spec(rule.spec);
        if (!rule.error) {
            EXPECT_TRUE(r.has_value()) << r.error();
            continue;
        }
        ASSERT_FALSE(r.has_value());
        EXPECT_THAT(r.error(), HasSubstr(rule.error));
    }
}

TEST(MeterRules, AllProblemsAreReportedTogether) {
    auto r = parse_meter_spec(spec("trtcm", "2mbit", "0", "1k", "1mbit"));
    ASSERT_FALSE(r.has_value());
    for (const char *part :
         {"CBS 0", "EBS does not apply", "trtcm needs PBS", "PIR 1mbit is below"})
        EXPECT_THAT(r.error(), HasSubstr(part));
}

TEST(MeterRules, SmallBucketsWarnButPass) {
    auto r = parse_meter_spec(spec("srtcm", "1mbit", "1000", "1200"));
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->warnings.size(), 1u);
    EXPECT_THAT(r->warnings[0], HasSubstr("1200 bytes, below a 1500-byte packet"));
    EXPECT_TRUE(parse_meter_spec(spec("srtcm", "1mbit", "1000", "1500"))->warnings.empty());
    // Packet mode sizes are packets: no byte warning.
    EXPECT_TRUE(parse_meter_spec(spec("srtcm", "10", "1", {}, {}, {}, {}, true))->warnings.empty());
    EXPECT_FALSE(
        parse_meter_spec(spec("trtcm", "1mbit", "15k", {}, "2mbit", "1k"))->warnings.empty());
    EXPECT_FALSE(
        parse_meter_spec(spec("rfc4115", "1mbit", "15k", "0", {}, {}, "1mbit"))->warnings.empty());
}

// --- properties over long random runs --------------------------------------------------------

struct MeteredRun {
    std::vector<TracePacket> trace;
    std::vector<Color> colors;
};

// Bursts, exponential gaps, idles, and occasional out-of-order stamps, at roughly @load times
// the committed rate.
std::vector<TracePacket> random_trace(std::mt19937_64 &rng, const MeterParams &p, size_t n,
                                      double load) {
    std::vector<TracePacket> trace;
    const uint32_t sizes[] = {1, 40, 64, 576, 1500, 9000};
    std::uniform_int_distribution<int> pick(0, 5), percent(0, 99), color(0, 2);
    double mean_len = 1863.5;
    double unit = p.packet_mode ? 1.0 : mean_len * 8;
    double mean_gap_ns = unit / (double(p.cir) * load) * 1e9;
    std::exponential_distribution<double> gap(1.0 / std::max(mean_gap_ns, 1.0));
    uint64_t t = 1000;
    for (size_t i = 0; i < n; ++i) {
        int roll = percent(rng);
        if (roll < 20)
            ; // back to back
        else if (roll < 21)
            t += uint64_t(mean_gap_ns * 10000); // a long idle
        else
            t += uint64_t(gap(rng));
        uint64_t stamp = t;
        if (roll == 99 && t > 5000)
            stamp = t - 5000; // a clock that went backwards
        trace.push_back({stamp, sizes[pick(rng)], static_cast<Color>(color(rng))});
    }
    return trace;
}

MeteredRun run_meter(const MeterParams &p, std::vector<TracePacket> trace) {
    Meter m = meter_for(p);
    MeteredRun r{std::move(trace), {}};
    for (const auto &pk : r.trace)
        r.colors.push_back(m.mark(pk.time_ns, pk.bytes, pk.color));
    return r;
}

// For every window of consecutive packets [i, j] whose colour is in @counted, the metered
// amount must not exceed burst + rate * (t_j - t_i), in exact integer arithmetic. One pass: keep
// the best start seen so far (max of rate*t_i - tokens before i).
void expect_window_bound(const MeteredRun &r, const MeterParams &p,
                         std::initializer_list<Color> counted, uint64_t rate, uint64_t burst,
                         const char *what) {
    i128 unit = p.packet_mode ? TCM_TOKENS_PER_PACKET : kByte;
    i128 used = 0, best_start = 0;
    uint64_t newest = 0; // out-of-order stamps do not move time back
    bool first = true;
    for (size_t j = 0; j < r.trace.size(); ++j) {
        newest = std::max(newest, r.trace[j].time_ns);
        i128 start_term = i128(rate) * newest - used;
        best_start = first ? start_term : std::max(best_start, start_term);
        first = false;
        bool counts = std::ranges::find(counted, r.colors[j]) != counted.end();
        if (counts)
            used += unit * (p.packet_mode ? 1 : r.trace[j].bytes);
        i128 excess = used - i128(rate) * newest + best_start - i128(burst) * unit;
        ASSERT_LE(excess, 0) << what << " exceeded its bound in a window ending at packet " << j;
    }
}

// The matching floor: the meter must not under-credit either. Take a bucket of size B filling
// at R, and a packet j the meter refused from it (@short_at(j): its outcome proves the bucket held
// fewer than @slack costs of j, e.g. a green-eligible packet not coloured green proves C < cost).
// Let k <= j be the last packet whose refill reached B (the first packet, whose buckets start
// full, if none did). From k to j nothing overflowed, so tokens are conserved exactly:
//   used(k..j-1) = B + R*(newest_j - newest_k) - tokens_at_j > B + R*(newest_j - newest_k) -
//   slack*cost_j
// where used counts the packets of the colours the bucket pays for. k is not observable, so the
// test asserts that SOME window ending at j satisfies it: the best window (the largest used minus
// R*span, found in one pass) must. Together with the ceiling above, before every refused packet
// the meter was within `slack` packets of full admission: a meter crediting 96% of the rate, or
// rounding each refill down, or starting empty, falls below it.
// Returns how many packets it checked.
size_t expect_window_floor(const MeteredRun &r, const MeterParams &p,
                           std::initializer_list<Color> counted, uint64_t rate, uint64_t burst,
                           int slack, const std::function<bool(size_t)> &short_at,
                           const char *what) {
    i128 unit = p.packet_mode ? TCM_TOKENS_PER_PACKET : kByte;
    i128 used = 0, min_start = 0;
    uint64_t newest = 0;
    size_t refused = 0;
    for (size_t j = 0; j < r.trace.size(); ++j) {
        newest = std::max(newest, r.trace[j].time_ns);
        i128 start_term = used - i128(rate) * newest;
        min_start = j == 0 ? start_term : std::min(min_start, start_term);
        i128 cost = unit * (p.packet_mode ? 1 : r.trace[j].bytes);
        if (short_at(j)) {
            ++refused;
            i128 best = used - i128(rate) * newest - min_start;
            EXPECT_GT(best + slack * cost, i128(burst) * unit)
                << what << " fell below its floor at packet " << j << ": under-credited by "
                << double(i128(burst) * unit - slack * cost - best) / double(unit) << " units";
            if (::testing::Test::HasFailure())
                return refused;
        }
        if (std::ranges::find(counted, r.colors[j]) != counted.end())
            used += cost;
    }
    return refused;
}

class MeterProperties : public ::testing::TestWithParam<std::tuple<Algo, bool, bool>> {};

TEST_P(MeterProperties, LongRandomRunsStayWithinEveryBucketBound) {
    auto [algo, aware, packet_mode] = GetParam();
    std::mt19937_64 rng(0x7c0102 + static_cast<int>(algo) * 4 + aware * 2 + packet_mode);
    size_t floor_checked[2] = {}; // packets each floor was checked at, over all loads
    for (double load : {0.5, 1.0, 2.0, 5.0}) {
        SCOPED_TRACE(load);
        uint64_t cir = packet_mode ? 1000 : 10000000, cbs = packet_mode ? 10 : 15000;
        MeterParams p = test::meter_params(
            algo, cir, cbs, info(algo).second == SecondBucket::peak ? cir * 3 : cir / 2, cbs * 2);
        p.color_aware = aware;
        p.packet_mode = packet_mode;
        MeteredRun r = run_meter(p, random_trace(rng, p, 20000, load));
        expect_window_bound(r, p, {Color::green}, p.cir, p.cbs, "green");
        // The bounds follow from what the second bucket is (the table of algorithms).
        switch (info(algo).second) {
        case SecondBucket::overflow:
            expect_window_bound(r, p, {Color::green, Color::yellow}, p.cir, p.cbs + *p.ebs,
                                "green+yellow");
            break;
        case SecondBucket::peak:
            expect_window_bound(r, p, {Color::green, Color::yellow}, *p.pir, *p.pbs,
                                "green+yellow");
            break;
        case SecondBucket::excess:
            expect_window_bound(r, p, {Color::yellow}, *p.eir, *p.ebs, "yellow");
            break;
        }
        // The floors (see expect_window_floor), only under load: below the rate nothing is
        // refused. A packet's incoming colour counts only in colour-aware mode.
        if (load >= 2.0) {
            auto in = [&](size_t j) { return aware ? r.trace[j].color : Color::green; };
            auto is = [&](size_t j, Color c) { return r.colors[j] == c; };
            switch (info(algo).second) {
            case SecondBucket::overflow:
                // Not green though eligible: C < cost. Red though green-eligible: C and E each
                // below the cost, so C + E (one bucket of CBS + EBS at CIR) below two.
                floor_checked[0] += expect_window_floor(
                    r, p, {Color::green}, p.cir, p.cbs, 1,
                    [&](size_t j) { return in(j) == Color::green && !is(j, Color::green); },
                    "green floor");
                floor_checked[1] += expect_window_floor(
                    r, p, {Color::green, Color::yellow}, p.cir, p.cbs + *p.ebs, 2,
                    [&](size_t j) { return in(j) == Color::green && is(j, Color::red); },
                    "green+yellow floor");
                break;
            case SecondBucket::peak:
                // Yellow though green-eligible: P had the tokens, C did not. Red though not red
                // on arrival: P < cost.
                floor_checked[0] += expect_window_floor(
                    r, p, {Color::green}, p.cir, p.cbs, 1,
                    [&](size_t j) { return in(j) == Color::green && is(j, Color::yellow); },
                    "green floor");
                floor_checked[1] += expect_window_floor(
                    r, p, {Color::green, Color::yellow}, *p.pir, *p.pbs, 1,
                    [&](size_t j) { return in(j) != Color::red && is(j, Color::red); },
                    "green+yellow floor");
                break;
            case SecondBucket::excess:
                // C and E refill independently: not green though eligible, C < cost; red though
                // not red on arrival, E < cost.
                floor_checked[0] += expect_window_floor(
                    r, p, {Color::green}, p.cir, p.cbs, 1,
                    [&](size_t j) { return in(j) == Color::green && !is(j, Color::green); },
                    "green floor");
                floor_checked[1] += expect_window_floor(
                    r, p, {Color::yellow}, *p.eir, *p.ebs, 1,
                    [&](size_t j) { return in(j) != Color::red && is(j, Color::red); },
                    "yellow floor");
                break;
            }
        }
        // Colour-aware never upgrades; colour-blind ignores the incoming colour.
        if (aware) {
            for (size_t i = 0; i < r.trace.size(); ++i)
                ASSERT_GE(static_cast<int>(r.colors[i]), static_cast<int>(r.trace[i].color)) << i;
        }
        // The run is not trivially all one colour: the bounds were exercised.
        if (load >= 2.0) {
            EXPECT_NE(std::ranges::count(r.colors, Color::red), 0);
            EXPECT_NE(std::ranges::count(r.colors, Color::green), 0);
        }
    }
    // Each floor was exercised: refused packets were there to check it at.
    EXPECT_GE(floor_checked[0], 100u);
    EXPECT_GE(floor_checked[1], 100u);
}

std::string mode_name(const ::testing::TestParamInfo<std::tuple<Algo, bool, bool>> &info) {
    const auto &[algo, aware, packet_mode] = info.param;
    return std::string(to_string(algo)) + (aware ? "_aware" : "_blind") +
           (packet_mode ? "_packets" : "_bytes");
}

INSTANTIATE_TEST_SUITE_P(AllModes, MeterProperties,
                         ::testing::Combine(::testing::ValuesIn([] {
                                                std::vector<Algo> all;
                                                for (const AlgoInfo &a : algorithms())
                                                    all.push_back(a.algo);
                                                return all;
                                            }()),
                                            ::testing::Bool(), ::testing::Bool()),
                         mode_name);

TEST(MeterProperties, ColorBlindIsColorAwareOfAllGreen) {
    std::mt19937_64 rng(42);
    for (const AlgoInfo &a : algorithms()) {
        const Algo algo = a.algo;
        MeterParams p = test::meter_params(
            algo, 8000000, 3000, a.second == SecondBucket::peak ? 16000000 : 4000000, 6000);
        auto trace = random_trace(rng, p, 5000, 3.0);
        MeteredRun blind = run_meter(p, trace);
        for (auto &pk : trace)
            pk.color = Color::green;
        p.color_aware = true;
        MeteredRun aware_green = run_meter(p, trace);
        EXPECT_EQ(blind.colors, aware_green.colors) << to_string(algo);
    }
}

TEST(MeterProperties, AfterAnIdleTheBucketsAreFull) {
    std::mt19937_64 rng(7);
    for (const AlgoInfo &a : algorithms()) {
        const Algo algo = a.algo;
        const bool peak = a.second == SecondBucket::peak,
                   overflow = a.second == SecondBucket::overflow;
        SCOPED_TRACE(to_string(algo));
        MeterParams p =
            test::meter_params(algo, 1000000, 3000, peak ? 2000000 : 300000, peak ? 9000 : 6000);
        Meter m = meter_for(p);
        for (const auto &pk : random_trace(rng, p, 2000, 4.0))
            m.mark(pk.time_ns, pk.bytes, pk.color);
        const auto &cfg = m.config();
        ASSERT_LT(m.state().c_tokens, cfg.c_size); // drained, so refilling is observable
        uint64_t idle = std::max(cfg.c_fill_ns, cfg.e_rate ? cfg.e_fill_ns : 0);
        // One nanosecond short of the fill time, a drained bucket is not yet full...
        tcm_meter_state almost = m.state();
        tcm_meter_state drained = almost;
        drained.c_tokens = 0;
        drained.e_tokens = 0;
        meter_refill(&cfg, &drained, drained.last_ns + cfg.c_fill_ns - 1);
        EXPECT_LT(drained.c_tokens + (overflow ? drained.e_tokens : 0),
                  cfg.c_size + (overflow ? cfg.e_size : 0));
        // ...and after the idle, from any state, both are.
        meter_refill(&cfg, &almost, almost.last_ns + idle);
        EXPECT_EQ(almost.c_tokens, cfg.c_size);
        EXPECT_EQ(almost.e_tokens, cfg.e_size);
    }
}

// Tokens are conserved to the last nano-bit: a sender above CIR for a simulated year gets
// exactly CBS + CIR*T, split between what it was admitted and what is left in C. A meter that
// rounded per refill would drift by up to one unit per packet: millions here.
TEST(MeterExact, NoDriftOverAYearAboveTheRate) {
    // 1000.125 bytes/s, no whole step per packet. CBS 3000 keeps C from ever overflowing (a red
    // packet leaves < 1000 bytes, and one gap adds 999.125), so no token is lawfully discarded.
    MeterParams p = params(Algo::srtcm, 8001, 3000, 0);
    Meter m = meter_for(p);
    const uint64_t gap = 999 * 1000000; // a 1000-byte packet every 999 ms: just above the rate
    i128 green_bytes = 0;
    uint64_t t = 0;
    for (; t <= kYear; t += gap)
        if (m.mark(t, 1000) == Color::green)
            green_bytes += 1000;
    uint64_t last = t - gap;
    i128 accrued = i128(p.cir) * last; // CIR tokens/ns for `last` ns since the first packet
    EXPECT_EQ(green_bytes * kByte + m.state().c_tokens, i128(p.cbs) * kByte + accrued);
    EXPECT_GT(green_bytes, 0);
}

// --- extremes --------------------------------------------------------------------------------

TEST(MeterExtremes, OneBitPerSecond) {
    Meter m = meter_for(params(Algo::srtcm, 1, 1, 0));
    EXPECT_EQ(m.mark(0, 1), Color::green);
    EXPECT_EQ(m.mark(8 * kSecond - 1, 1), Color::red); // one nano-bit short
    EXPECT_EQ(m.mark(8 * kSecond, 1), Color::green);   // a byte every 8 s, to the ns
    EXPECT_EQ(m.mark(16 * kSecond - 1, 1), Color::red);
    EXPECT_EQ(m.mark(16 * kSecond, 1), Color::green);
}

TEST(MeterExtremes, OneTerabitPerSecond) {
    Meter m = meter_for(params(Algo::srtcm, TCM_METER_MAX_RATE, TCM_METER_MAX_SIZE, 0));
    uint64_t t = 1000;
    EXPECT_EQ(m.mark(t, 65536), Color::green);
    // Drain the 1 GiB bucket at one instant.
    while (m.state().c_tokens >= 65536 * kByte)
        m.mark(t, 65536);
    uint64_t rest = m.state().c_tokens / kByte;
    EXPECT_EQ(m.mark(t, static_cast<uint32_t>(rest)), Color::green);
    EXPECT_EQ(m.state().c_tokens, 0u);
    EXPECT_EQ(m.mark(t + 1, 125), Color::green); // 10^12 bit/s is 125 bytes every ns
    EXPECT_EQ(m.mark(t + 1, 1), Color::red);
    EXPECT_EQ(m.mark(t + 2, 126), Color::red);
    EXPECT_EQ(m.mark(t + 2, 125), Color::green);
}

TEST(MeterExtremes, GigabyteBucketsAndGapsOfYears) {
    for (uint64_t rate : std::initializer_list<uint64_t>{1, 1000, TCM_METER_MAX_RATE}) {
        SCOPED_TRACE(rate);
        MeterParams p = params(Algo::srtcm, rate, TCM_METER_MAX_SIZE, TCM_METER_MAX_SIZE);
        auto cfg = make_meter_config(p);
        tcm_meter_state s{};
        meter_start(&cfg, &s, 0);
        s.c_tokens = 0;
        s.e_tokens = 0;
        uint64_t both = 2 * TCM_METER_MAX_SIZE * kByte; // 1.7e19: the largest sum the meter holds
        EXPECT_EQ(cfg.c_fill_ns, both / rate + (both % rate != 0));
        // Just short of the fill time: exact, C full and E one step below full.
        uint64_t gap = cfg.c_fill_ns - 1;
        meter_refill(&cfg, &s, gap);
        EXPECT_EQ(s.c_tokens, cfg.c_size);
        EXPECT_EQ(i128(s.c_tokens) + s.e_tokens, i128(gap) * rate);
        // Gaps of 100 years and of 2^64-1 ns fill both without wrapping.
        for (uint64_t g : std::initializer_list<uint64_t>{100 * kYear, ~0ull}) {
            tcm_meter_state e{0, 0, 0};
            meter_refill(&cfg, &e, g);
            if (i128(g) * rate < both) {
                EXPECT_EQ(i128(e.c_tokens) + e.e_tokens, i128(g) * rate);
            } else {
                EXPECT_EQ(e.c_tokens, cfg.c_size);
                EXPECT_EQ(e.e_tokens, cfg.e_size);
            }
        }
    }
    // Independent buckets at the limits too.
    MeterParams t =
        params(Algo::trtcm, 1, TCM_METER_MAX_SIZE, {}, TCM_METER_MAX_RATE, TCM_METER_MAX_SIZE);
    auto cfg = make_meter_config(t);
    tcm_meter_state s{0, 0, 0};
    meter_refill(&cfg, &s, 100 * kYear);
    EXPECT_EQ(s.c_tokens, 100 * kYear); // 1 bit/s for 100 years: 3.15e18 of 8.6e18
    EXPECT_EQ(s.e_tokens, cfg.e_size);
    meter_refill(&cfg, &s, ~0ull);
    EXPECT_EQ(s.c_tokens, cfg.c_size);
}

TEST(MeterExtremes, TimeGoingBackwardsAddsNothing) {
    Meter m = meter_for(params(Algo::srtcm, 8000000000, 1000, 0)); // 1 byte/ns
    EXPECT_EQ(m.mark(1000000, 1000), Color::green);                // drains C at t = 1 ms
    EXPECT_EQ(m.mark(500000, 1), Color::red);                      // earlier stamp: nothing added
    EXPECT_EQ(m.state().last_ns, 1000000u);                        // and time is not moved back
    EXPECT_EQ(m.mark(1000500, 500), Color::green); // 500 ns after the newest: 500 bytes
    EXPECT_EQ(m.state().c_tokens, 0u);
    EXPECT_EQ(m.mark(1000500, 1), Color::red);
}

TEST(MeterExtremes, PacketsLargerThanAnyBucketAreRedWithoutOverflow) {
    Meter m =
        meter_for(params(Algo::srtcm, TCM_METER_MAX_RATE, TCM_METER_MAX_SIZE, TCM_METER_MAX_SIZE));
    EXPECT_EQ(m.mark(0, TCM_METER_MAX_SIZE), Color::green);
    EXPECT_EQ(m.mark(0, TCM_METER_MAX_SIZE), Color::yellow);
    for (uint32_t len :
         {static_cast<uint32_t>(TCM_METER_MAX_SIZE + 1), TCM_METER_MAX_LEN, UINT32_MAX}) {
        Meter full = meter_for(
            params(Algo::srtcm, TCM_METER_MAX_RATE, TCM_METER_MAX_SIZE, TCM_METER_MAX_SIZE));
        EXPECT_EQ(full.mark(0, len), Color::red) << len;
        EXPECT_EQ(full.state().c_tokens, TCM_METER_MAX_SIZE * kByte); // red takes nothing
    }
}

TEST(MeterExtremes, Rfc4115WithZeroEirOnlySpendsWhatEStartedWith) {
    Meter m = meter_for(params(Algo::rfc4115, 8000, 1500, 3000, {}, {}, 0));
    EXPECT_EQ(m.mark(0, 1500), Color::green);
    EXPECT_EQ(m.mark(0, 1500), Color::yellow);
    EXPECT_EQ(m.mark(0, 1500), Color::yellow);
    EXPECT_EQ(m.mark(0, 1500), Color::red);
    EXPECT_EQ(m.mark(100 * kYear, 1500), Color::green); // C refills...
    EXPECT_EQ(m.mark(100 * kYear, 1), Color::red);      // ...E never does
}

TEST(MeterExtremes, PacketModeCountsPackets) {
    MeterParams p = params(Algo::trtcm, 10, 2, {}, 20, 4); // 10 and 20 packets/s
    p.packet_mode = true;
    Meter m = meter_for(p);
    EXPECT_EQ(m.mark(0, 65536), Color::green); // size does not matter
    EXPECT_EQ(m.mark(0, 1), Color::green);
    EXPECT_EQ(m.mark(0, 9000), Color::yellow);
    EXPECT_EQ(m.mark(0, 40), Color::yellow);
    EXPECT_EQ(m.mark(0, 40), Color::red);
    EXPECT_EQ(m.mark(50000000 - 1, 40), Color::red); // P: one packet per 50 ms, not yet
    EXPECT_EQ(m.mark(50000000, 40), Color::yellow);  // P has one, C half of one
    EXPECT_EQ(m.mark(100000000, 40), Color::green);  // 100 ms: C one, P one
}

} // namespace

namespace {

// --shape edt's wait (bpf/lib/meter.h): ceil(need / rate) exactly, with the reciprocal user
// space writes, over the whole range: rates 1 bit/s to 1 Tbit/s, needs up to the clamped cost
// of the longest packet (2^31 bytes), so no product can have wrapped.
TEST(MeterEdt, WaitIsTheExactCeilingWithoutADivision) {
    std::mt19937_64 rng(9);
    const uint64_t max_need = uint64_t(TCM_METER_MAX_LEN) * TCM_TOKENS_PER_BYTE;
    std::vector<uint64_t> rates{1,
                                2,
                                3,
                                7,
                                1ull << 20,
                                1000000,
                                8000000,
                                3000000,
                                999999999989ull,
                                1ull << 39,
                                TCM_METER_MAX_RATE};
    for (int i = 0; i < 200; ++i)
        rates.push_back(1 + rng() % TCM_METER_MAX_RATE);
    for (uint64_t rate : rates) {
        tcm_meter_config c{};
        c.algo = TCM_ALGO_SRTCM;
        c.c_rate = rate;
        uint64_t recip = edt_recip(c);
        std::vector<uint64_t> needs{
            1, rate - 1, rate, rate + 1, max_need, max_need - 1, 65536 * TCM_TOKENS_PER_BYTE};
        for (int i = 0; i < 2000; ++i)
            needs.push_back(1 + rng() % max_need);
        for (int i = 0; i < 200; ++i) // multiples of the rate, and one off
            needs.push_back((1 + rng() % (max_need / rate)) * rate - rng() % 2);
        for (uint64_t need : needs) {
            if (need == 0)
                continue;
            uint64_t exact = uint64_t((i128(need) + rate - 1) / rate);
            ASSERT_EQ(meter_wait_ns(need, rate, recip), exact) << need << " at " << rate;
        }
    }
    tcm_meter_config trtcm{};
    trtcm.algo = TCM_ALGO_TRTCM;
    trtcm.c_rate = 5;
    trtcm.e_rate = 10;
    EXPECT_EQ(edt_recip(trtcm), (~0ull) / 10) << "trtcm waits for P, at PIR";
    trtcm.e_rate = 0;
    EXPECT_EQ(edt_recip(trtcm), 0u);
}

} // namespace
