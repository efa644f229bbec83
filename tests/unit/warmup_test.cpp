// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// --warmup (docs/spec.md §14): the meter's steps, part-tokens and cold starts against the exact
// rational model of tests/vectors/reference.py, token for token; and its bad input.
#include "test_util.hpp"
#include "tricolor/policy_fields.hpp"
#include "tricolor/replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace tricolor;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

// Replays @run through the model and compares every packet's colour and both buckets, exactly.
void expect_model_equals(const test::ReferenceRun &run, const std::string &what) {
    MeterParams p = test::meter_from_args(run.args);
    ASSERT_NE(p.warmup_ns, 0u) << what;
    Meter m(make_meter_config(p), make_warm_config(p), make_quota_config(p));
    const uint32_t k2 = p.cold_factor * p.cold_factor;
    for (size_t i = 0; i < run.steps.size(); ++i) {
        const auto &s = run.steps[i];
        ASSERT_EQ(m.mark(s.time_ns, s.bytes, s.in), s.out) << what << " packet " << i;
        ASSERT_TRUE(
            test::same_tokens(m.state().c_tokens, m.warm_state().c_rem, k2, s.c_num, s.c_den))
            << what << " packet " << i << ": C " << m.state().c_tokens << " + "
            << m.warm_state().c_rem << "/" << k2;
        ASSERT_TRUE(
            test::same_tokens(m.state().e_tokens, m.warm_state().e_rem, k2, s.e_num, s.e_den))
            << what << " packet " << i << ": E " << m.state().e_tokens << " + "
            << m.warm_state().e_rem << "/" << k2;
    }
}

} // namespace

TEST(Warmup, TheRationalModelGivesEveryExpectedFile) {
    auto r = test::run_command(
        {"/usr/bin/env", "python3", std::string(TRICOLOR_VECTOR_DIR) + "/reference.py", "--check"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("vectors equal to the model"));
}

// Every warm-up vector, and random meters from every corner of the limits (1 bit/s to 1 Tbit/s,
// 1 byte to 1 GiB, K 2..16, D 1 ms to 24 h), with packets on the steps' edges, one ns either
// side, and gaps of D - 1, D and D + 1.
TEST(Warmup, TheMeterHoldsTheRationalModelsTokensAfterEveryPacket) {
    size_t vectors = 0;
    for (const auto &v : test::load_vectors())
        if (std::find(v.args.begin(), v.args.end(), "--warmup") != v.args.end()) {
            auto run = test::reference_run({"--states", v.name});
            run.args = v.args;
            expect_model_equals(run, v.name);
            ++vectors;
        }
    EXPECT_GE(vectors, 4u);
    for (int seed = 1; seed <= 40; ++seed)
        expect_model_equals(test::reference_run({"--case", std::to_string(seed)}),
                            "case " + std::to_string(seed));
}

// From empty, a warm-up earns rate * D/K * (1 + 2 + ... + j) / K by the end of step j, and
// rate * D * (K + 1) / 2K over the whole of it: K = 3, D = 1 s at 3 Mbit/s, 2e15 tokens (250 KB).
TEST(Warmup, EachStepEarnsItsShareOfTheRate) {
    MeterParams p = test::meter_params(Algo::trtcm, 3000000, 1u << 30, 3000000, 1u << 30);
    p.start_empty = true;
    p.warmup_ns = 1000000000;
    p.cold_factor = 3;
    Meter m(make_meter_config(p), make_warm_config(p), make_quota_config(p));
    const uint64_t t0 = 5000000000, rate = 3000000;
    m.mark(t0, 0);
    unsigned __int128 sum = 0;
    for (uint64_t j = 1; j <= 3; ++j) {
        sum += j;
        // Step j ends at t0 + j * D / 3, inside a ns unless j = 3: the meter at the end of that
        // ns holds the steps' tokens and at most one ns of the next step's.
        uint64_t edge = t0 + (j * 1000000000 + 2) / 3;
        m.mark(edge, 0);
        unsigned __int128 held = static_cast<unsigned __int128>(m.state().c_tokens) * 9 +
                                 m.warm_state().c_rem; // in 1/9 of a token
        unsigned __int128 steps = static_cast<unsigned __int128>(rate) * 1000000000 * sum;
        EXPECT_GE(held, steps) << "step " << j;
        EXPECT_LE(held, steps + 9 * rate) << "step " << j;
    }
    EXPECT_EQ(m.state().c_tokens, 2000000000000000u); // the whole warm-up: rate * D * 4/6
    EXPECT_EQ(m.warm_state().c_rem, 0u);
    m.mark(t0 + 2000000000, 0); // a second later, at the full rate
    EXPECT_EQ(m.state().c_tokens, 5000000000000000u);
    EXPECT_EQ(m.state().e_tokens, 5000000000000000u); // P as C
}

TEST(Warmup, BadInputIsRefusedNamingTheField) {
    json base = {{"name", "w"}, {"algo", "srtcm"}, {"cir", "1mbit"}, {"cbs", "15k"}};
    test::expect_each_refused(
        base,
        {
            {{{"warmup", "0s"}}, "warmup: 0 is no warm-up"},
            {{{"warmup", "30"}}, "give a unit"},
            {{{"warmup", "soon"}}, "invalid duration 'soon'"},
            {{{"warmup", "25h"}}, "warmup 25h is out of range 1ms..1d"},
            {{{"warmup", "500us"}}, "out of range"},
            {{{"warmup", "30s"}, {"cold_factor", "1"}}, "cold_factor 1 is out of range 2..16"},
            {{{"warmup", "30s"}, {"cold_factor", "17"}}, "cold_factor 17 is out of range 2..16"},
            {{{"warmup", "30s"}, {"cold_factor", "three"}}, "cold_factor: 'three' is not a whole"},
            {{{"cold_factor", "3"}}, "cold_factor without warmup"},
            {{{"warmup", "30s"}, {"fleet", true}}, "warmup: a fleet policy's committed bucket"},
        });
    json good = base;
    good["warmup"] = "30s";
    auto p = to_policy(good, 1);
    ASSERT_TRUE(p.has_value()) << p.error();
    EXPECT_EQ(p->meter.warmup_ns, 30000000000u);
    EXPECT_EQ(p->meter.cold_factor, kDefaultColdFactor);
}
