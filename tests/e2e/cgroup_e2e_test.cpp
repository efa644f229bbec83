// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Limits per cgroup (docs/spec.md §11) end to end: senders moved into cgroups made for the test,
// a real tricolord on tc egress of the lab's veth, as a container or a systemd service would be
// limited. The bounds are the accuracy suite's: green within CBS + CIR*T over the measured window,
// and at least what the bucket must have admitted (admission_floor).
#include "lab.hpp"
#include "tricolor/datapath.hpp"

#include <bpf/bpf.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <set>
#include <thread>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;

namespace {

using i128 = __int128;

class Cgroups : public DaemonLabTest {
  protected:
    void SetUp() override {
        DaemonLabTest::SetUp();
        if (IsSkipped())
            return;
        if (cgroup2_mount_or_empty().empty())
            GTEST_SKIP() << "no cgroup v2 mount";
        base = fmt::format("tricolor-e2e-{}", getpid());
        // No reclaim pass: a flow whose bucket is full again would go before the test reads it.
        daemon.reset();
        daemon = std::make_unique<Daemon>(
            ::testing::UnitTest::GetInstance()->current_test_info()->name(),
            std::vector<std::string>{"--reclaim-interval", "0"});
        ok({"attach", lab->host_if, "--hook", "tc", "--direction", "egress"});
    }
    // udp_tool send run inside cgroup @c, to the namespace's address.
    RunResult send_from(const TestCgroup &c, int count, int size, int pps,
                        const std::string &stamps = "-") {
        std::string cmd = fmt::format("echo $$ > {}/cgroup.procs && exec {} send {} 9000 {} {} {} "
                                      "0 {}",
                                      c.dir, udp_tool_path(), lab->ns_v4, count, size, pps, stamps);
        return run_command({"/bin/sh", "-c", cmd});
    }
    // Datagrams the namespace's receiver got while @body ran.
    uint64_t received_while(const std::function<void()> &body, int seconds) {
        RunResult rx;
        std::thread t([&] {
            rx = lab->in_ns({udp_tool_path(), "recv", lab->ns_v4, "9000", std::to_string(seconds)});
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(400)); // the receiver binds
        body();
        t.join();
        std::smatch m;
        if (!std::regex_search(rx.out, m, std::regex("packets (\\d+) "))) {
            ADD_FAILURE() << "receiver: " << rx.out << rx.err;
            return 0;
        }
        return std::stoull(m[1]);
    }
    // After @n datagrams of @payload bytes, their send calls timed in @stamps_path, through the
    // only policy (CIR kCir, CBS kCbs): every one metered, some red, green within CBS + CIR*T
    // over the measured window and at least what the bucket must have admitted (the accuracy
    // suite's bounds, lab.hpp). Returns the green packets.
    uint64_t green_within_bounds(const std::string &stamps_path, int n, int payload,
                                 const char *what);
    // 100 datagrams of 1000 bytes from the namespace to a receiver in cgroup @c on this host. Its
    // socket must be there for the whole burst (no socket, no cgroup_skb hook): its window and
    // the wait for it to bind stretch with the machine's time scale.
    void ingress_burst(const TestCgroup &c) {
        const int window = static_cast<int>(std::ceil(time_scale()));
        std::thread t([&] {
            std::string cmd = fmt::format("echo $$ > {}/cgroup.procs && exec {} recv {} 9000 {}",
                                          c.dir, udp_tool_path(), lab->host_v4, window);
            run_command({"/bin/sh", "-c", cmd});
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(300 * window));
        lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", "100", "1000", "10000"});
        t.join();
    }
    // The packets policy @name counted, every colour.
    uint64_t packets_of(const std::string &name) {
        const json stats = parse_json(daemon->ctl({"-j", "stats"}));
        for (const auto &p : stats["policies"])
            if (p["name"] == name)
                return p["green"]["packets"].get<uint64_t>() + p["red"]["packets"].get<uint64_t>();
        return 0;
    }
    std::string base;
};

constexpr uint64_t kCir = 20000000; // 20 Mbit/s: 2.5 MB/s
constexpr uint64_t kCbs = 16384;

uint64_t Cgroups::green_within_bounds(const std::string &stamps_path, int n, int payload,
                                      const char *what) {
    auto stamps = read_send_stamps(stamps_path);
    std::filesystem::remove(stamps_path);
    EXPECT_EQ(stamps.size(), static_cast<size_t>(n));
    auto p = parse_json(daemon->ctl({"-j", "stats"}))["policies"][0];
    uint64_t gp = p["green"]["packets"], rp = p["red"]["packets"];
    EXPECT_EQ(gp + rp, static_cast<uint64_t>(n)) << "every datagram of the cgroup, and only those";
    EXPECT_GT(rp, 0u);
    auto last = last_metered_ns(daemon->pin_dir());
    if (stamps.empty() || !last) {
        ADD_FAILURE() << "no send times, or no started policy state";
        return gp;
    }
    const uint64_t len = payload + 28;
    const i128 unit = 8000000000, T = *last - stamps.front().start;
    EXPECT_LE(i128(gp * len) * unit, i128(kCbs) * unit + i128(kCir) * T) << "green <= CBS+CIR*T";
    if (*last <= stamps.back().end) {
        EXPECT_GE(gp, admission_floor(stamps, kCir, kCbs, len));
    }
    std::cout << fmt::format("[ cgroups ] {}: {} green of {} over {:.3f} s ({:.2f} Mbit/s)\n", what,
                             gp, n, static_cast<double>(T) / 1e9,
                             static_cast<double>(gp * len * 8) / (static_cast<double>(T) / 1e9) /
                                 1e6);
    return gp;
}

TEST_F(Cgroups, OneCgroupsEgressIsHeldToItsBoundAndAnotherIsUntouched) {
    TestCgroup limited(base + "/limited"), free(base + "/free");
    ok({"policy", "add", "svc", "--algo", "srtcm", "--cir", std::to_string(kCir), "--cbs",
        std::to_string(kCbs), "--ebs", "0", "--match", "cgroup", base + "/limited"});
    const int n = 3000, payload = 1000; // 1028 IP bytes at 5000/s: 41 Mbit/s, twice CIR
    std::string stamps_path = fmt::format("/tmp/tricolor-e2e-cg-stamps-{}", getpid());
    uint64_t got = received_while(
        [&] {
            auto s = send_from(limited, n, payload, 5000, stamps_path);
            EXPECT_EQ(s.exit_code, 0) << s.err;
            auto f = send_from(free, 1000, payload, 5000);
            EXPECT_EQ(f.exit_code, 0) << f.err;
        },
        3);
    uint64_t gp = green_within_bounds(stamps_path, n, payload, "egress");
    // The other cgroup's 1000 were not metered: every one arrived, with the limited one's green.
    EXPECT_EQ(got, gp + 1000);
    auto stats = parse_json(daemon->ctl({"-j", "stats"}));
    EXPECT_GE(stats["unclassified"]["packets"].get<uint64_t>(), 1000u);
}

// --shape sockets for a cgroup policy: the sock_ops program finds the policy by the socket's
// cgroup (bpf/lib/shape.h) and paces its sockets, so TCP from the cgroup fills the rate through a
// 16 KiB bucket where a hard policer loses segments and stalls (docs/tcp.md). The same policy
// without --shape first, in the same run, is the measure: the bench measures >= 95% of CIR
// shaped. An iperf3 from another cgroup afterwards is not limited.
TEST_F(Cgroups, TcpFromACgroupIsPacedToItsRateWithShapeSockets) {
    if (run_command({"/bin/sh", "-c", "command -v iperf3"}).exit_code != 0)
        GTEST_SKIP() << "iperf3 is not installed";
    TestCgroup limited(base + "/limited"), free(base + "/free");
    const std::string pid_file = fmt::format("/tmp/tricolor-e2e-cg-iperf3-{}.pid", getpid());
    auto server = lab->in_ns({"/usr/bin/iperf3", "-s", "-D", "--pidfile", pid_file});
    ASSERT_EQ(server.exit_code, 0) << server.err;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(300 * time_scale())));
    auto goodput = [&](const TestCgroup &c) {
        auto r = run_command(
            {"/bin/sh", "-c",
             fmt::format("echo $$ > {}/cgroup.procs && exec /usr/bin/iperf3 -C cubic -c {} -t 3 -J",
                         c.dir, lab->ns_v4)});
        if (r.exit_code != 0) {
            ADD_FAILURE() << "iperf3: " << r.out << r.err;
            return 0.0;
        }
        return parse_json(r)["end"]["sum_received"]["bits_per_second"].get<double>();
    };
    auto red = [&] {
        return parse_json(daemon->ctl({"-j", "stats"}))["policies"][0]["red"]["packets"]
            .get<uint64_t>();
    };
    ok({"policy", "add", "svc", "--algo", "srtcm", "--cir", "20mbit", "--cbs", "16k", "--ebs", "0",
        "--match", "cgroup", base + "/limited"});
    double hard = goodput(limited);
    const uint64_t red_hard = red();
    ok({"policy", "set", "svc", "--shape", "sockets"});
    double shaped = goodput(limited);
    auto p = parse_json(daemon->ctl({"-j", "stats"}))["policies"][0];
    const uint64_t red_shaped = p["red"]["packets"].get<uint64_t>() - red_hard;
    double other = goodput(free);
    run_command({"/bin/sh", "-c", "kill $(cat " + pid_file + ")"});
    std::cout << fmt::format("[ cgroups ] TCP at CIR 20 Mbit/s: hard policer {:.2f} Mbit/s, {} "
                             "red; --shape sockets {:.2f} Mbit/s, {} red; another cgroup {:.0f} "
                             "Mbit/s\n",
                             hard / 1e6, red_hard, shaped / 1e6, red_shaped, other / 1e6);
    EXPECT_GT(shaped, 0.5 * 20e6);
    EXPECT_LE(shaped, 20e6 * 1.05);
    // Paced, not policed: the hard policer at this bucket loses segments and stalls (0.6 Mbit/s
    // here; the cgroup left out of the socket's classification, planted, is that run again).
    EXPECT_GT(shaped, 3 * hard) << "hard " << hard / 1e6 << " Mbit/s";
    // A pacing timer that fires late sends a backlog the bucket does not hold, so a few red are
    // allowed: none on an idle machine. Under an emulated CPU every timer is late, by as much as
    // the host is busy: 10-57 red shaped against 76-104 hard in three runs in Debian's 6.1 under
    // TCG, 134 in one CI run. There the goodput above is the measure, not the red count.
    if (time_scale() <= 1) {
        EXPECT_LE(red_shaped, 16u) << p.dump();
    }
    EXPECT_GT(p["green"]["packets"].get<uint64_t>(), 0u);
    EXPECT_GT(other, 2 * 20e6) << "the other cgroup is not limited";
}

// Ingress: a local server in a cgroup, limited in what it receives (the cgroup_skb program on
// the root cgroup), exactly as egress is; red dropped before the socket sees it.
TEST_F(Cgroups, WhatOneCgroupReceivesIsHeldToItsBound) {
    TestCgroup srv(base + "/server");
    const int window = static_cast<int>(std::ceil(time_scale())); // the receiver must outlast it
    ok({"policy", "add", "srv", "--algo", "srtcm", "--cir", std::to_string(kCir), "--cbs",
        std::to_string(kCbs), "--ebs", "0", "--match", "cgroup", base + "/server", "--direction",
        "ingress"});
    const int n = 3000, payload = 1000;
    std::string stamps_path = fmt::format("/tmp/tricolor-e2e-cgin-stamps-{}", getpid());
    RunResult rx;
    std::thread t([&] {
        std::string cmd = fmt::format("echo $$ > {}/cgroup.procs && exec {} recv {} 9000 {}",
                                      srv.dir, udp_tool_path(), lab->host_v4, 3 * window);
        rx = run_command({"/bin/sh", "-c", cmd});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(400 * window));
    auto sent = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", std::to_string(n),
                            std::to_string(payload), "5000", "0", stamps_path});
    EXPECT_EQ(sent.exit_code, 0) << sent.err;
    t.join();
    uint64_t gp = green_within_bounds(stamps_path, n, payload, "ingress");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(rx.out, m, std::regex("packets (\\d+) "))) << rx.out << rx.err;
    EXPECT_EQ(std::stoull(m[1]), gp) << "the server got exactly the green";
}

// --aqm ecn on ingress to a cgroup's sockets: TCP from the namespace (it asks for ECN) to a
// server in the cgroup. The cgroup_skb program marks CE (bpf_skb_ecn_set_ce) where the law
// signals, rather than dropping an ECN-capable packet. What it buys (the retransmits a hard policer
// causes) is tests/bench/cgroup_tcp_bench.sh's to measure, at a round trip where it shows.
TEST_F(Cgroups, TcpIntoACgroupWithAqmEcnIsSignalledByMarks) {
    if (run_command({"/bin/sh", "-c", "command -v iperf3"}).exit_code != 0)
        GTEST_SKIP() << "iperf3 is not installed";
    TestCgroup srv(base + "/server");
    const std::string pid_file = fmt::format("/tmp/tricolor-e2e-cgecn-{}.pid", getpid());
    ASSERT_EQ(run_command({"/bin/sh", "-c",
                           fmt::format("echo $$ > {}/cgroup.procs && exec /usr/bin/iperf3 -s -B {} "
                                       "-p 5302 -D --pidfile {}",
                                       srv.dir, lab->host_v4, pid_file)})
                  .exit_code,
              0);
    lab->in_ns({"/sbin/sysctl", "-qw", "net.ipv4.tcp_ecn=1"});
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(300 * time_scale())));
    ok({"policy", "add", "srv", "--algo", "srtcm", "--cir", "20mbit", "--cbs", "64k", "--ebs", "0",
        "--match", "cgroup", base + "/server", "--direction", "ingress", "--aqm", "ecn"});
    auto r = lab->in_ns(
        {"/usr/bin/iperf3", "-C", "cubic", "-c", lab->host_v4, "-p", "5302", "-t", "2", "-J"});
    run_command({"/bin/sh", "-c", "kill $(cat " + pid_file + ")"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    double got = parse_json(r)["end"]["sum_received"]["bits_per_second"].get<double>();
    auto p = parse_json(daemon->ctl({"-j", "stats"}))["policies"][0];
    std::cout << fmt::format("[ cgroups ] TCP into a cgroup, --aqm ecn: {:.2f} Mbit/s, {} marked, "
                             "{} red\n",
                             got / 1e6, p["aqm"]["marked"]["packets"].get<uint64_t>(),
                             p["red"]["packets"].get<uint64_t>());
    EXPECT_GT(p["green"]["packets"].get<uint64_t>(), 0u);
    EXPECT_GT(p["aqm"]["marked"]["packets"].get<uint64_t>(), 0u) << p.dump();
    // Linux sends a retransmission without ECT (RFC 3168): a signal that falls on one is an early
    // drop. Most signals fall on new data, which is ECN-capable.
    EXPECT_GT(p["aqm"]["marked"]["packets"].get<uint64_t>(),
              p["aqm"]["dropped"]["packets"].get<uint64_t>())
        << p.dump();
    EXPECT_GT(got, 0.0);
}

// The ingress program is attached through a pinned link, as the tc links are: it polices on
// while the daemon is down, and a new daemon swaps its own program in.
TEST_F(Cgroups, IngressPolicesOnThroughKill9AndARestartTakesItOver) {
    TestCgroup srv(base + "/server");
    ok({"policy", "add", "srv", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "10k", "--ebs", "0",
        "--match", "cgroup", base + "/server", "--direction", "ingress"});
    auto burst = [&] { ingress_burst(srv); };
    auto packets = [&] { return packets_of("srv"); };
    burst();
    EXPECT_EQ(packets(), 100u);
    daemon->kill9();
    EXPECT_TRUE(std::filesystem::exists(daemon->pin_dir() + "/abi2/links/cgroup_ingress"));
    burst(); // no daemon: the pinned link's program meters it
    daemon->start();
    EXPECT_EQ(packets(), 200u) << "metered while the daemon was down, counters adopted";
    burst();
    EXPECT_EQ(packets(), 300u) << "the new daemon's program, in the same link";
    // As after a reboot: every pin gone, the state file left. The start attaches the program.
    daemon->kill9();
    Datapath::remove_pins(daemon->pin_dir());
    daemon->start();
    burst();
    EXPECT_EQ(packets(), 100u) << "no pinned link to take over: the start attaches its own";
}

// The program on the root cgroup's ingress link of a pin directory (its pinned link), by id.
uint32_t cgroup_ingress_prog(const std::string &pin_dir) {
    int fd = bpf_obj_get((pin_dir + "/abi2/links/cgroup_ingress").c_str());
    if (fd < 0)
        return 0;
    bpf_link_info info{};
    uint32_t len = sizeof(info);
    uint32_t id = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.prog_id : 0;
    close(fd);
    return id;
}

// A growth of the flow table loads the programs again: the cgroup ingress program on the root
// cgroup's link is swapped for the new one (in the same link), and it polices on.
TEST_F(Cgroups, AFlowTableGrowthSwapsTheIngressProgramAndItPolicesOn) {
    daemon->terminate();
    Datapath::remove_pins(daemon->pin_dir());
    daemon->set_flags({"--reclaim-interval", "0", "--flows", "8"});
    daemon->start();
    TestCgroup srv(base + "/server");
    ok({"policy", "add", "srv", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "10k", "--ebs", "0",
        "--match", "cgroup", base + "/server", "--direction", "ingress"});
    auto burst = [&] { ingress_burst(srv); };
    auto packets = [&] { return packets_of("srv"); };
    const int window = static_cast<int>(std::ceil(time_scale()));
    burst();
    EXPECT_EQ(packets(), 100u);
    const uint32_t before = cgroup_ingress_prog(daemon->pin_dir());
    ASSERT_NE(before, 0u);
    // Eight flows of a per-destination policy on XDP fill the table of 8 past half: it grows.
    ok({"attach", lab->host_if});
    ok({"policy",  "add",  "many",     "--algo", "srtcm",         "--cir", "1mbit",
        "--cbs",   "10k",  "--match",  "dst",    "198.19.0.0/16", "--per", "dst",
        "--green", "drop", "--yellow", "drop",   "--red",         "drop"});
    ASSERT_EQ(lab->in_ns({"ip", "route", "add", "198.19.0.0/16", "via", lab->host_v4}).exit_code,
              0);
    lab->in_ns({udp_tool_path(), "spread", "198.19.0.1", "9", "8", "1", "100", "1000"});
    json st; // a growth loads the programs again: seconds in an emulated guest
    for (int i = 0; i < 100 * window; ++i) {
        st = parse_json(daemon->ctl({"-j", "status"}))["flows"];
        if (st["grown"] == 1 && st["moving"] == false)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(st["grown"], 1) << st.dump();
    EXPECT_EQ(st["capacity"], TCM_START_FLOWS) << "a table under it is within the goal's constant";
    const uint32_t after = cgroup_ingress_prog(daemon->pin_dir());
    EXPECT_NE(after, before) << "the link runs the new data path's program";
    EXPECT_NE(after, 0u);
    burst();
    EXPECT_EQ(packets(), 200u) << "the new program meters the cgroup's ingress";
}

// A container: a process in a network namespace of its own, in a cgroup. Its packets still carry
// their socket at the host-side end of its veth pair, where tc ingress matches its cgroup
// (docs/cgroups.md, "Where to attach").
TEST_F(Cgroups, AContainersPacketsAreMatchedAtTheHostEndOfItsVeth) {
    TestCgroup ctr(base + "/ctr");
    ok({"attach", lab->host_if, "--hook", "tc", "--direction", "ingress"});
    ok({"policy", "add", "ctr", "--algo", "srtcm", "--cir", "8mbit", "--cbs", "10k", "--ebs", "0",
        "--match", "cgroup", base + "/ctr"});
    RunResult rx;
    std::thread t([&] { rx = run_command({udp_tool_path(), "recv", lab->host_v4, "9000", "2"}); });
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    std::string in_ctr = fmt::format("echo $$ > {}/cgroup.procs && exec /sbin/ip netns exec {} {} "
                                     "send {} 9000 1000 1000 4000",
                                     ctr.dir, lab->ns, udp_tool_path(), lab->host_v4);
    EXPECT_EQ(run_command({"/bin/sh", "-c", in_ctr}).exit_code, 0);
    // The namespace's other processes (this one's cgroup): not the container's policy.
    EXPECT_EQ(lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", "300", "1000", "4000"})
                  .exit_code,
              0);
    t.join();
    auto stats = parse_json(daemon->ctl({"-j", "stats"}));
    auto p = stats["policies"][0];
    uint64_t gp = p["green"]["packets"], rp = p["red"]["packets"];
    EXPECT_EQ(gp + rp, 1000u) << "the container's datagrams, each once (egress of the host end "
                                 "carries none of them)";
    EXPECT_GT(rp, 0u);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(rx.out, m, std::regex("packets (\\d+) "))) << rx.out;
    EXPECT_EQ(std::stoull(m[1]), gp + 300);
}

// --per cgroup over a glob: each child its own bucket, named by its path; a child made while
// the policy runs is limited within a second, as the spec asks.
TEST_F(Cgroups, PerCgroupGlobGivesEachChildABucketAndFollowsNewOnes) {
    std::vector<std::unique_ptr<TestCgroup>> pods;
    for (int i = 1; i <= 8; ++i)
        pods.push_back(std::make_unique<TestCgroup>(fmt::format("{}/pod-{}", base, i)));
    ok({"policy", "add", "pods", "--algo", "srtcm", "--cir", "8mbit", "--cbs", "10k", "--ebs", "0",
        "--match", "cgroup", base + "/pod-*", "--per", "cgroup"});
    received_while(
        [&] {
            for (auto &p : pods)
                EXPECT_EQ(send_from(*p, 40, 1000, 20000).exit_code, 0);
        },
        2);
    auto flows = parse_json(daemon->ctl({"-j", "flows"}))["flows"];
    ASSERT_EQ(flows.size(), 8u) << flows.dump();
    std::set<std::string> keys;
    for (const auto &f : flows) {
        keys.insert(f["key"].get<std::string>());
        // 40 datagrams in 2 ms against a 10 KiB bucket: green is what the bucket held, the rest
        // red.
        EXPECT_GT(f["green"]["packets"].get<uint64_t>(), 0u) << f.dump();
        EXPECT_GT(f["red"]["packets"].get<uint64_t>(), 0u) << f.dump();
    }
    for (int i = 1; i <= 8; ++i)
        EXPECT_TRUE(keys.contains(fmt::format("cgroup {}/pod-{}", base, i)));
    // stats and the metrics name each cgroup's bucket by its path, with the flow's counters.
    auto cgroups = parse_json(daemon->ctl({"-j", "stats"}))["policies"][0]["cgroups"];
    ASSERT_EQ(cgroups.size(), 8u) << cgroups.dump();
    std::string body =
        scrape_metrics(parse_json(daemon->ctl({"-j", "status"}))["metrics"].get<std::string>());
    for (const auto &f : flows) {
        std::string path = f["key"].get<std::string>().substr(7); // after "cgroup "
        auto c = std::ranges::find_if(cgroups, [&](const json &j) { return j["path"] == path; });
        ASSERT_NE(c, cgroups.end()) << path;
        EXPECT_EQ((*c)["green"], f["green"]);
        EXPECT_EQ((*c)["red"], f["red"]);
        EXPECT_THAT(body, ::testing::HasSubstr(fmt::format(
                              "tricolor_cgroup_packets_total{{cgroup=\"{}\",color=\"red\","
                              "policy=\"pods\"}} {}",
                              path, f["red"]["packets"].get<uint64_t>())));
    }

    TestCgroup late(base + "/pod-9");
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(1000 * time_scale())));
    received_while([&] { EXPECT_EQ(send_from(late, 40, 1000, 20000).exit_code, 0); }, 1);
    bool limited = false;
    auto after = parse_json(daemon->ctl({"-j", "flows"}))["flows"];
    for (const auto &f : after)
        if (f["key"] == fmt::format("cgroup {}/pod-9", base))
            limited = f["red"]["packets"].get<uint64_t>() > 0;
    EXPECT_TRUE(limited) << "a cgroup made a second before is metered in a bucket of its own: "
                         << after.dump();
}

// A cgroup removed (a container gone): its bucket goes with the idle reclaim, as any idle flow's
// does, and stats stops listing it once the tree is rescanned; a busy sibling keeps its bucket.
TEST_F(Cgroups, ARemovedCgroupsBucketGoesWithTheIdleReclaim) {
    // The idle timeout stretches with TRICOLOR_TIME_SCALE: under TCG one round of the kept
    // sender's loop (a process started in its cgroup, a flows request) took over a second, and
    // the busy bucket went as idle (CI, stop 35).
    const int s = time_scale();
    daemon.reset();
    daemon = std::make_unique<Daemon>(
        ::testing::UnitTest::GetInstance()->current_test_info()->name(),
        std::vector<std::string>{"--reclaim-interval", "0.5", "--flow-idle-timeout",
                                 std::to_string(s)});
    ok({"attach", lab->host_if, "--hook", "tc", "--direction", "egress"});
    TestCgroup kept(base + "/pod-kept");
    auto gone = std::make_unique<TestCgroup>(base + "/pod-gone");
    ok({"policy", "add", "pods", "--algo", "srtcm", "--cir", "8mbit", "--cbs", "10k", "--ebs", "0",
        "--match", "cgroup", base + "/pod-*", "--per", "cgroup"});
    auto keys = [&] {
        std::set<std::string> out;
        auto f = parse_json(daemon->ctl({"-j", "flows"}))["flows"];
        for (const auto &x : f)
            out.insert(x["key"].get<std::string>());
        return out;
    };
    const std::string kept_key = "cgroup " + kept.path, gone_key = "cgroup " + gone->path;
    EXPECT_EQ(send_from(kept, 5, 100, 1000).exit_code, 0);
    EXPECT_EQ(send_from(*gone, 5, 100, 1000).exit_code, 0);
    auto before = keys();
    EXPECT_TRUE(before.contains(kept_key) && before.contains(gone_key));
    gone.reset(); // rmdir: its sender has exited
    // The kept one sends every 200 ms: never idle for the timeout.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(int(4000 * time_scale()));
    bool went = false;
    while (!went && std::chrono::steady_clock::now() < deadline) {
        EXPECT_EQ(send_from(kept, 1, 100, 1000).exit_code, 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        went = !keys().contains(gone_key);
    }
    EXPECT_TRUE(went) << "the removed cgroup's bucket is reclaimed";
    EXPECT_TRUE(keys().contains(kept_key)) << "the busy one's is not";
    auto cgroups = parse_json(daemon->ctl({"-j", "stats"}))["policies"][0]["cgroups"];
    ASSERT_EQ(cgroups.size(), 1u) << cgroups.dump();
    EXPECT_EQ(cgroups[0]["path"], kept.path);
}

TEST_F(Cgroups, BadCgroupPoliciesAreRefusedAndChangeNothing) {
    ok({"policy", "add", "keep", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "10k"});
    struct Bad {
        std::vector<std::string> args;
        const char *says;
    };
    std::vector<Bad> cases = {
        {{"--per", "cgroup"}, "cgroup keeps a bucket per cgroup"},
        {{"--match", "cgroup", "/sys/fs/cgroup/system.slice"}, "names the mount point"},
        {{"--match", "cgroup", "a/../b"}, "'..' is not allowed"},
        {{"--match", "cgroup", "a", "--match", "dport", "80"}, "takes no other field yet"},
        {{"--direction", "ingress"}, "only a cgroup policy states a direction"},
        {{"--match", "cgroup", "a", "--direction", "ingress", "--red", "mark:1"},
         "on ingress to a cgroup's sockets"},
    };
    for (const auto &c : cases) {
        std::vector<std::string> args = {"policy", "add",   "bad",   "--algo", "srtcm",
                                         "--cir",  "1mbit", "--cbs", "10k"};
        args.insert(args.end(), c.args.begin(), c.args.end());
        auto r = daemon->ctl(args);
        EXPECT_NE(r.exit_code, 0);
        EXPECT_THAT(r.err, ::testing::HasSubstr(c.says));
    }
    // A parent cannot be per cgroup.
    ok({"policy", "add", "pc", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "10k", "--match",
        "cgroup", base + "/x", "--per", "cgroup"});
    auto r = daemon->ctl({"policy", "add", "child", "--algo", "srtcm", "--cir", "1mbit", "--cbs",
                          "10k", "--match", "cgroup", base + "/x/y", "--parent", "pc"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, ::testing::HasSubstr("its parent 'pc' is per cgroup"));
    auto list = parse_json(daemon->ctl({"-j", "policy", "list"}));
    EXPECT_EQ(list["policies"].size(), 2u) << list.dump();
}

} // namespace
