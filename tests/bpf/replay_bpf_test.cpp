// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The BPF replay program through BPF_PROG_TEST_RUN: the bytecode itself meets the vectors and
// agrees with the model packet for packet, state for state, on long random traces.
#include "test_util.hpp"
#include "tricolor/replay.hpp"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

using namespace tricolor;

namespace {

TEST(BpfReplay, MatchesEveryVectorExactly) {
    TRICOLOR_REQUIRE_ROOT();
    auto vectors = test::load_vectors();
    ASSERT_GE(vectors.size(), 8u);
    for (const auto &v : vectors) {
        auto out = test::replay_vector(v, [](const MeterParams &p) {
            return std::make_unique<BpfEngine>(make_meter_config(p), make_warm_config(p),
                                               make_quota_config(p));
        });
        EXPECT_EQ(test::first_difference(out, v.expected), "") << v.name;
    }
}

// The bytecode's warm-up against the exact rational model (tests/vectors/reference.py), token
// for token: the warm-up vectors and random meters from every corner of the limits (8 here,
// 40 in the unit suite: this suite runs in the guest kernels too, where each costs 10x).
TEST(BpfReplay, WarmUpHoldsTheRationalModelsTokensAfterEveryPacket) {
    TRICOLOR_REQUIRE_ROOT();
    std::vector<test::ReferenceRun> runs;
    for (const auto &v : test::load_vectors())
        if (std::find(v.args.begin(), v.args.end(), "--warmup") != v.args.end()) {
            runs.push_back(test::reference_run({"--states", v.name}));
            runs.back().args = v.args;
        }
    ASSERT_GE(runs.size(), 4u);
    for (int seed = 1; seed <= 8; ++seed) // the unit suite runs 40; these, under TCG too
        runs.push_back(test::reference_run({"--case", std::to_string(seed)}));
    for (size_t r = 0; r < runs.size(); ++r) {
        MeterParams p = test::meter_from_args(runs[r].args);
        BpfEngine bpf(make_meter_config(p), make_warm_config(p), make_quota_config(p));
        const uint32_t k2 = p.cold_factor * p.cold_factor;
        for (size_t i = 0; i < runs[r].steps.size(); ++i) {
            const auto &s = runs[r].steps[i];
            ASSERT_EQ(bpf.mark({s.time_ns, s.bytes, s.in}), s.out)
                << "run " << r << " packet " << i;
            ASSERT_TRUE(test::same_tokens(bpf.state().c_tokens, bpf.warm_state().c_rem, k2, s.c_num,
                                          s.c_den))
                << "run " << r << " packet " << i;
            ASSERT_TRUE(test::same_tokens(bpf.state().e_tokens, bpf.warm_state().e_rem, k2, s.e_num,
                                          s.e_den))
                << "run " << r << " packet " << i;
        }
    }
}

struct Mode {
    Algo algo;
    bool aware;
    bool packet_mode;
};

MeterParams random_params(std::mt19937_64 &rng, const Mode &m) {
    std::uniform_int_distribution<int> exp10(0, 12);
    std::uniform_int_distribution<uint64_t> size(1, 200000);
    MeterParams p;
    p.algo = m.algo;
    p.color_aware = m.aware;
    p.packet_mode = m.packet_mode;
    auto rate = [&] {
        uint64_t r = 1;
        for (int i = exp10(rng); i > 0; --i)
            r *= 10;
        return std::min<uint64_t>(r * (1 + rng() % 9), TCM_METER_MAX_RATE);
    };
    p.cir = rate();
    p.cbs = m.packet_mode ? 1 + rng() % 50 : size(rng);
    if (m.algo == Algo::trtcm) {
        p.pir = std::min<uint64_t>(p.cir * (1 + rng() % 4), TCM_METER_MAX_RATE);
        p.pbs = m.packet_mode ? 1 + rng() % 100 : size(rng);
    } else {
        p.ebs = m.packet_mode ? rng() % 100 : size(rng) - 1;
        if (m.algo == Algo::rfc4115)
            p.eir = rng() % 4 == 0 ? 0 : rate();
    }
    return p;
}

std::vector<TracePacket> random_trace(std::mt19937_64 &rng, const MeterParams &p, size_t n) {
    std::vector<TracePacket> trace;
    std::uniform_int_distribution<uint32_t> len(1, kMaxTracePacket);
    std::uniform_int_distribution<int> percent(0, 99), color(0, 2);
    // The mean gap sends about twice the committed rate of 1500-byte packets.
    double unit = p.packet_mode ? 1 : 12000;
    double mean_gap = std::max(1.0, unit / double(p.cir) * 1e9 / 2);
    std::exponential_distribution<double> gap(1 / mean_gap);
    uint64_t t = rng() % 1000000000000;
    for (size_t i = 0; i < n; ++i) {
        int roll = percent(rng);
        uint32_t bytes = roll < 5 ? len(rng) : (roll < 50 ? 1500 : 1 + len(rng) % 1500);
        if (roll < 15)
            ; // back to back
        else if (roll == 15)
            t += uint64_t(mean_gap * 1e6); // a long idle
        else if (roll == 16 && t < (1ull << 62))
            t += 1ull << 62; // years
        else
            t += uint64_t(std::min(gap(rng), 1e15));
        uint64_t stamp = (roll == 17 && t > 1000) ? t - 1000 : t; // a clock going backwards
        trace.push_back({stamp, bytes, static_cast<Color>(color(rng))});
    }
    return trace;
}

TEST(BpfReplay, AgreesWithTheModelOnLongRandomTraces) {
    TRICOLOR_REQUIRE_ROOT();
    std::mt19937_64 rng(20261122);
    size_t compared = 0;
    for (Algo algo : {Algo::srtcm, Algo::trtcm, Algo::rfc4115})
        for (bool aware : {false, true})
            for (bool packet_mode : {false, true})
                for (int round = 0; round < 3; ++round) {
                    Mode mode{algo, aware, packet_mode};
                    MeterParams p = random_params(rng, mode);
                    ASSERT_TRUE(validate(p).ok()) << validate(p).errors[0];
                    auto config = make_meter_config(p);
                    SCOPED_TRACE(::testing::Message() << to_string(algo) << " aware=" << aware
                                                      << " packet=" << packet_mode
                                                      << " cir=" << p.cir << " cbs=" << p.cbs);
                    ModelEngine model(config);
                    Meter reference(config); // for the final state
                    BpfEngine bpf(config);
                    for (const auto &pk : random_trace(rng, p, 3000)) {
                        Color want = model.mark(pk);
                        reference.mark(pk.time_ns, pk.bytes, pk.color);
                        ASSERT_EQ(bpf.mark(pk), want)
                            << "packet " << compared << " t=" << pk.time_ns << " len=" << pk.bytes;
                        ++compared;
                    }
                    auto k = bpf.state();
                    EXPECT_EQ(k.last_ns, reference.state().last_ns);
                    EXPECT_EQ(k.c_tokens, reference.state().c_tokens);
                    EXPECT_EQ(k.e_tokens, reference.state().e_tokens);
                }
    EXPECT_EQ(compared, 36u * 3000);
}

// Frames from 15 bytes (Ethernet header + 1) to 64 KiB + 14 cross the linear/fragmented XDP
// boundary; the program must meter each one's full length.
TEST(BpfReplay, MetersTheFullLengthOfSmallAndMultiBufferFrames) {
    TRICOLOR_REQUIRE_ROOT();
    for (uint32_t len :
         {1u, 13u, 14u, 1500u, 3000u, 3600u, 4096u, 9000u, 32768u, kMaxTracePacket}) {
        SCOPED_TRACE(len);
        MeterParams p;
        p.algo = Algo::srtcm;
        p.cir = 8; // 1 byte/s: nothing refills during the test
        p.cbs = len;
        p.ebs = 0;
        BpfEngine bpf(make_meter_config(p));
        EXPECT_EQ(bpf.mark({1, len, Color::green}), Color::green); // exactly CBS
        EXPECT_EQ(bpf.state().c_tokens, 0u);
        EXPECT_EQ(bpf.mark({1, 1, Color::green}), Color::red);
    }
}

} // namespace
