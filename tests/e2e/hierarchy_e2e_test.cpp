// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hierarchies (docs/spec.md §9) end to end: three UDP senders under a per-source child and an
// aggregate parent on a veth pair, both bounds checked with the real counters; a restart of the
// daemon keeps every level's tokens and counters.
#include "lab.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <thread>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;

namespace {

class HierE2E : public DaemonLabTest {
  protected:
    json j(std::vector<std::string> args) {
        args.insert(args.begin(), "-j");
        auto r = ok(args);
        auto v = json::parse(r.out, nullptr, false);
        if (v.is_discarded())
            ADD_FAILURE() << "not JSON: " << r.out << r.err;
        return v;
    }
    json policy(const std::string &name) {
        json stats = j({"stats"});
        for (const auto &p : stats["policies"])
            if (p["name"] == name)
                return p;
        ADD_FAILURE() << "no policy " << name;
        return {};
    }
    // A source address of the namespace's own, in its /24.
    std::string source(int i) {
        std::string a = lab->ns_v4;
        return a.substr(0, a.rfind('.') + 1) + std::to_string(i);
    }
    void send(long count, long size, double pps = 0, const std::string &src = "") {
        std::vector<std::string> argv = {udp_tool_path(),       "send",
                                         lab->host_v4,          "9000",
                                         std::to_string(count), std::to_string(size),
                                         std::to_string(pps)};
        if (!src.empty())
            argv.insert(argv.end(), {"0", "-", src});
        auto r = lab->in_ns(argv);
        ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    }
};

uint64_t bytes(const json &p, const char *color) {
    return p[color]["bytes"].get<uint64_t>();
}
uint64_t packets(const json &p) {
    return p["green"]["packets"].get<uint64_t>() + p["yellow"]["packets"].get<uint64_t>() +
           p["red"]["packets"].get<uint64_t>();
}

TEST_F(HierE2E, ThreeSendersUnderAPerSourceChildAndAnAggregateParent) {
    ok({"attach", lab->host_if});
    const uint64_t link_cir = 4000000, link_cbs = 10240, user_cir = 2000000, user_cbs = 5120;
    ok({"policy", "add", "link", "--algo", "srtcm", "--cir", std::to_string(link_cir), "--cbs",
        std::to_string(link_cbs), "--only-parent"});
    ok({"policy", "add", "user", "--algo", "srtcm", "--cir", std::to_string(user_cir), "--cbs",
        std::to_string(user_cbs), "--per", "src", "--match", "proto", "udp", "--parent", "link"});
    for (int i : {11, 12, 13})
        ASSERT_EQ(
            lab->in_ns({"/sbin/ip", "addr", "add", source(i) + "/24", "dev", lab->ns_if}).exit_code,
            0);
    // 3 x 1000 datagrams of 1028 IP bytes at 1000/s: 8.2 Mbit/s a source, 4x the child's CIR;
    // together 24.7 Mbit/s, 6x the parent's, which the children (3 x 2 Mbit/s) would exceed.
    timespec a{}, b{};
    clock_gettime(CLOCK_MONOTONIC, &a);
    std::vector<std::thread> senders;
    for (int i : {11, 12, 13})
        senders.emplace_back([this, i] { send(1000, 1000, 1000, source(i)); });
    for (auto &t : senders)
        t.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    clock_gettime(CLOCK_MONOTONIC, &b);
    __int128 T = (__int128(b.tv_sec) - a.tv_sec) * 1000000000 + (b.tv_nsec - a.tv_nsec);
    const __int128 unit = 8000000000;

    json link = policy("link"), user = policy("user");
    EXPECT_EQ(packets(link), 3000u);
    EXPECT_EQ(packets(user), 3000u);
    EXPECT_EQ(user["parent"], "link");
    EXPECT_TRUE(link["parent"].is_null());
    // The parent's bound holds over all three.
    __int128 admitted = bytes(link, "green") + bytes(link, "yellow");
    EXPECT_LE(__int128(bytes(link, "green")) * unit, __int128(link_cbs) * unit + link_cir * T);
    EXPECT_LE(admitted * unit, __int128(link_cbs) * unit + link_cir * T);
    // Each child flow's bound holds, with the real per-flow counters.
    auto flows = j({"flows", "--policy", "user"})["flows"];
    ASSERT_EQ(flows.size(), 3u);
    for (const auto &f : flows) {
        EXPECT_EQ(f["parent"], "link");
        __int128 g = bytes(f, "green") + bytes(f, "yellow");
        EXPECT_LE(g * unit, __int128(user_cbs) * unit + user_cir * T) << f["key"];
    }
    // The parent binds: it gives out most of what it may (senders start within milliseconds).
    EXPECT_GE(admitted * unit * 10, (__int128(link_cbs) * unit + link_cir * T) * 6);
    std::cout << fmt::format("[ hierarchy ] link admitted {} of {} bound bytes\n",
                             static_cast<uint64_t>(admitted),
                             static_cast<uint64_t>(link_cbs + link_cir * T / unit));
    // `stats` shows the child under its parent.
    EXPECT_THAT(ok({"stats"}).out, ::testing::ContainsRegex("\nlink +[0-9].*\n  user +[0-9]"));
}

TEST_F(HierE2E, ARestartKeepsEveryLevelsTokensAndCounters) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "link", "--algo", "srtcm", "--cir", "8bit", "--cbs", "12k",
        "--only-parent"});
    ok({"policy", "add", "user", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--per", "src",
        "--match", "proto", "udp", "--parent", "link"});
    send(10, 1000); // 1028 IP bytes each, all green: user keeps 5080 bytes, link 2008
    daemon->kill9();
    daemon->start();
    // Adopted, both levels: one more fits the parent (a fresh parent would pass 10 more), then
    // it is red, and the child is not charged for the reds (all or nothing).
    send(10, 1000);
    EXPECT_EQ(policy("user")["green"]["packets"], 11);
    EXPECT_EQ(policy("user")["red"]["packets"], 9);
    EXPECT_EQ(policy("link")["green"]["packets"], 11);
    // A live change of the parent keeps its tokens (980 bytes): 928 pass, then 128 do not.
    ok({"policy", "set", "link", "--cir", "16bit"});
    send(1, 900);
    send(1, 100);
    json user = policy("user"), link = policy("link");
    EXPECT_EQ(user["green"]["packets"], 12);
    EXPECT_EQ(user["red"]["packets"], 10);
    EXPECT_EQ(link["green"]["packets"], 12);
    EXPECT_EQ(link["red"]["packets"], 10);
    // Deleting the parent under its child is refused, naming both.
    auto r = daemon->ctl({"policy", "del", "link"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, ::testing::HasSubstr("policy 'user': its parent 'link' does not exist"));
}

} // namespace
