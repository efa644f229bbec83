// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// `tricolorctl replay` as a user runs it: every vector with both engines, stdin, the summary,
// and every bad input refused with exit 2, a message and no output on stdout.
#include "test_util.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace tricolor;
using ::testing::HasSubstr;

namespace {

const std::string kCtl = TRICOLORCTL_PATH;

test::RunResult replay(std::vector<std::string> args, const std::string &input = "") {
    args.insert(args.begin(), {kCtl, "replay"});
    return test::run_command(args, input);
}

std::vector<std::string> vector_args(const test::Vector &v, const std::string &engine) {
    auto args = v.args;
    args.insert(args.end(), {"--engine", engine, v.trace_path});
    return args;
}

TEST(ReplayCli, ModelEngineMatchesEveryVector) {
    auto vectors = test::load_vectors();
    ASSERT_GE(vectors.size(), 8u); // an empty or lost vector directory must not pass
    for (const auto &v : vectors) {
        SCOPED_TRACE(v.name);
        auto r = replay(vector_args(v, "model"));
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(test::first_difference(r.out, v.expected), "");
    }
}

TEST(ReplayCli, BpfEngineMatchesEveryVector) {
    TRICOLOR_REQUIRE_ROOT();
    auto vectors = test::load_vectors();
    ASSERT_GE(vectors.size(), 8u);
    for (const auto &v : vectors) {
        SCOPED_TRACE(v.name);
        auto r = replay(vector_args(v, "bpf"));
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(test::first_difference(r.out, v.expected), "");
    }
}

TEST(ReplayCli, DefaultEngineIsTheModelAndStdinWorks) {
    auto vectors = test::load_vectors();
    ASSERT_FALSE(vectors.empty());
    auto v = vectors.front();
    auto args = v.args;
    args.push_back("-");
    auto r = replay(args, test::read_file(v.trace_path));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(test::first_difference(r.out, v.expected), "");
}

TEST(ReplayCli, SummaryOnStderrCountsEachColour) {
    auto r = replay({"--algo", "srtcm", "--cir", "8bit", "--cbs", "1500", "--ebs", "1500", "-"},
                    "0 1000\n0 1000\n0 1000\n0 1000 red\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "0,1000,green\n0,1000,yellow\n0,1000,red\n0,1000,red\n");
    EXPECT_THAT(r.err, testing::ContainsRegex("green +1 packets +1000 bytes"));
    EXPECT_THAT(r.err, testing::ContainsRegex("yellow +1 packets +1000 bytes"));
    EXPECT_THAT(r.err, testing::ContainsRegex("red +2 packets +2000 bytes"));
}

TEST(ReplayCli, ColorAwareTakesTheIncomingColour) {
    auto r = replay({"--algo", "srtcm", "--cir", "1mbit", "--cbs", "3000", "--ebs", "3000",
                     "--color-aware", "-"},
                    "0 100 yellow\n0 100 red\n0 100\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "0,100,yellow\n0,100,red\n0,100,green\n");
}

TEST(ReplayCli, MalformedLineExitsTwoNamingTheLineAndPrintsNothing) {
    for (const std::string engine : {"model", "bpf"}) {
        auto r =
            replay({"--algo", "srtcm", "--cir", "1mbit", "--cbs", "3000", "--engine", engine, "-"},
                   "0 100\n# fine\n\n10 100 green\n20 big\n30 100\n");
        EXPECT_EQ(r.exit_code, 2);
        EXPECT_THAT(r.err, HasSubstr("line 5: packet length 'big'"));
        EXPECT_EQ(r.out, "") << "no partial output before the error";
    }
}

struct BadUsage {
    std::vector<std::string> args;
    const char *why;
};

TEST(ReplayCli, BadFlagsExitTwoWithAMessage) {
    const std::vector<BadUsage> cases = {
        {{"--algo", "srtcm", "--cir", "10zbit", "--cbs", "1500", "-"}, "invalid rate '10zbit'"},
        {{"--algo", "srtcm", "--cir", "1mbit", "--cbs", "-1", "-"}, "invalid size '-1'"},
        {{"--algo", "srtcm", "--cir", "1mbit", "--cbs", "0", "-"}, "CBS 0 bytes is out of range"},
        {{"--algo", "trtcm", "--cir", "2mbit", "--cbs", "1500", "--pir", "1mbit", "--pbs", "1500",
          "-"},
         "PIR 1mbit is below CIR 2mbit"},
        {{"--algo", "trtcm", "--cir", "2mbit", "--cbs", "1500", "-"}, "trtcm needs PIR"},
        {{"--algo", "wfq", "--cir", "1mbit", "--cbs", "1500", "-"}, "wfq not in"},
        {{"--algo", "srtcm", "--cbs", "1500", "-"}, "--cir is required"},
        {{"--algo", "srtcm", "--cir", "1mbit", "--cbs", "1500", "--engine", "gpu", "-"},
         "gpu not in"},
        {{"--algo", "srtcm", "--cir", "1mbit", "--cbs", "1500", "/nonexistent/trace"},
         "cannot open trace '/nonexistent/trace'"},
        {{"--algo", "srtcm", "--cir", "1mbit", "--cbs", "1500", "--bogus", "-"}, "--bogus"},
        {{"--algo", "srtcm", "--cir", "1mbit", "--cbs", "1500"}, "FILE is required"},
        {{"--algo", "srtcm", "--cir", "1mbit", "--cbs", "1500", "--warmup", "30", "-"},
         "warmup: invalid duration '30': give a unit"},
        {{"--algo", "srtcm", "--cir", "1mbit", "--cbs", "1500", "--warmup", "30s", "--cold-factor",
          "17", "-"},
         "cold_factor 17 is out of range 2..16"},
        {{"--algo", "srtcm", "--cir", "1mbit", "--cbs", "1500", "--cold-factor", "4", "-"},
         "cold_factor without warmup"},
    };
    ASSERT_GE(cases.size(), 8u);
    for (const auto &c : cases) {
        SCOPED_TRACE(c.why);
        auto r = replay(c.args, "0 100\n");
        EXPECT_EQ(r.exit_code, 2) << r.err;
        EXPECT_THAT(r.err, HasSubstr(c.why));
        EXPECT_EQ(r.out, "");
    }
}

TEST(ReplayCli, SmallBucketsWarnAndStillRun) {
    auto r = replay({"--algo", "srtcm", "--cir", "1mbit", "--cbs", "1000", "-"}, "0 100\n");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("warning: "));
    EXPECT_EQ(r.out, "0,100,green\n");
}

TEST(ReplayCli, NoSubcommandIsBadUsage) {
    auto r = test::run_command({kCtl});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("subcommand is required"));
}

} // namespace
