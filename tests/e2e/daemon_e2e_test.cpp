// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolord and tricolorctl driven as a user drives them, with real traffic through a veth pair
// into the root namespace where the data path is attached.
#include "lab.hpp"

#include "tricolor/control.hpp"
#include "tricolor/yaml.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <thread>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

uint64_t total_packets(const json &stats, const std::string &name) {
    for (const auto &p : stats["policies"])
        if (p["name"] == name)
            return p["green"]["packets"].get<uint64_t>() + p["yellow"]["packets"].get<uint64_t>() +
                   p["red"]["packets"].get<uint64_t>();
    return 0;
}

// The mode a tc attachment must report: "tcx" where the kernel has tcx (Linux 6.6+), and
// "clsact", the qdisc the product falls back to, where it has not. Decided by the kernel itself,
// not by the product: a BPF_PROG_QUERY on a tcx attach type (46, BPF_TCX_INGRESS; Debian 12's
// headers predate it) succeeds on lo only where tcx exists. The release from uname must agree,
// so a probe that broke cannot quietly turn the check into "whatever the product says".
std::string expected_tc_mode() {
    utsname u{};
    uname(&u);
    int major = 0, minor = 0;
    std::sscanf(u.release, "%d.%d", &major, &minor);
    bool by_version = major > 6 || (major == 6 && minor >= 6);
    uint32_t ids[4], count = 4, flags = 0;
    bool probed =
        bpf_prog_query(1 /* lo */, static_cast<bpf_attach_type>(46), 0, &flags, ids, &count) == 0;
    EXPECT_EQ(probed, by_version) << "kernel " << u.release << ": the tcx probe says "
                                  << (probed ? "tcx" : "no tcx");
    return probed ? "tcx" : "clsact";
}

class E2E : public DaemonLabTest {
  protected:
    // Sends @count datagrams of @size payload bytes from the namespace to the host end.
    void send(long count, long size, double pps = 0) {
        auto r = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", std::to_string(count),
                             std::to_string(size), std::to_string(pps)});
        ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    }
    json stats() { return parse_json(ok({"-j", "stats"})); }
};

TEST_F(E2E, PolicyLifecycle) {
    ok({"attach", lab->host_if});
    ok({"policy",  "add",   "web",   "--algo", "srtcm",   "--cir",    "10mbit",
        "--cbs",   "15k",   "--ebs", "30k",    "--match", "src",      lab->ns_v4 + "/32",
        "--match", "proto", "udp",   "--per",  "src",     "--yellow", "dscp:af12"});
    auto list = parse_json(ok({"-j", "policy", "list"}));
    ASSERT_EQ(list["policies"].size(), 1u);
    EXPECT_EQ(list["policies"][0]["cir"], "10mbit");
    ok({"policy", "set", "web", "--cir", "20mbit"});
    auto show = parse_json(ok({"-j", "policy", "show", "web"}));
    EXPECT_EQ(show["policy"]["cir"], "20mbit");
    EXPECT_EQ(show["policy"]["ebs"], "30k"); // untouched fields stay
    auto status = parse_json(ok({"-j", "status"}));
    ASSERT_EQ(status["attachments"].size(), 1u);
    EXPECT_TRUE(status["attachments"][0]["attached"].get<bool>());
    // The change persisted to the daemon's state file; the config file is the user's alone.
    EXPECT_FALSE(std::filesystem::exists(daemon->config()));
    daemon->settle_state();
    auto cfg = yaml_to_json(read_file(daemon->state())).value();
    EXPECT_EQ(cfg["policies"][0]["cir"], "20mbit");
    EXPECT_EQ(cfg["attachments"][0]["iface"], lab->host_if);
    ok({"policy", "del", "web"});
    EXPECT_TRUE(parse_json(ok({"-j", "policy", "list"}))["policies"].empty());
    ok({"detach", lab->host_if});
    EXPECT_TRUE(parse_json(ok({"-j", "status"}))["attachments"].empty());
}

TEST_F(E2E, TrafficIsColouredCountedAndRedDropped) {
    ok({"attach", lab->host_if});
    // 1 byte/s with 15k + 15k buckets: nothing refills during the test.
    ok({"policy", "add", "udp", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--ebs", "15k",
        "--match", "proto", "udp", "--match", "dst", lab->host_v4});
    // Receive on the host end while the namespace sends 100 datagrams of 1000 bytes.
    RunResult received;
    std::thread rx([&] {
        received = run_command({udp_tool_path(), "recv", lab->host_v4, "9000", "2"});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    send(100, 1000);
    rx.join();
    auto s = stats();
    ASSERT_EQ(s["policies"].size(), 1u);
    auto p = s["policies"][0];
    EXPECT_EQ(total_packets(s, "udp"), 100u); // every datagram metered
    // IPv4 20 + UDP 8 + 1000 = 1028 bytes: 14 fit in each 15360-byte bucket.
    EXPECT_EQ(p["green"]["packets"], 14);
    EXPECT_EQ(p["yellow"]["packets"], 14);
    EXPECT_EQ(p["red"]["packets"], 72);
    EXPECT_EQ(p["green"]["bytes"], 14 * 1028);
    EXPECT_THAT(received.out, HasSubstr("packets 28 ")); // red was dropped, the rest delivered
    auto flows = parse_json(ok({"-j", "flows"}));
    EXPECT_TRUE(flows["flows"].empty()); // aggregate: no per-key flows
}

TEST_F(E2E, Kill9LeavesThePolicyEnforcedAndARestartAdoptsEveryCounter) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "agg", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--match",
        "proto", "udp", "--per", "src"});
    send(50, 1000);
    auto before = stats();
    EXPECT_EQ(total_packets(before, "agg"), 50u);
    daemon->kill9();
    send(50, 1000); // no daemon: still policed and counted
    daemon->start();
    auto after = stats();
    EXPECT_EQ(total_packets(after, "agg"), 100u);
    auto p = after["policies"][0];
    EXPECT_EQ(p["green"]["packets"], 14); // the bucket was not refilled by the restart
    EXPECT_EQ(p["red"]["packets"], 86);
    auto flows = parse_json(ok({"-j", "flows"}));
    ASSERT_EQ(flows["flows"].size(), 1u);
    EXPECT_EQ(flows["flows"][0]["key"], "src " + lab->ns_v4);
    // The restarted daemon still manages the policy and the attachment.
    ok({"policy", "set", "agg", "--cir", "16bit"});
    EXPECT_TRUE(parse_json(ok({"-j", "status"}))["attachments"][0]["attached"].get<bool>());
    send(10, 1000);
    EXPECT_EQ(total_packets(stats(), "agg"), 110u);
}

// docs/spec.md §14: a quota's use is the data path's, pinned: a daemon killed mid-period and
// started again finds it to the byte, and a policy set that changes the quota keeps it.
TEST_F(E2E, AQuotaKeepsItsUseThroughARestartAndAChange) {
    ok({"attach", lab->host_if});
    // A meter that never turns a packet red here: the quota alone decides.
    ok({"policy", "add", "cap", "--algo", "srtcm", "--cir", "1gbit", "--cbs", "1m", "--ebs", "1m",
        "--match", "proto", "udp", "--quota", "20000/1d"});
    auto quota = [&] {
        const json s = stats();
        for (const auto &p : s["policies"])
            if (p["name"] == "cap")
                return p.value("quota", json());
        return json();
    };
    EXPECT_TRUE(quota().is_null()); // no packet yet: no period
    send(10, 1000);                 // 1028 bytes each at IP
    auto q = quota();
    ASSERT_TRUE(q.is_object()) << stats().dump();
    EXPECT_EQ(q["used"], 10 * 1028);
    EXPECT_EQ(q["left"], 20000 - 10 * 1028);
    // Periods of a day from the epoch: the next starts at a UTC midnight within a day.
    const uint64_t reset = q["reset_ns"].get<uint64_t>(), day = 86400ull * 1000000000;
    EXPECT_EQ(reset % day, 0u);
    const uint64_t now =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    EXPECT_GT(reset, now);
    EXPECT_LE(reset, now + day);
    EXPECT_THAT(ok({"stats", "cap"}).out, HasSubstr("quota: used"));
    daemon->kill9();
    send(5, 1000); // no daemon: the data path counts on
    daemon->start();
    EXPECT_EQ(quota()["used"], 15 * 1028);
    // The 20th packet takes the use past 20000 and counts whole; the 5 after it are red.
    send(10, 1000);
    auto s = stats();
    EXPECT_EQ(quota()["used"], 20 * 1028);
    EXPECT_EQ(quota()["left"], 0);
    EXPECT_EQ(s["policies"][0]["green"]["packets"], 20);
    EXPECT_EQ(s["policies"][0]["red"]["packets"], 5);
    // A bigger quota keeps what was used: 9 more fit under 30000, the 10th crosses it.
    ok({"policy", "set", "cap", "--quota", "30000/1d"});
    EXPECT_EQ(quota()["used"], 20 * 1028);
    send(12, 1000);
    s = stats();
    EXPECT_EQ(quota()["used"], 30 * 1028);
    EXPECT_EQ(s["policies"][0]["green"]["packets"], 30);
    EXPECT_EQ(s["policies"][0]["red"]["packets"], 7);
    // A reboot: the pinned maps are gone (bpffs is not kept). The daemon saved the use at its
    // exit; a daemon that makes the data path afresh restores it (counters start from 0).
    daemon->terminate();
    std::filesystem::remove_all(daemon->pin_dir());
    daemon->start();
    EXPECT_THAT(daemon->log(), HasSubstr("the use of 1 quota bucket(s) restored"));
    EXPECT_EQ(quota()["used"], 30 * 1028);
    send(1, 1000);
    EXPECT_EQ(stats()["policies"][0]["red"]["packets"], 1);
}

// A per-source quota: each flow shows its own use (flows), the policy none of its own (stats).
TEST_F(E2E, APerSourceQuotaIsShownByFlow) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "tenants", "--algo", "srtcm", "--cir", "1gbit", "--cbs", "1m", "--ebs",
        "1m", "--match", "proto", "udp", "--per", "src", "--quota", "1g/month"});
    send(3, 1000);
    auto flows = parse_json(ok({"-j", "flows"}));
    ASSERT_EQ(flows["flows"].size(), 1u) << flows.dump();
    const auto &q = flows["flows"][0]["quota"];
    EXPECT_EQ(q["used"], 3 * 1028);
    EXPECT_EQ(q["quota"], 1ull << 30);
    EXPECT_THAT(q["reset"].get<std::string>(), ::testing::EndsWith("-01T00:00:00Z"));
    EXPECT_THAT(ok({"flows"}).out, HasSubstr("quota: used 3.1KB of 1.1GB"));
    EXPECT_FALSE(stats()["policies"][0].contains("quota"));
}

// docs/spec.md §9 and §14: a quota at a level of a hierarchy, given to a running parent, counts
// what its children pass from then on and stops them when it is used.
TEST_F(E2E, AQuotaGivenToAParentCountsItsChildrenAndStopsThem) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "link", "--algo", "srtcm", "--cir", "1gbit", "--cbs", "1m", "--ebs", "1m",
        "--only-parent"});
    ok({"policy", "add", "user", "--algo", "srtcm", "--cir", "1gbit", "--cbs", "1m", "--ebs", "1m",
        "--per", "src", "--parent", "link", "--match", "proto", "udp"});
    send(5, 1000);
    auto policy = [&](const std::string &name) {
        const json s = stats();
        for (const auto &p : s["policies"])
            if (p["name"] == name)
                return p;
        return json();
    };
    EXPECT_EQ(policy("link")["green"]["packets"], 5);
    // A quota given anew starts from nothing: 9 packets (9252 bytes) stay under 10000, the 10th
    // crosses it and counts whole, the 2 after it are red at the parent, so at every level.
    ok({"policy", "set", "link", "--quota", "10000/1d"});
    send(12, 1000);
    auto link = policy("link"), user = policy("user");
    ASSERT_TRUE(link.contains("quota")) << link.dump();
    EXPECT_EQ(link["quota"]["used"], 10 * 1028);
    EXPECT_EQ(link["quota"]["left"], 0);
    EXPECT_EQ(link["green"]["packets"], 15);
    EXPECT_EQ(link["red"]["packets"], 2);
    EXPECT_EQ(user["green"]["packets"], 15);
    EXPECT_EQ(user["red"]["packets"], 2);
    EXPECT_FALSE(user.contains("quota")); // the child has none of its own
}

} // namespace

namespace {

TEST_F(E2E, ApplyReplacesTheWholeSetOrNothing) {
    ok({"policy", "add", "old", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k"});
    std::string file = "/tmp/tricolor-e2e-apply-" + std::to_string(getpid()) + ".yaml";
    write_file(file, "policies:\n"
                     "  - {name: a, algo: srtcm, cir: 10mbit, cbs: 15k}\n"
                     "  - name: b\n"
                     "    algo: trtcm\n"
                     "    cir: 10mbit\n"
                     "    cbs: 15k\n"
                     "    pir: 20mbit\n"
                     "    pbs: 30k\n"
                     "    match: {proto: udp, dport: 5000-5010}\n");
    auto dry = ok({"apply", "-f", file, "--dry-run"});
    EXPECT_THAT(dry.out, HasSubstr("checked 2 policies"));
    EXPECT_EQ(parse_json(ok({"-j", "policy", "list"}))["policies"].size(), 1u);
    ok({"apply", "-f", file});
    auto list = parse_json(ok({"-j", "policy", "list"}))["policies"];
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0]["name"], "a");
    EXPECT_EQ(list[1]["name"], "b");
    // One bad policy refuses the whole file.
    write_file(file, "policies:\n"
                     "  - {name: c, algo: srtcm, cir: 10mbit, cbs: 15k}\n"
                     "  - {name: d, algo: trtcm, cir: 10mbit, cbs: 15k, pir: 5mbit, pbs: 1k}\n");
    auto bad = daemon->ctl({"apply", "-f", file});
    EXPECT_EQ(bad.exit_code, 2); // a bad value: bad usage, nothing sent
    EXPECT_THAT(bad.err, HasSubstr("policy 'd': PIR 5mbit is below CIR 10mbit"));
    EXPECT_EQ(parse_json(ok({"-j", "policy", "list"}))["policies"], list);
    // The daemon refuses it on its own too (a client that does not check first): nothing of
    // the request is applied, not even its good policy.
    auto raw = control_request(
        daemon->socket(),
        json{{"cmd", "apply"},
             {"policies",
              json::array(
                  {json{{"name", "c"}, {"algo", "srtcm"}, {"cir", "10mbit"}, {"cbs", "15k"}},
                   json{{"name", "d"}, {"algo", "srtcm"}, {"cir", "fast"}, {"cbs", "15k"}}})}});
    ASSERT_TRUE(raw.has_value()) << raw.error();
    EXPECT_EQ((*raw)["ok"], false) << raw->dump();
    EXPECT_THAT(raw->dump(), HasSubstr("'d'"));
    EXPECT_EQ(parse_json(ok({"-j", "policy", "list"}))["policies"], list);
    write_file(file, "policies: [\n");
    auto garbage = daemon->ctl({"apply", "-f", file});
    EXPECT_EQ(garbage.exit_code, 2);
    EXPECT_THAT(garbage.err, HasSubstr("line "));
    std::remove(file.c_str());
}

TEST_F(E2E, SighupReloadsTheConfigAllOrNothing) {
    write_file(daemon->config(),
               "policies:\n  - {name: fromfile, algo: srtcm, cir: 1mbit, cbs: 15k}\n");
    daemon->hup();
    json list;
    for (int i = 0; i < 100; ++i) { // the reload happens in the daemon's loop: wait for it
        list = parse_json(ok({"-j", "policy", "list"}))["policies"];
        if (!list.empty())
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0]["name"], "fromfile");
    write_file(daemon->config(),
               "policies:\n  - {name: broken, algo: srtcm, cir: 1mbit, cbs: 0}\n");
    daemon->hup();
    for (int i = 0; i < 100 && daemon->log().find("reload refused") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_THAT(daemon->log(), HasSubstr("reload refused, nothing changed"));
    EXPECT_EQ(parse_json(ok({"-j", "policy", "list"}))["policies"], list);
}

TEST_F(E2E, PolicySetUnderTrafficKeepsTheTokens) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "p", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--match",
        "proto", "udp"});
    send(10, 1000); // 10 x 1028 bytes green: 5080 of 15360 left
    ok({"policy", "set", "p", "--cbs", "30k"});
    send(10, 1000); // the 5080 left pay for 4 more; a reset bucket would have passed all 10
    auto p = stats()["policies"][0];
    EXPECT_EQ(p["green"]["packets"], 14);
    EXPECT_EQ(p["red"]["packets"], 6);
}

} // namespace

namespace {

TEST_F(E2E, MetricsScrapedOverHttpMatchStats) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "m", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--ebs", "15k",
        "--match", "proto", "udp"});
    // A child of m (no traffic of its own): every per-policy series names its parent.
    ok({"policy", "add", "kid", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--match",
        "proto", "tcp", "--parent", "m"});
    send(40, 1000);
    auto status = parse_json(ok({"-j", "status"}));
    std::string address = status["metrics"];
    ASSERT_THAT(address, ::testing::StartsWith("127.0.0.1:")); // loopback unless asked
    std::string body = scrape_metrics(address);
    ASSERT_THAT(body, HasSubstr("200 OK"));
    auto s = stats();
    for (const char *color : {"green", "yellow", "red"}) {
        SCOPED_TRACE(color);
        auto p = s["policies"][0][color];
        EXPECT_THAT(body, HasSubstr(fmt::format(
                              "tricolor_packets_total{{color=\"{}\",parent=\"\",policy=\"m\"}} {}",
                              color, p["packets"].get<uint64_t>())));
        EXPECT_THAT(body, HasSubstr(fmt::format(
                              "tricolor_bytes_total{{color=\"{}\",parent=\"\",policy=\"m\"}} {}",
                              color, p["bytes"].get<uint64_t>())));
        EXPECT_THAT(
            body,
            HasSubstr(fmt::format(
                "tricolor_packets_total{{color=\"{}\",parent=\"m\",policy=\"kid\"}} 0", color)));
    }
    EXPECT_THAT(body, HasSubstr("tricolor_flow_capacity 65536"));
    EXPECT_THAT(body, HasSubstr("tricolor_flow_capacity_max 1048576"));
    EXPECT_THAT(body, HasSubstr("tricolor_unclassified_packets_total"));
    EXPECT_THAT(body, HasSubstr("tricolor_table_full_total 0"));
}

} // namespace

namespace {

TEST_F(E2E, TcEgressAndIpv6OnXdpIngress) {
    ok({"attach", lab->host_if, "--hook", "tc", "--direction", "egress"});
    ok({"attach", lab->host_if}); // XDP ingress on the same interface
    // UDP only: neighbour discovery from the same address is ICMPv6.
    ok({"policy", "add", "v6-in", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--match",
        "src", lab->ns_v6 + "/128", "--match", "proto", "udp"});
    ok({"policy", "add", "v4-out", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--match",
        "dst", lab->ns_v4, "--match", "proto", "udp", "--green", "mark:7"});
    // IPv6 into the host: 40 + 8 + 1000 = 1048 bytes, 14 fit in 15360.
    auto r6 = lab->in_ns({udp_tool_path(), "send", lab->host_v6, "9000", "20", "1000"});
    ASSERT_EQ(r6.exit_code, 0) << r6.err;
    // IPv4 out of the host, through tc egress.
    auto r4 = run_command({udp_tool_path(), "send", lab->ns_v4, "9000", "20", "1000"});
    ASSERT_EQ(r4.exit_code, 0) << r4.err;
    auto s = stats();
    EXPECT_EQ(total_packets(s, "v6-in"), 20u);
    EXPECT_EQ(total_packets(s, "v4-out"), 20u);
    for (const auto &p : s["policies"]) {
        EXPECT_EQ(p["green"]["packets"], 14) << p["name"];
        EXPECT_EQ(p["red"]["packets"], 6) << p["name"];
    }
    auto status = parse_json(ok({"-j", "status"}));
    ASSERT_EQ(status["attachments"].size(), 2u);
    for (const auto &a : status["attachments"]) {
        EXPECT_TRUE(a["attached"].get<bool>()) << a.dump();
        if (a["hook"] == "tc") {
            // A pinned tcx link where the kernel has tcx, the clsact fallback below 6.6.
            EXPECT_EQ(a["mode"], expected_tc_mode());
        }
    }
    ok({"detach", lab->host_if, "--hook", "tc", "--direction", "egress"});
    ok({"detach", lab->host_if});
    EXPECT_TRUE(parse_json(ok({"-j", "status"}))["attachments"].empty());
}

TEST_F(E2E, TwoDaemonsRunSideBySide) {
    Lab other_lab;
    Daemon other("side-by-side");
    ok({"attach", lab->host_if});
    ASSERT_EQ(other.ctl({"attach", other_lab.host_if}).exit_code, 0);
    ok({"policy", "add", "one", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--match",
        "proto", "udp"});
    ASSERT_EQ(other
                  .ctl({"policy", "add", "two", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k",
                        "--match", "proto", "udp"})
                  .exit_code,
              0);
    send(5, 100);
    ASSERT_EQ(
        other_lab.in_ns({udp_tool_path(), "send", other_lab.host_v4, "9000", "7", "100"}).exit_code,
        0);
    EXPECT_EQ(total_packets(stats(), "one"), 5u);
    EXPECT_EQ(total_packets(parse_json(other.ctl({"-j", "stats"})), "two"), 7u);
    EXPECT_EQ(parse_json(ok({"-j", "policy", "list"}))["policies"].size(), 1u);
}

TEST_F(E2E, StatsWatchRefreshesWithRates) {
    ok({"policy", "add", "w", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k"});
    auto r = ok({"stats", "--watch", "--interval", "0.2", "--count", "3"});
    size_t tables = 0;
    for (size_t pos = 0; (pos = r.out.find("POLICY", pos)) != std::string::npos; ++pos)
        ++tables;
    EXPECT_EQ(tables, 3u);
    EXPECT_THAT(r.out, HasSubstr("rate"));
    // Not a terminal (a pipe here): one table after another, no escape codes.
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("\033[")));
}

} // namespace

namespace {

TEST_F(E2E, ASecondDaemonOnTheSamePinDirIsRefused) {
    auto r = run_command({tricolord_path(), "--socket", "/tmp/tricolor-e2e-second.sock",
                          "--pin-dir", daemon->pin_dir(), "--config",
                          "/tmp/tricolor-e2e-second.yaml", "--metrics", "none"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("another tricolord uses it"));
    EXPECT_EQ(daemon->ctl({"status"}).exit_code, 0); // the first one is untouched
}

} // namespace

namespace {

// kill -9 in the middle of a stream: the data path polices throughout, and the counters read
// before, during (from the restarted daemon) and after only grow, ending at exactly what was sent.
TEST_F(E2E, Kill9UnderTrafficLosesNoCount) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "stream", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
        "proto", "udp"});
    const long kPackets = 3000;
    RunResult sender;
    std::thread tx([&] {
        sender = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000",
                             std::to_string(kPackets), "200", "2000"}); // 1.5 s
    });
    std::vector<uint64_t> seen;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    seen.push_back(total_packets(stats(), "stream"));
    daemon->kill9();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    daemon->start();
    seen.push_back(total_packets(stats(), "stream"));
    tx.join();
    ASSERT_EQ(sender.exit_code, 0) << sender.err;
    seen.push_back(total_packets(stats(), "stream"));
    EXPECT_GT(seen[0], 0u);
    EXPECT_TRUE(std::ranges::is_sorted(seen)) << seen[0] << " " << seen[1] << " " << seen[2];
    EXPECT_EQ(seen.back(), static_cast<uint64_t>(kPackets));
    auto p = stats()["policies"][0];
    // 1 Mbit/s for ~1.5 s plus the bucket: far less than the 3.3 Mbit/s offered got through.
    EXPECT_GT(p["red"]["packets"].get<uint64_t>(), 0u);
}

} // namespace

namespace {

TEST_F(E2E, TcxLinkKeepsPolicingThroughKill9AndIsAdopted) {
    ok({"attach", lab->host_if, "--hook", "tc", "--direction", "egress"});
    ok({"policy", "add", "out", "--algo", "srtcm", "--cir", "8bit", "--cbs", "15k", "--match",
        "dst", lab->ns_v4, "--match", "proto", "udp"});
    ASSERT_EQ(run_command({udp_tool_path(), "send", lab->ns_v4, "9000", "10", "1000"}).exit_code,
              0);
    daemon->kill9();
    // No daemon: the pinned link keeps the program on the hook.
    ASSERT_EQ(run_command({udp_tool_path(), "send", lab->ns_v4, "9000", "10", "1000"}).exit_code,
              0);
    daemon->start();
    auto s = stats();
    EXPECT_EQ(total_packets(s, "out"), 20u);
    EXPECT_EQ(s["policies"][0]["green"]["packets"], 14);
    auto a = parse_json(ok({"-j", "status"}))["attachments"][0];
    EXPECT_EQ(a["mode"], expected_tc_mode()); // a tcx link, or the clsact filter below 6.6
    EXPECT_TRUE(a["attached"].get<bool>());
    ok({"detach", lab->host_if, "--hook", "tc", "--direction", "egress"});
    ASSERT_EQ(run_command({udp_tool_path(), "send", lab->ns_v4, "9000", "5", "1000"}).exit_code, 0);
    EXPECT_EQ(total_packets(stats(), "out"), 20u); // detached: no longer metered
}

} // namespace

namespace {

TEST_F(E2E, TheDaemonReclaimsIdleFlows) {
    daemon.reset(); // this test needs its own flags
    daemon =
        std::make_unique<Daemon>("reclaim", std::vector<std::string>{"--reclaim-interval", "0.3",
                                                                     "--flow-idle-timeout", "0"});
    ok({"attach", lab->host_if});
    // 1000 B/s and 1000-byte buckets: a 128-byte packet's tokens come back in 0.128 s.
    ok({"policy", "add", "per-flow", "--algo", "srtcm", "--cir", "8000", "--cbs", "1000", "--per",
        "5tuple", "--match", "proto", "udp"});
    send(1, 100); // each run sends from a new source port: a flow of its own
    send(1, 100);
    // Both flows exist, or were already reclaimed: a slow machine (the 6.1 guest under TCG) may
    // take longer between the sends than a flow takes to fill up again. status counts the
    // flows as of the last pass (every 0.3 s here), which may come before the sends.
    json before;
    for (int i = 0; i < 20; ++i) {
        before = parse_json(ok({"-j", "status"}));
        if (before["flows"]["used"].get<int>() + before["flows"]["reclaimed"].get<int>() == 2)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(before["flows"]["used"].get<int>() + before["flows"]["reclaimed"].get<int>(), 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    auto status = parse_json(ok({"-j", "status"}));
    EXPECT_EQ(status["flows"]["used"], 0);
    EXPECT_EQ(status["flows"]["reclaimed"], 2);
    EXPECT_EQ(total_packets(stats(), "per-flow"), 2u); // the policy's counters stay
}

} // namespace

namespace {

// TCP through a drop-red policy: reported, and held to the meter's bound only.
TEST_F(E2E, TcpThroughADropRedPolicyStaysWithinTheBound) {
    ok({"attach", lab->host_if});
    const uint64_t cir = 20000000, cbs = 262144, ebs = 262144; // 20 Mbit/s
    ok({"policy", "add", "tcp", "--algo", "srtcm", "--cir", std::to_string(cir), "--cbs",
        std::to_string(cbs), "--ebs", std::to_string(ebs), "--match", "proto", "tcp"});
    RunResult got;
    std::thread rx([&] {
        got = run_command({udp_tool_path(), "tcp-recv", lab->host_v4, "9100", "4"});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    timespec a{}, b{};
    clock_gettime(CLOCK_MONOTONIC, &a);
    auto sent = lab->in_ns({udp_tool_path(), "tcp-send", lab->host_v4, "9100", "3"});
    // The sender's socket buffer drains after it exits: the window closes when the receiver
    // has read its last byte, so every admitted packet was metered inside it.
    rx.join();
    clock_gettime(CLOCK_MONOTONIC, &b);
    ASSERT_EQ(sent.exit_code, 0) << sent.err;
    auto p = stats()["policies"][0];
    double T = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    uint64_t admitted = p["green"]["bytes"].get<uint64_t>() + p["yellow"]["bytes"].get<uint64_t>();
    // Admitted IP bytes can never exceed the buckets plus CIR over the window.
    EXPECT_LE(static_cast<double>(admitted), cbs + ebs + cir / 8.0 * T);
    uint64_t goodput = 0;
    double seconds = 0;
    auto at = got.out.find("bytes ");
    ASSERT_NE(at, std::string::npos) << got.out;
    ASSERT_EQ(std::sscanf(got.out.c_str() + at, "bytes %lu seconds %lf", &goodput, &seconds), 2)
        << got.out;
    EXPECT_GT(goodput, 0u);
    double mbit = seconds > 0 ? goodput * 8 / seconds / 1e6 : 0;
    std::cout << fmt::format("[ tcp ] CIR 20 Mbit/s: goodput {:.1f} Mbit/s ({:.0f}% of CIR) "
                             "from first to last byte, green {} yellow {} red {} packets\n",
                             mbit, mbit * 1e6 / cir * 100, p["green"]["packets"].get<uint64_t>(),
                             p["yellow"]["packets"].get<uint64_t>(),
                             p["red"]["packets"].get<uint64_t>());
}

// Two senders pinned to different CPUs, one aggregate bucket: both bounds hold across CPUs.
TEST_F(E2E, TwoSendersOnTwoCpusShareOneBucketWithinTheBound) {
    if (std::thread::hardware_concurrency() < 2)
        GTEST_SKIP() << "needs two CPUs";
    ok({"attach", lab->host_if});
    const uint64_t cir = 8000000, cbs = 10240, ebs = 10240;
    ok({"policy", "add", "shared", "--algo", "srtcm", "--cir", std::to_string(cir), "--cbs",
        std::to_string(cbs), "--ebs", std::to_string(ebs), "--match", "proto", "udp"});
    RunResult s0, s1;
    std::string stamps[2];
    auto sender = [&](int cpu, RunResult &r) {
        stamps[cpu] = fmt::format("/tmp/tricolor-e2e-two-cpus-{}-{}", getpid(), cpu);
        r = lab->in_ns({"/usr/bin/taskset", "-c", std::to_string(cpu), udp_tool_path(), "send",
                        lab->host_v4, "9000", "1500", "1000", "1500", "0", stamps[cpu]});
    };
    std::thread t0(sender, 0, std::ref(s0)), t1(sender, 1, std::ref(s1));
    t0.join();
    t1.join();
    ASSERT_EQ(s0.exit_code, 0) << s0.err;
    ASSERT_EQ(s1.exit_code, 0) << s1.err;
    std::vector<SendStamp> sent;
    for (const auto &path : stamps) {
        auto one = read_send_stamps(path);
        std::filesystem::remove(path);
        ASSERT_EQ(one.size(), 1500u);
        sent.insert(sent.end(), one.begin(), one.end());
    }
    std::ranges::sort(sent, {}, &SendStamp::start);
    auto s = stats();
    auto p = s["policies"][0];
    EXPECT_EQ(total_packets(s, "shared"), 3000u);
    __int128 green = p["green"]["bytes"].get<uint64_t>(),
             yellow = p["yellow"]["bytes"].get<uint64_t>();
    // The window: the first send call to the bucket's newest arrival (no sleep pads it).
    auto last = last_metered_ns(daemon->pin_dir());
    ASSERT_TRUE(last.has_value());
    ASSERT_GE(*last, sent.back().start);
    __int128 T = *last - sent.front().start;
    const __int128 unit = 8000000000;
    EXPECT_LE(green * unit, __int128(cbs) * unit + __int128(cir) * T);
    EXPECT_LE((green + yellow) * unit, __int128(cbs + ebs) * unit + __int128(cir) * T);
    // The floor (admission_floor, lab.hpp), less one packet per lock timeout: a packet that
    // could not take the lock is red without asking the bucket.
    uint64_t timeouts = s["lock_timeouts"].get<uint64_t>();
    uint64_t floor = admission_floor(sent, cir, cbs, 1028);
    floor = floor > timeouts ? floor - timeouts : 0;
    EXPECT_GT(floor, 0u);
    uint64_t green_packets = p["green"]["packets"].get<uint64_t>();
    if (*last <= std::ranges::max(sent, {}, &SendStamp::end).end) {
        EXPECT_GE(green_packets, floor) << "green below what the bucket must have admitted";
    }
    std::cout << fmt::format("[ two cpus ] admitted {} of {} bound bytes; green {} packets >= "
                             "floor {} ({} lock timeouts)\n",
                             static_cast<uint64_t>(green + yellow),
                             static_cast<uint64_t>(cbs + ebs + cir * T / unit), green_packets,
                             floor, timeouts);
}

} // namespace
