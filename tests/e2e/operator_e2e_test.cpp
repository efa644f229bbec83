// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The minors of issue 10, each as a user meets it: warnings that concern what was touched, DSCP
// names in matches, dry runs that say what they would do, policy show with its defaults, a text
// status that reads as a table, and a quiet tcx attach.
#include "lab.hpp"

#include "tricolor/control.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <fstream>
#include <thread>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

class Operator : public DaemonLabTest {};

TEST_F(Operator, WarningsConcernThePolicyTouched) {
    // A bucket below a packet: warned about when added...
    auto a = ok({"policy", "add", "small", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "100",
                 "--match", "proto", "udp"});
    EXPECT_THAT(a.err, HasSubstr("policy 'small'"));
    // ...but not again when another policy changes.
    ok({"policy", "add", "other", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
        "proto", "tcp"});
    auto set = ok({"policy", "set", "other", "--cir", "2mbit"});
    EXPECT_THAT(set.err, Not(HasSubstr("small")));
}

TEST_F(Operator, ShadowedPolicyAndRfc4115WithoutEirAreWarned) {
    ok({"policy", "add", "a", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
        "proto", "udp"});
    auto b = ok({"policy", "add", "b", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k",
                 "--match", "proto", "udp"});
    EXPECT_THAT(b.err, HasSubstr("policy 'b': same match and priority as 'a'"));
    auto c = ok({"policy", "add", "c", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k",
                 "--match", "proto", "udp", "--priority", "5"});
    EXPECT_THAT(c.err, Not(HasSubstr("same match")));
    auto e = ok({"policy", "add", "e", "--algo", "rfc4115", "--cir", "1mbit", "--cbs", "15k",
                 "--ebs", "15k"});
    EXPECT_THAT(e.err, HasSubstr("rfc4115 without --eir"));
    auto e2 = ok({"policy", "add", "e2", "--algo", "rfc4115", "--cir", "1mbit", "--cbs", "15k",
                  "--ebs", "15k", "--eir", "1mbit"});
    EXPECT_THAT(e2.err, Not(HasSubstr("without --eir")));
}

TEST_F(Operator, DscpMatchTakesNames) {
    ok({"policy", "add", "af", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
        "dscp", "af11"});
    ok({"policy", "add", "ef", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
        "dscp", "ef"});
    auto bad = daemon->ctl({"policy", "add", "x", "--algo", "srtcm", "--cir", "1mbit", "--cbs",
                            "15k", "--match", "dscp", "af99"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_THAT(bad.err, HasSubstr("af99"));
}

TEST_F(Operator, DryRunSaysWhatWouldBeAddedChangedAndDeleted) {
    ok({"policy", "add", "keep", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k"});
    ok({"policy", "add", "change", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k"});
    ok({"policy", "add", "drop", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k"});
    std::string file = daemon->dir() + "/apply.yaml";
    std::ofstream(file) << "policies:\n"
                           "  - {name: keep, algo: srtcm, cir: 1mbit, cbs: 15k}\n"
                           "  - {name: change, algo: srtcm, cir: 2mbit, cbs: 15k}\n"
                           "  - {name: new, algo: srtcm, cir: 1mbit, cbs: 15k}\n";
    auto dry = ok({"apply", "-f", file, "--dry-run"});
    EXPECT_THAT(dry.out, HasSubstr("would be added 1: new"));
    EXPECT_THAT(dry.out, HasSubstr("would be changed 1: change"));
    EXPECT_THAT(dry.out, HasSubstr("would be deleted 1: drop"));
    EXPECT_EQ(json::parse(ok({"-j", "policy", "list"}).out)["policies"].size(), 3u);
    auto j = json::parse(ok({"-j", "apply", "-f", file, "--dry-run"}).out);
    EXPECT_EQ(j["deleted"], json::array({"drop"}));
}

TEST_F(Operator, PolicyShowPrintsDefaultsAndNormalizedRates) {
    ok({"policy", "add", "p", "--algo", "srtcm", "--cir", "10mbit", "--cbs", "15k"});
    auto show = ok({"policy", "show", "p"});
    EXPECT_THAT(show.out, HasSubstr("10mbit (10000000 bit/s)"));
    EXPECT_THAT(show.out, HasSubstr("15k (15360 bytes)"));
    EXPECT_THAT(show.out, HasSubstr("ebs          0 bytes (default)"));
    EXPECT_THAT(show.out, HasSubstr("per          aggregate (default)"));
    EXPECT_THAT(show.out, HasSubstr("red          drop (default)"));
    EXPECT_THAT(show.out, HasSubstr("priority     0 (default)"));
}

TEST_F(Operator, TextStatusHasAHeaderMetricsAndReclaimed) {
    ok({"attach", lab->host_if});
    auto st = ok({"status"});
    EXPECT_THAT(st.out, HasSubstr("INTERFACE"));
    EXPECT_THAT(st.out, HasSubstr("attached"));
    EXPECT_THAT(st.out, HasSubstr("metrics     127.0.0.1:"));
    EXPECT_THAT(st.out, HasSubstr("idle flows reclaimed"));
    EXPECT_THAT(st.out, HasSubstr("state       " + daemon->state()));
}

TEST_F(Operator, TcAttachLogsNoLibbpfNoise) {
    ok({"attach", lab->host_if, "--hook", "tc", "--direction", "egress"});
    ok({"attach", lab->host_if, "--hook", "tc", "--direction", "ingress"});
    ok({"status"});
    EXPECT_THAT(daemon->log(), Not(HasSubstr("Parent Qdisc")));
    EXPECT_THAT(daemon->log(), Not(HasSubstr("Kernel error message")));
}

// Bucket levels as of now, as `tc -s police` users expect: the aggregate bucket in policy show,
// each flow's in flows.
TEST_F(Operator, PolicyShowAndFlowsShowBucketLevels) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "agg", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--match",
        "proto", "udp", "--match", "dport", "9000"});
    ok({"policy", "add", "per",     "--algo", "trtcm", "--cir", "8bit",
        "--cbs",  "15k", "--pir",   "16bit",  "--pbs", "20k",   "--match",
        "proto",  "udp", "--match", "dport",  "9001",  "--per", "src"});
    auto full = json::parse(ok({"-j", "policy", "show", "agg"}).out);
    EXPECT_EQ(full["buckets"]["c"]["bytes"], 15360); // no packet yet: full
    for (const char *port : {"9000", "9001"}) {
        auto r = lab->in_ns({udp_tool_path(), "send", lab->host_v4, port, "10", "1000"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    auto show = json::parse(ok({"-j", "policy", "show", "agg"}).out);
    // 10 x 1028 bytes taken from 15360; 8 bit/s gives back a byte a second.
    uint64_t c = show["buckets"]["c"]["bytes"].get<uint64_t>();
    EXPECT_GE(c, 5080u);
    EXPECT_LE(c, 5090u);
    EXPECT_EQ(show["buckets"]["c"]["size"], 15360);
    EXPECT_THAT(ok({"policy", "show", "agg"}).out, HasSubstr("/15360 bytes (33%)"));
    auto flows = json::parse(ok({"-j", "flows", "--policy", "per"}).out)["flows"];
    ASSERT_EQ(flows.size(), 1u);
    EXPECT_GE(flows[0]["buckets"]["p"]["bytes"].get<uint64_t>(), 20480u - 10280u);
    EXPECT_LE(flows[0]["buckets"]["c"]["bytes"].get<uint64_t>(), 15360u - 10280u + 10u);
    EXPECT_THAT(ok({"flows"}).out, HasSubstr("E/P%"));
}

// policy set --algo changes the algorithm in place: the other algorithm's parameters go, the
// policy keeps its id and so its counters.
TEST_F(Operator, ChangingTheAlgorithmKeepsTheCounters) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "p", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--ebs", "15k",
        "--match", "proto", "udp"});
    auto r = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", "10", "1000"});
    ASSERT_EQ(r.exit_code, 0);
    auto id = json::parse(ok({"-j", "policy", "show", "p"}).out)["id"];
    ok({"policy", "set", "p", "--algo", "trtcm", "--pir", "16bit", "--pbs", "20k"});
    auto show = json::parse(ok({"-j", "policy", "show", "p"}).out);
    EXPECT_EQ(show["id"], id);
    EXPECT_EQ(show["policy"]["algo"], "trtcm");
    EXPECT_FALSE(show["policy"].contains("ebs"));
    auto stats = json::parse(ok({"-j", "stats", "p"}).out)["policies"][0];
    EXPECT_EQ(stats["green"]["packets"].get<uint64_t>() +
                  stats["yellow"]["packets"].get<uint64_t>() +
                  stats["red"]["packets"].get<uint64_t>(),
              10u);
}

// flows --top from the heavy hitters (docs/datapath.md, "flows --top at 2^20") lists what a walk
// of the table lists, flows that got busy after the last pass included; with more flows asked
// for than stand at the threshold it walks. Three heavy hitters a pass (--top-keep 3), so that a
// few flows are enough.
TEST_F(Operator, FlowsTopFromTheHeavyHittersIsWhatAWalkLists) {
    daemon.reset();
    daemon = std::make_unique<Daemon>("top", std::vector<std::string>{"--reclaim-interval", "0.3",
                                                                      "--flow-idle-timeout", "3600",
                                                                      "--top-keep", "3"});
    ok({"attach", lab->host_if});
    ok({"policy", "add", "conn", "--algo", "srtcm", "--cir", "1gbit", "--cbs", "64m", "--ebs",
        "64m", "--per", "5tuple", "--match", "proto", "udp"});
    auto send = [&](int count) { // each run from a source port of its own: a flow of its own
        auto r = lab->in_ns(
            {udp_tool_path(), "send", lab->host_v4, "9000", std::to_string(count), "200"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    };
    for (int n = 1; n <= 6; ++n)
        send(n);
    // Two passes after the last send: the first picks the threshold (the 3rd busiest flow's
    // bytes: 4 datagrams of 200 + 28 header bytes), the second installs it and reads the flows
    // at or above it. (A pass between the sends may have picked a lower one before.)
    json top = json::object();
    auto ready = [&] { return top.value("tracking", false) && top["threshold"] == 4 * 228; };
    for (int i = 0; i < 100 * time_scale() && !ready(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        top = json::parse(ok({"-j", "status"}).out)["flows"]["top"];
    }
    ASSERT_TRUE(ready()) << top.dump();
    EXPECT_THAT(ok({"status"}).out, HasSubstr("flows --top from"));
    auto request = [&](int n, bool walk) {
        json r = {{"cmd", "flows"}, {"top", n}};
        if (walk)
            r["walk"] = true;
        auto j = control_request(daemon->socket(), r);
        EXPECT_TRUE(j.has_value()) << j.error();
        return j ? *j : json();
    };
    // The key and byte counters (bucket levels move between two requests).
    auto listed = [](const json &r) {
        std::vector<std::string> out;
        for (const auto &f : r["flows"])
            out.push_back(fmt::format(
                "{} {} {} {}", f["key"].get<std::string>(), f["green"]["bytes"].get<uint64_t>(),
                f["yellow"]["bytes"].get<uint64_t>(), f["red"]["bytes"].get<uint64_t>()));
        return out;
    };
    auto expect_top = [&](int n, const char *via) {
        SCOPED_TRACE(fmt::format("top {}", n));
        auto hot = request(n, false), walked = request(n, true);
        EXPECT_EQ(hot["via"], via);
        EXPECT_EQ(walked["via"], "walk");
        EXPECT_EQ(listed(hot), listed(walked));
        return listed(hot);
    };
    EXPECT_EQ(expect_top(3, "hot").size(), 3u);
    // A new flow busier than all of them, after the pass: the data path recorded it.
    send(10);
    auto three = expect_top(3, "hot");
    ASSERT_EQ(three.size(), 3u);
    EXPECT_THAT(three[0], HasSubstr(" 2280 0 0"));
    EXPECT_EQ(expect_top(10, "walk").size(), 7u); // fewer than 10 at the threshold
    // tricolorctl asks the same.
    auto cli = json::parse(ok({"-j", "flows", "--top", "3"}).out);
    EXPECT_EQ(cli["via"], "hot");
    EXPECT_EQ(listed(cli), three);
}

// Flows stay visible for the idle timeout after their last packet, then go.
TEST_F(Operator, FlowsStayForTheIdleTimeout) {
    daemon.reset();
    // Every wait stretches with TRICOLOR_TIME_SCALE (the 6.1 guest under TCG), the idle
    // timeout with it: the first look must come well inside it, the second well after.
    const int s = time_scale();
    daemon = std::make_unique<Daemon>("idle", std::vector<std::string>{"--reclaim-interval", "0.2",
                                                                       "--flow-idle-timeout",
                                                                       std::to_string(2 * s)});
    ok({"attach", lab->host_if});
    // Buckets full again 0.13 s after a packet: only the idle timeout keeps the flow.
    ok({"policy", "add", "per-flow", "--algo", "srtcm", "--cir", "8000", "--cbs", "1000", "--per",
        "5tuple", "--match", "proto", "udp"});
    auto r = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", "1", "100"});
    ASSERT_EQ(r.exit_code, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000 * s));
    EXPECT_EQ(json::parse(ok({"-j", "flows"}).out)["flows"].size(), 1u);
    // The gauge is the count of the last pass (every 0.2 s here), not a walk at scrape time.
    std::string metrics = json::parse(ok({"-j", "status"}).out)["metrics"];
    EXPECT_THAT(scrape_metrics(metrics), HasSubstr("\ntricolor_flows 1\n"));
    std::this_thread::sleep_for(std::chrono::milliseconds(2500 * s));
    EXPECT_TRUE(json::parse(ok({"-j", "flows"}).out)["flows"].empty());
    EXPECT_THAT(scrape_metrics(metrics), HasSubstr("\ntricolor_flows 0\n"));
    EXPECT_EQ(json::parse(ok({"-j", "status"}).out)["flows"]["reclaimed"], 1);
}

} // namespace

namespace {

// A raw client of the control socket.
int connect_control(const std::string &path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
    if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

bool readable_now(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

// A client that connects and says nothing, and one that sends a megabyte without a newline,
// cost the others nothing: `stats` is answered while both are still waiting for their own
// answers (served one at a time, it would wait for their 2 s timeouts, and they would have
// been answered first).
TEST_F(Operator, StuckClientsDoNotStallOthers) {
    ok({"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k", "--match",
        "proto", "udp"});
    int silent = connect_control(daemon->socket());
    int flood = connect_control(daemon->socket());
    ASSERT_GE(silent, 0);
    ASSERT_GE(flood, 0);
    std::string mb(1 << 20, 'x');
    for (size_t off = 0; off < mb.size();) {
        ssize_t n = write(flood, mb.data() + off, mb.size() - off);
        ASSERT_GT(n, 0);
        off += static_cast<size_t>(n);
    }
    // One CLI call: it must come back well within the 2 s the daemon waits on the others.
    EXPECT_THAT(ok({"stats"}).out, HasSubstr("p"));
    EXPECT_FALSE(readable_now(silent)) << "the silent client was answered before the others";
    EXPECT_FALSE(readable_now(flood)) << "the flooding client was answered before the others";
    // Each is then answered on its own, with a message that says what was wrong.
    std::string reply;
    char buf[512];
    shutdown(flood, SHUT_WR);
    for (ssize_t n; (n = read(flood, buf, sizeof(buf))) > 0;)
        reply.append(buf, static_cast<size_t>(n));
    EXPECT_THAT(reply, HasSubstr("not valid JSON"));
    close(silent);
    close(flood);
}

// 100 clients running `stats` in a loop while policies are added and changed: every request
// answered, none refused, and every change applied.
TEST_F(Operator, HundredClientsWhilePoliciesChange) {
    ok({"policy", "add", "base", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k", "--match",
        "proto", "udp"});
    std::atomic<bool> stop{false};
    std::atomic<int> answered{0}, failed{0};
    std::vector<std::thread> clients;
    std::mutex mu;
    std::string first_error;
    for (int c = 0; c < 100; ++c)
        clients.emplace_back([&] {
            while (!stop) {
                auto r = control_request(daemon->socket(), json{{"cmd", "stats"}});
                if (r && (*r)["ok"] == true) {
                    ++answered;
                } else {
                    ++failed;
                    std::lock_guard lock(mu);
                    if (first_error.empty())
                        first_error = r ? r->dump() : r.error();
                }
            }
        });
    for (int i = 0; i < 10; ++i) {
        ok({"policy", "set", "base", "--cir", fmt::format("{}mbit", i + 2)});
        ok({"policy", "add", fmt::format("p{}", i), "--algo", "srtcm", "--cir", "1mbit", "--cbs",
            "16k", "--match", "dport", std::to_string(1000 + i)});
    }
    stop = true;
    for (auto &t : clients)
        t.join();
    EXPECT_EQ(failed, 0) << first_error;
    EXPECT_GE(answered, 100);
    auto list = json::parse(ok({"-j", "policy", "list"}).out)["policies"];
    EXPECT_EQ(list.size(), 11u);
    EXPECT_EQ(list[0]["cir"], "11mbit");
}

} // namespace
