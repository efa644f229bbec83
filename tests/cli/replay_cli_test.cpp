// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// `tricolorctl replay` as a user runs it: every vector with both engines, stdin, the summary,
// and every bad input refused with exit 2, a message and no output on stdout.
#include "test_util.hpp"
#include "tricolor/policy_spec.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>

using namespace tricolor;
using ::testing::HasSubstr;
using ::testing::Not;

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

namespace {

TEST(Completion, CompletesCommandsFlagsAndValues) {
    std::string script = std::string(TRICOLOR_SOURCE_DIR) + "/tools/completion/tricolorctl.bash";
    auto complete = [&](const std::string &words) {
        return test::run_command(
            {"/bin/bash", "-c",
             "source " + script + "; COMP_WORDS=(" + words +
                 "); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _tricolorctl; echo \"${COMPREPLY[*]}\""});
    };
    EXPECT_THAT(complete("tricolorctl ''").out, HasSubstr("attach detach policy apply stats"));
    EXPECT_EQ(complete("tricolorctl policy s").out, "set show\n");
    EXPECT_EQ(complete("tricolorctl policy add x --algo ''").out, "srtcm trtcm rfc4115\n");
    EXPECT_THAT(complete("tricolorctl attach ''").out, HasSubstr("lo"));
    // A global option's value is not taken for the command.
    EXPECT_EQ(complete("tricolorctl --socket /tmp/x.sock policy s").out, "set show\n");
    EXPECT_THAT(complete("tricolorctl --socket /tmp/x.sock ''").out,
                HasSubstr("attach detach policy"));
    EXPECT_EQ(complete("tricolorctl -j --socket /tmp/x.sock stats --").out,
              "--watch --interval --count\n");
    EXPECT_EQ(complete("tricolorctl policy add x --match proto udp --algo ''").out,
              "srtcm trtcm rfc4115\n");
    // Every option of the policy flag table, --no-* included.
    std::string words = " " + complete("tricolorctl policy set x --").out;
    std::ranges::replace(words, '\n', ' ');
    for (const auto &flag : policy_flags())
        if (flag.kind != PolicyFlagKind::Name) {
            EXPECT_THAT(words, HasSubstr(" " + policy_flag_option(flag) + " "));
        }
}

// Usage errors exit 2, and under -j they are JSON on stderr, CLI11's own included.
TEST(UsageErrors, ExitTwoAndAreJsonUnderJ) {
    struct Case {
        std::vector<std::string> args;
        const char *message;
    };
    const std::vector<Case> cases = {
        {{"-j", "policy", "add", "p", "--cir", "1mbit", "--cbs", "1k"}, "--algo is required"},
        {{"-j", "flows", "--top", "-1"}, "--top"},
        {{"-j", "stats", "--watch", "--count", "-1"}, "--count"},
        {{"-j", "stats", "--count", "3"}, "--count requires --watch"},
        {{"-j", "policy", "add", "p", "--algo", "srtcm", "--cir", "10mbits", "--cbs", "1k"},
         "invalid rate '10mbits'"},
        {{"-j", "policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "1k", "--match",
          "src", "198.18.0.1/15"},
         "198.18.0.1/15"},
        {{"-j", "apply", "-f", "/tmp"}, "/tmp is a directory"},
        {{"-j", "attach", "lo", "--direction", "egress"}, "XDP only sees ingress"},
    };
    for (const auto &c : cases) {
        std::vector<std::string> argv = {kCtl, "--socket", "/nonexistent/tricolor.sock"};
        argv.insert(argv.end(), c.args.begin(), c.args.end());
        auto r = test::run_command(argv);
        SCOPED_TRACE(c.message);
        EXPECT_EQ(r.exit_code, 2) << r.err;
        auto j = nlohmann::json::parse(r.err, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << r.err;
        EXPECT_THAT(j["error"].get<std::string>(), HasSubstr(c.message));
    }
}

TEST(ManPages, AreWrittenByHandAndComplete) {
    for (const char *page : {"tricolorctl.8", "tricolord.8"}) {
        SCOPED_TRACE(page);
        std::string text = test::read_file(std::string(TRICOLOR_BINARY_DIR) + "/man/" + page);
        EXPECT_THAT(text, HasSubstr(".TH"));
        EXPECT_THAT(text, HasSubstr(TRICOLOR_VERSION));
    }
    EXPECT_THAT(test::read_file(std::string(TRICOLOR_BINARY_DIR) + "/man/tricolorctl.8"),
                HasSubstr("policy"));
    std::string ctl = test::read_file(std::string(TRICOLOR_BINARY_DIR) + "/man/tricolorctl.8");
    for (const char *section : {".SH COMMANDS", ".SH \"POLICY OPTIONS\"", ".SH UNITS",
                                ".SH \"EXIT STATUS\"", ".SH EXAMPLES"})
        EXPECT_THAT(ctl, HasSubstr(section));
    EXPECT_THAT(ctl, Not(HasSubstr("Positionals:")));
    // Every option of the policy flag table, as roff spells it (\- for each dash).
    for (const auto &flag : policy_flags()) {
        std::string roff;
        for (char c : policy_flag_option(flag))
            roff += c == '-' ? std::string("\\-") : std::string(1, c);
        if (flag.kind != PolicyFlagKind::Name) {
            EXPECT_THAT(ctl, HasSubstr(roff));
        }
    }
    std::string d = test::read_file(std::string(TRICOLOR_BINARY_DIR) + "/man/tricolord.8");
    for (const char *section : {".SH SIGNALS", ".SH FILES", ".SH \"EXIT STATUS\"", "\\-\\-state"})
        EXPECT_THAT(d, HasSubstr(section));
}

} // namespace
