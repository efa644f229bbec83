// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// `tricolorctl replay -f POLICIES` as a user runs it (docs/spec.md §2, §9): the hierarchy vectors
// with both engines, stdin, and bad policy files and traces refused with exit 2 and a message.
#include "test_util.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using namespace tricolor;
using ::testing::HasSubstr;

namespace {

const std::string kCtl = TRICOLORCTL_PATH;
const std::string kVectors = TRICOLOR_VECTOR_DIR;

test::RunResult replay(std::vector<std::string> args, const std::string &input = "") {
    args.insert(args.begin(), {kCtl, "replay"});
    return test::run_command(args, input);
}

std::vector<std::string> hier_vectors() {
    std::vector<std::string> out;
    for (const auto &e : std::filesystem::directory_iterator(kVectors))
        if (e.path().extension() == ".yaml" && e.path().stem().string().starts_with("hier-"))
            out.push_back(e.path().stem().string());
    std::ranges::sort(out);
    return out;
}

std::string temp_file(const std::string &name, const std::string &text) {
    auto path = std::filesystem::temp_directory_path() / ("tricolor-hier-" + name);
    std::ofstream(path) << text;
    return path.string();
}

TEST(HierReplayCli, BothEnginesMatchEveryHierVector) {
    auto names = hier_vectors();
    ASSERT_GE(names.size(), 4u);
    for (const std::string engine : {"model", "bpf"}) {
        if (engine == "bpf" && !test::is_root())
            continue;
        for (const auto &name : names) {
            SCOPED_TRACE(name + " " + engine);
            std::string base = kVectors + "/" + name;
            auto r = replay({"-f", base + ".yaml", "--engine", engine, base + ".trace"});
            EXPECT_EQ(r.exit_code, 0) << r.err;
            EXPECT_EQ(test::first_difference(r.out, test::read_file(base + ".expected")), "");
        }
    }
}

TEST(HierReplayCli, StdinUnclassifiedAndTheSummary) {
    std::string base = kVectors + "/hier-2level";
    auto r = replay({"-f", base + ".yaml", "-"}, "# tcp matches no policy here\n"
                                                 "5 100 198.18.7.1 198.18.9.9 udp 1 2\n"
                                                 "6 100 198.18.7.1 198.18.9.9 tcp 1 2\n"
                                                 "7,100,2001:db8::1,2001:db8::2,udp,1,2\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "5,100,green,user\n6,100,green,-\n7,100,green,user\n");
    EXPECT_THAT(r.err, testing::ContainsRegex("green +2 packets +200 bytes"));
    EXPECT_THAT(r.err, testing::ContainsRegex("- +1 packets +100 bytes \\(unclassified\\)"));
}

TEST(HierReplayCli, BadInputIsRefusedWithExit2) {
    std::string good = kVectors + "/hier-2level.yaml";
    std::string cycle = temp_file("cycle.yaml", "policies:\n"
                                                "  - {name: a, algo: srtcm, cir: 8000, cbs: 1500, "
                                                "parent: b}\n"
                                                "  - {name: b, algo: srtcm, cir: 8000, cbs: 1500, "
                                                "parent: a}\n");
    std::string orphan = temp_file("orphan.yaml", "policies:\n"
                                                  "  - {name: user, algo: srtcm, cir: 8000, "
                                                  "cbs: 1500, parent: link}\n");
    std::string coupled = temp_file("coupled.yaml", "policies:\n"
                                                    "  - {name: t, algo: trtcm, cir: 8000, "
                                                    "cbs: 1500, pir: 8000, pbs: 1500, "
                                                    "coupling: true}\n");
    std::string edt = temp_file("edt.yaml", "policies:\n"
                                            "  - {name: top, algo: srtcm, cir: 8000, cbs: 1500}\n"
                                            "  - {name: w, algo: srtcm, cir: 8000, cbs: 1500, "
                                            "shape: edt, parent: top}\n");
    struct Case {
        std::vector<std::string> args;
        std::string input, message;
    } cases[] = {
        {{"-f", edt, "-"}, "", "policy 'w': its parent is 'top', and 'w' has shape edt"},
        {{"-f", cycle, "-"}, "", "policies 'a' -> 'b' -> 'a' form a cycle of parents"},
        {{"-f", orphan, "-"}, "", "policy 'user': its parent 'link' does not exist"},
        {{"-f", coupled, "-"}, "", "coupling applies to rfc4115 only, not trtcm"},
        {{"-f", "/nonexistent.yaml", "-"}, "", "cannot open policy file"},
        {{"-f", good, "--algo", "srtcm", "-"}, "", "excludes"},
        {{"-f", good, "-"}, "1 100 198.18.7.1\n", "line 1: expected 'time_ns bytes [color] SRC"},
        {{"-f", good, "-"}, "0 10\n", "line 1:"},
        {{"-f", good, "-"}, "1 10 198.18.7.1 198.18.9.9 udp 1 2\n", "from 28 (its headers)"},
        {{"--cir", "1mbit", "--cbs", "1500", "-"}, "", "--algo is required"},
    };
    for (const auto &c : cases) {
        SCOPED_TRACE(c.message);
        auto r = replay(c.args, c.input);
        EXPECT_EQ(r.exit_code, 2) << r.err;
        EXPECT_EQ(r.out, "");
        EXPECT_THAT(r.err, HasSubstr(c.message));
    }
}

} // namespace
