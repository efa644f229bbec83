// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// `tricolorctl whatif` as a user runs it (docs/spec.md §12): the table, -j, --packets (the table
// then on stderr), --flows, --plot, --suggest, and every misuse refused with exit 2, a message
// naming what is wrong, and no result.
#include "pcap_file.hpp"
#include "test_util.hpp"

#include "tricolor/hier_replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace tricolor;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const std::string kCtl = TRICOLORCTL_PATH;
const std::string kBase = std::string(TRICOLOR_VECTOR_DIR) + "/hier-2level";

class WhatIfCli : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!test::is_root())
            GTEST_SKIP() << "needs root (the data path through BPF_PROG_TEST_RUN)";
        dir_ = std::filesystem::temp_directory_path() / ("whatif_cli." + std::to_string(getpid()));
        std::filesystem::create_directories(dir_);
        std::ifstream in(kBase + ".trace");
        auto trace = parse_flow_trace(in);
        ASSERT_TRUE(trace);
        trace_ = *trace;
        pcap_ = path("lab.pcap");
        test::write_pcap(pcap_, test::kDltEthernet, true,
                         test::trace_packets(trace_, test::kDltEthernet, 1));
    }
    void TearDown() override {
        if (!dir_.empty())
            std::filesystem::remove_all(dir_);
    }
    std::string path(const std::string &n) const { return (dir_ / n).string(); }
    test::RunResult whatif(std::vector<std::string> args) {
        args.insert(args.begin(), {kCtl});
        return test::run_command(args);
    }
    std::filesystem::path dir_;
    std::vector<FlowTracePacket> trace_;
    std::string pcap_;
};

TEST_F(WhatIfCli, TableJsonPacketsAndFlowsTellTheSameRun) {
    auto table = whatif({"whatif", pcap_, "-f", kBase + ".yaml", "--flows", "3"});
    ASSERT_EQ(table.exit_code, 0) << table.err;
    EXPECT_THAT(table.out, HasSubstr("(EN10MB): " + std::to_string(trace_.size()) + " packets"));
    EXPECT_THAT(table.out, HasSubstr("POLICY"));
    EXPECT_THAT(table.out, HasSubstr("TCP senders would have slowed down"));
    EXPECT_THAT(table.out, HasSubstr("198.18.7.1:1000 > 198.18.9.9:7000"));

    auto j = whatif({"-j", "whatif", pcap_, "-f", kBase + ".yaml", "--flows", "3"});
    ASSERT_EQ(j.exit_code, 0) << j.err;
    auto doc = nlohmann::json::parse(j.out);
    EXPECT_EQ(doc["packets"], trace_.size());
    ASSERT_EQ(doc["policies"].size(), 2u);
    EXPECT_EQ(doc["policies"][1]["name"], "user");
    EXPECT_EQ(doc["policies"][1]["actions"]["red"], "drop");

    // --packets: replay -f's lines on stdout, and their colours add up to the JSON's.
    auto p = whatif({"whatif", pcap_, "-f", kBase + ".yaml", "--packets"});
    ASSERT_EQ(p.exit_code, 0) << p.err;
    EXPECT_THAT(p.err, HasSubstr("POLICY"));
    uint64_t red = 0, lines = 0;
    std::istringstream in(p.out);
    for (std::string line; std::getline(in, line); ++lines)
        red += line.find(",red,user") != std::string::npos;
    EXPECT_EQ(lines, trace_.size());
    EXPECT_EQ(red, doc["policies"][1]["red"]["packets"].get<uint64_t>());
    EXPECT_GT(red, 0u);
}

TEST_F(WhatIfCli, PlotAndSuggest) {
    auto r = whatif({"whatif", pcap_, "-f", kBase + ".yaml", "--plot", path("p.svg")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string svg = test::read_file(path("p.svg"));
    EXPECT_THAT(svg, HasSubstr("<svg"));
    EXPECT_THAT(svg, HasSubstr("data-name=\"user\""));
    EXPECT_THAT(svg, HasSubstr("class=\"level c\"")) << "link is an aggregate: its levels drawn";

    // The vector's policies are trTCM: red is the peak bucket's, and its CBS cannot change it.
    auto t = whatif({"whatif", pcap_, "-f", kBase + ".yaml", "--suggest", "cbs", "--red-at-most",
                     "2%", "--policy", "link"});
    EXPECT_EQ(t.exit_code, 2);
    EXPECT_THAT(t.err, HasSubstr("is trtcm: its red is set by PIR and PBS"));
    std::ofstream(path("one.yaml")) << "policies:\n  - {name: all, algo: srtcm, cir: 3mbit, "
                                       "cbs: 2k, ebs: 0, match: {proto: udp}}\n";
    auto s = whatif(
        {"-j", "whatif", pcap_, "-f", path("one.yaml"), "--suggest", "cbs", "--red-at-most", "2%"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    auto doc = nlohmann::json::parse(s.out);
    EXPECT_EQ(doc["suggest"], "cbs");
    EXPECT_LE(doc["red_share"].get<double>(), 0.02);
    EXPECT_GT(doc["value"].get<uint64_t>(), 2048u);
    std::ofstream(path("two.yaml")) << "policies:\n  - {name: tr, algo: trtcm, cir: 2mbit, "
                                       "cbs: 2k, pir: 3mbit, pbs: 2k, match: {proto: udp}}\n";
    auto pbs = whatif(
        {"whatif", pcap_, "-f", path("two.yaml"), "--suggest", "pbs", "--red-at-most", "1%"});
    EXPECT_EQ(pbs.exit_code, 0) << pbs.err;
    EXPECT_THAT(pbs.out, HasSubstr("tr: the smallest PBS that keeps red at most 1% of its bytes"));
}

TEST_F(WhatIfCli, MisuseIsRefusedByName) {
    const std::string pol = kBase + ".yaml";
    struct Case {
        std::vector<std::string> args;
        std::string says;
    };
    std::ofstream(path("text.pcap")) << "not a capture\n";
    std::filesystem::copy_file(pcap_, path("cut.pcap"));
    std::filesystem::resize_file(path("cut.pcap"), std::filesystem::file_size(pcap_) - 7);
    for (const Case &c : std::vector<Case>{
             {{"-j", "whatif", pcap_, "-f", pol, "--packets"}, "--packets and -j"},
             {{"whatif", pcap_, "-f", pol, "--red-at-most", "1%"}, "go with --suggest"},
             {{"whatif", pcap_, "-f", pol, "--suggest", "cbs"}, "needs --red-at-most"},
             {{"whatif", pcap_, "-f", pol, "--suggest", "cbs", "--red-at-most", "150%"},
              "'150%' is not a share"},
             {{"whatif", pcap_, "-f", pol, "--suggest", "cbs", "--red-at-most", "1%"},
              "has 2 policies: name one with --policy"},
             {{"whatif", pcap_, "-f", pol, "--suggest", "cbs", "--red-at-most", "1%", "--policy",
               "nosuch"},
              "no policy 'nosuch'"},
             {{"whatif", "-", "-f", pol, "--suggest", "cbs", "--red-at-most", "1%", "--policy",
               "user"},
              "not stdin"},
             {{"whatif", path("text.pcap"), "-f", pol}, "not a pcap or pcapng capture"},
             {{"whatif", path("cut.pcap"), "-f", pol},
              "packet " + std::to_string(trace_.size()) + ": "},
             {{"whatif", pcap_, "-f", path("nosuch.yaml")}, "nosuch.yaml"},
         }) {
        SCOPED_TRACE(c.args.back());
        auto r = whatif(c.args);
        EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
        EXPECT_THAT(r.err, HasSubstr(c.says));
        EXPECT_THAT(r.out, Not(HasSubstr("POLICY"))) << "no table for a refused run";
    }
    // --packets streams: the lines before the cut are out, then the error and exit code 2.
    auto cut = whatif({"whatif", path("cut.pcap"), "-f", pol, "--packets"});
    EXPECT_EQ(cut.exit_code, 2);
    EXPECT_THAT(cut.err, HasSubstr("packet " + std::to_string(trace_.size()) + ": "));
    EXPECT_THAT(cut.err, Not(HasSubstr("POLICY")));
    // A bare number is a percentage as well.
    auto bare = whatif({"-j", "whatif", pcap_, "-f", pol, "--suggest", "pbs", "--red-at-most", "1",
                        "--policy", "user"});
    if (bare.exit_code == 0)
        EXPECT_EQ(nlohmann::json::parse(bare.out)["red_at_most"], 0.01);
    else
        EXPECT_THAT(bare.err, Not(HasSubstr("not a share")));
}

} // namespace
