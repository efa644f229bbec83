// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Fleet-wide limits end to end (docs/spec.md §10): three hosts, each a network namespace sending
// through its own veth into its own tricolord, one real redis-server on loopback. UDP at twice
// the fleet's CIR moves from host to host; the fleet's green bytes, read from the daemons'
// counters, must stay within CBS + CIR*T over every window between two samples, where T is
// measured conservatively (from the first read of the earlier sample to the last read of the
// later one). Exact: no tolerance. Also bad input and Redis lost and back.
#include "lab.hpp"
#include "redis_server.hpp"
#include "tricolor/control.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <ctime>
#include <mutex>
#include <sstream>
#include <thread>

#include <unistd.h>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;

namespace {

constexpr uint64_t kCir = 8000000; // bit/s: 1 MB/s for the whole fleet
constexpr uint64_t kCbs = 100000;  // bytes
constexpr int kPps = 2000;         // 1028-byte IP packets: 2.06 x CIR
constexpr int kPayload = 1000;
constexpr int kIpBytes = kPayload + 28;

json request(const Daemon &d, json r) {
    auto j = control_request(d.socket(), r);
    if (!j)
        throw std::runtime_error("control request failed: " + j.error());
    return *j;
}

json fleet_policy_stats(const Daemon &d) {
    auto s = request(d, {{"cmd", "stats"}});
    for (const auto &p : s["policies"])
        if (p["name"] == "fleet")
            return p;
    return json::object();
}

uint64_t green_bytes(const Daemon &d) {
    auto p = fleet_policy_stats(d);
    return p.contains("green") ? p["green"]["bytes"].get<uint64_t>() : 0;
}

struct Sample {
    uint64_t first_ns, last_ns; // the reads happened between these
    uint64_t green;             // fleet total
};

// Several hosts against one Redis, each its own lab and daemon: not DaemonLabTest's one of each.
class Fleet : public ::testing::Test {
  protected:
    void SetUp() override {
        TRICOLOR_REQUIRE_ROOT();
        if (!RedisServer::available())
            GTEST_SKIP() << "redis-server is not installed (./tricolor.sh build installs it)";
        ASSERT_TRUE(redis.start());
    }
    // @node: every host's --fleet-node ("": h0, h1, ... each its own).
    void start_hosts(int n, const std::string &fallback = "share", std::vector<uint64_t> cirs = {},
                     const std::string &lease = "500", const std::string &node = "") {
        for (int k = 0; k < n; ++k) {
            int i = static_cast<int>(hosts.size()); // names and nodes unique across calls
            labs.push_back(std::make_unique<Lab>());
            hosts.push_back(std::make_unique<Daemon>(
                fmt::format("fleet{}", i),
                std::vector<std::string>{"--fleet", url.empty() ? redis.url() : url, "--fleet-node",
                                         node.empty() ? fmt::format("h{}", i) : node,
                                         "--fleet-fallback", fallback, "--fleet-lease", lease}));
            auto ctl = [&](std::vector<std::string> args) {
                auto r = hosts.back()->ctl(args);
                ASSERT_EQ(r.exit_code, 0) << r.err << hosts.back()->log();
            };
            ctl({"attach", labs.back()->host_if});
            uint64_t c = k < static_cast<int>(cirs.size()) ? cirs[k] : cir;
            ctl({"policy", "add", "fleet", "--algo", "srtcm", "--cir", std::to_string(c), "--cbs",
                 std::to_string(cbs), "--ebs", "0", "--match", "proto", "udp", "--fleet"});
        }
    }
    // UDP at 2x CIR from host @i for @seconds.
    void send(int i, double seconds, int pps = kPps) {
        auto &lab = *labs[i];
        auto r = lab.in_ns({udp_tool_path(), "send", lab.host_v4, "9",
                            std::to_string(static_cast<long>(pps * seconds)),
                            std::to_string(kPayload), std::to_string(pps)});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    Sample sample() {
        Sample s{mono_ns(), 0, 0};
        for (auto &h : hosts)
            s.green += green_bytes(*h);
        s.last_ns = mono_ns();
        return s;
    }
    // Every host's offers in steps of @seconds, in bit/s (0: silent), each host one sender
    // for all its steps: demand moves between hosts with no pause.
    void send_steps(const std::vector<std::vector<uint64_t>> &steps, double seconds) {
        std::vector<std::thread> senders;
        for (size_t i = 0; i < labs.size(); ++i) {
            std::vector<std::string> argv = {udp_tool_path(),          "steps",
                                             labs[i]->host_v4,         "9",
                                             std::to_string(kPayload), fmt::format("{}", seconds)};
            for (const auto &s : steps)
                argv.push_back(std::to_string(s[i] / (8 * kIpBytes)));
            senders.emplace_back([this, i, argv] {
                auto r = labs[i]->in_ns(argv);
                EXPECT_EQ(r.exit_code, 0) << r.err;
            });
        }
        for (auto &t : senders)
            t.join();
    }
    // Samples every 100 ms while @work runs.
    std::vector<Sample> sampled(const std::function<void()> &work) {
        std::vector<Sample> samples;
        std::atomic<bool> stop{false};
        std::mutex mu;
        std::thread sampler([&] {
            while (!stop) {
                try {
                    Sample s = sample();
                    std::lock_guard l(mu);
                    samples.push_back(s);
                } catch (const std::exception &) {
                    // A daemon being restarted does not answer: no sample then.
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
        });
        work();
        stop = true;
        sampler.join();
        samples.push_back(sample());
        return samples;
    }
    // Every pair of samples: green(j) - green(i) <= CBS + CIR * (last_j - first_i), exactly.
    void expect_never_over(const std::vector<Sample> &samples) const {
        for (size_t i = 0; i < samples.size(); ++i)
            for (size_t j = i + 1; j < samples.size(); ++j) {
                __int128 green = samples[j].green - samples[i].green;
                __int128 t = samples[j].last_ns - samples[i].first_ns;
                ASSERT_LE(green * 8 * 1000000000,
                          static_cast<__int128>(cbs) * 8000000000 + static_cast<__int128>(cir) * t)
                    << "window " << i << ".." << j << ": " << static_cast<uint64_t>(green)
                    << " green bytes in " << static_cast<double>(t) / 1e9 << " s";
            }
    }
    // Green throughput over each 2-s window from @from_ns on that ends by @until_ns (while the
    // senders still send: a window over their end measures them stopping), as a fraction of CIR
    // (conservative: the window's time from the first sample's first read to the last one's
    // last read).
    std::vector<double> two_second_windows(const std::vector<Sample> &s, uint64_t from_ns,
                                           uint64_t until_ns = UINT64_MAX) const {
        std::vector<double> out;
        for (size_t i = 0; i < s.size(); ++i) {
            if (s[i].first_ns < from_ns)
                continue;
            for (size_t j = i + 1; j < s.size(); ++j) {
                double t = static_cast<double>(s[j].last_ns - s[i].first_ns) / 1e9;
                if (t < 2.0)
                    continue;
                if (s[j].last_ns > until_ns)
                    break;
                out.push_back(static_cast<double>(s[j].green - s[i].green) * 8 /
                              (static_cast<double>(cir) * t));
                if (out.back() < 0.95)
                    std::printf("window at +%.1f s: %.1f%% of CIR\n",
                                static_cast<double>(s[i].first_ns - from_ns) / 1e9 + 2,
                                out.back() * 100);
                break;
            }
        }
        return out;
    }
    uint64_t cir = kCir, cbs = kCbs;
    RedisServer redis;
    std::string url; // the hosts' --fleet when not the one redis-server's
    std::vector<std::unique_ptr<Lab>> labs;
    std::vector<std::unique_ptr<Daemon>> hosts;
};

} // namespace

// docs/fleet.md's use bound: three hosts, CIR 24 Mbit/s, offering twice that together, the
// demand moving every 3 s (30/15/5 Mbit/s, then 5/15/30, then 15/5/30): green in every 2-s
// window after the first, while the senders send, at least 95% of CIR, never above
// CBS + CIR*T. At a CBS of 10 ms of CIR (64 KiB) as at one of 350 ms (1 MiB): the lease is a
// rate, so what a host may spend between exchanges does not depend on CBS. (Here the lowest
// window came out at 96.9-97.4% over three runs of each; the token grants of before gave 57%
// overall. Windows over the senders' end are left out: they measure the senders stopping.)
class FleetMoving : public Fleet, public ::testing::WithParamInterface<uint64_t> {};

TEST_P(FleetMoving, ThreeHostsUseTheLimitAsDemandMovesAndNeverPassIt) {
    cir = 24000000;
    cbs = GetParam();
    start_hosts(3);
    const std::vector<std::vector<uint64_t>> phases = {{30000000, 15000000, 5000000},
                                                       {5000000, 15000000, 30000000},
                                                       {15000000, 5000000, 30000000}};
    uint64_t start = 0;
    auto samples = sampled([&] {
        start = mono_ns();
        send_steps(phases, 3.0);
    });
    expect_never_over(samples);
    auto use = two_second_windows(samples, start + 2000000000ull, start + 9000000000ull);
    ASSERT_GE(use.size(), 20u);
    double low = *std::ranges::min_element(use), mean = 0;
    for (double u : use)
        mean += u / static_cast<double>(use.size());
    std::printf("fleet CBS %llu: %zu windows of 2 s, green %.1f%% to %.1f%% of CIR, mean %.1f%%\n",
                static_cast<unsigned long long>(cbs), use.size(), low * 100,
                *std::ranges::max_element(use) * 100, mean * 100);
    for (auto &h : hosts) {
        auto f = fleet_policy_stats(*h)["fleet"];
        EXPECT_EQ(f["mode"], "fleet") << f.dump();
        EXPECT_EQ(f["failures"], 0) << f.dump();
        EXPECT_EQ(f["hosts_seen"], 3) << f.dump();
        std::printf("  %s\n", f.dump().c_str());
    }
    EXPECT_GE(low, 0.95);
}

INSTANTIATE_TEST_SUITE_P(Cbs, FleetMoving, ::testing::Values(65536, 1048576),
                         [](const auto &i) { return fmt::format("Cbs{}", i.param); });

// Three daemons under one node name (as hosts cloned from one image, or left at the default
// host name in a lab of namespaces, would be): one holds the name and leases; the two others
// are refused, say which instance holds it (log, status, metric) and run nothing, so the fleet's
// green stays within CBS + CIR*T at twice CIR. (Before instances, each ran the whole lease of
// the name: 1.8x CIR.) The same run under names of their own is FleetMoving's, >= 95% of CIR.
TEST_F(Fleet, ThreeDaemonsUnderOneNameRunOneLeaseAndTheOthersSayWhoHoldsIt) {
    cir = 24000000;
    cbs = 65536;
    start_hosts(3, "share", {}, "500", "same");
    auto samples = sampled([&] {
        send_steps({{30000000, 15000000, 5000000}, {5000000, 15000000, 30000000}}, 3.0);
    });
    expect_never_over(samples);
    const std::string holder = request(*hosts[0], {{"cmd", "status"}})["fleet"]["instance"];
    EXPECT_EQ(fleet_policy_stats(*hosts[0])["fleet"]["mode"], "fleet");
    EXPECT_EQ(request(*hosts[0], {{"cmd", "status"}})["fleet"]["name_held_by"], "");
    for (int i = 1; i < 3; ++i) {
        auto st = request(*hosts[i], {{"cmd", "status"}})["fleet"];
        EXPECT_EQ(st["name_held_by"], holder) << st.dump();
        EXPECT_NE(st["instance"], holder) << st.dump();
        EXPECT_EQ(st["name_collisions"], 1) << st.dump();
        // A refusal is Redis answering: no fallback for want of an answer (closed or not).
        EXPECT_EQ(st["fallbacks"], 0) << st.dump();
        auto f = fleet_policy_stats(*hosts[i])["fleet"];
        EXPECT_EQ(f["mode"], "name-held") << f.dump();
        EXPECT_EQ(f["lease_rate"], 0) << f.dump();
        EXPECT_EQ(fleet_policy_stats(*hosts[i])["green"]["bytes"], 0) << f.dump();
        const std::string log = hosts[i]->log();
        const std::string said = "is held by another live daemon (instance " + holder;
        ASSERT_NE(log.find(said), std::string::npos) << log;
        EXPECT_EQ(log.find(said, log.find(said) + 1), std::string::npos) << "said once: " << log;
        auto text = hosts[i]->ctl({"status"});
        EXPECT_NE(text.out.find("NAME IN USE"), std::string::npos) << text.out;
        auto st2 = request(*hosts[i], {{"cmd", "status"}});
        auto m = scrape_metrics(st2["metrics"].get<std::string>());
        EXPECT_NE(m.find("tricolor_fleet_name_held 1"), std::string::npos) << m;
    }
    // The holder's green is the fleet's: it used the limit alone.
    std::printf("holder %s: green %llu bytes\n", holder.c_str(),
                static_cast<unsigned long long>(green_bytes(*hosts[0])));
}

// A named host's daemon killed and started again (same name, a new instance) while the three
// send at twice CIR. The lease is 2 s, longer than a start here (0.5-0.8 s): the new daemon is
// refused its name while the old instance's lease is live (it says so), takes the name back at
// its first exchange after that lease (at most a lease after the kill, and a period), and the
// fleet's green never passes CBS + CIR*T through it. (The new daemon's fleet policy comes from
// its state file: before this test, a daemon restarted with one never leased again.)
TEST_F(Fleet, ARestartedHostTakesItsNameBackWithinALeaseAndTheBoundHolds) {
    cir = 24000000;
    cbs = 65536;
    start_hosts(3, "share", {}, "2000");
    uint64_t killed = 0, started = 0, back = 0;
    bool refused = false;
    auto samples = sampled([&] {
        std::thread restart([&] {
            std::this_thread::sleep_for(std::chrono::seconds(2));
            hosts[2]->kill9();
            killed = mono_ns();
            hosts[2]->start();
            started = mono_ns();
            for (int i = 0; i < 1000 && !back; ++i) {
                auto f = fleet_policy_stats(*hosts[2]);
                const std::string mode = f.contains("fleet") && f["fleet"].is_object()
                                             ? f["fleet"].value("mode", "")
                                             : "";
                refused |= mode == "name-held";
                if (mode == "fleet")
                    back = mono_ns();
                else
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
        });
        send_steps({{16000000, 16000000, 16000000}}, 6.0);
        restart.join();
    });
    expect_never_over(samples);
    ASSERT_GT(back, 0u) << fleet_policy_stats(*hosts[2]).dump() << hosts[2]->log();
    const double ms = static_cast<double>(back - killed) / 1e6;
    const double start_ms = static_cast<double>(started - killed) / 1e6;
    std::printf("name taken back %.0f ms after the kill (lease 2000 ms; the daemon answered "
                "after %.0f ms)\n",
                ms, start_ms);
    // The old instance's last exchange was before the kill: its lease ends within 2 s of it;
    // the new one's next exchange (a period, 50 ms, and a margin for this shared VM) takes it.
    EXPECT_LE(ms, std::max(2000.0, start_ms) + 2 * 50 + 150) << hosts[2]->log();
    const std::string log = hosts[2]->log();
    EXPECT_TRUE(refused) << "refused while the old instance's lease was live: " << log;
    EXPECT_NE(log.find("is held by another live daemon"), std::string::npos) << log;
    EXPECT_NE(log.find("is this daemon's now"), std::string::npos) << log;
    auto st = request(*hosts[2], {{"cmd", "status"}})["fleet"];
    EXPECT_EQ(st["name_held_by"], "") << st.dump();
    EXPECT_EQ(st["node"], "h2") << st.dump();
    EXPECT_EQ(st["name_collisions"], 1) << st.dump();
}

// A fleet policy the config file adds leases once SIGHUP applies it; one it removes stops
// (before this test, a reload told the fleet agent nothing: the first never leased).
TEST_F(Fleet, AFleetPolicyAReloadAddsLeasesAndOneItRemovesStops) {
    start_hosts(1);
    auto &d = *hosts[0];
    {
        std::ofstream(d.config()) << "policies:\n"
                                     "  - {name: fleet, algo: srtcm, cir: 8mbit, cbs: 100000, ebs: "
                                     "0, match: {proto: udp}, fleet: true}\n"
                                     "  - {name: second, algo: srtcm, cir: 8mbit, cbs: 100000, "
                                     "ebs: 0, match: {proto: tcp}, fleet: true}\n"
                                     "attachments:\n  - {iface: "
                                  << labs[0]->host_if << ", hook: xdp}\n";
    }
    d.hup();
    auto mode = [&](const std::string &name) {
        auto s = request(d, {{"cmd", "stats"}});
        for (const auto &p : s["policies"])
            if (p["name"] == name && p.contains("fleet") && p["fleet"].is_object())
                return p["fleet"].value("mode", "") + "/" +
                       std::to_string(p["fleet"].value("exchanges", 0));
        return std::string("none");
    };
    std::string m;
    for (int i = 0; i < 200 && !(m.starts_with("fleet/") && m != "fleet/0"); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        m = mode("second");
    }
    EXPECT_TRUE(m.starts_with("fleet/") && m != "fleet/0") << m << d.log();
    {
        std::ofstream(d.config()) << "policies:\n"
                                     "  - {name: fleet, algo: srtcm, cir: 8mbit, cbs: 100000, ebs: "
                                     "0, match: {proto: udp}, fleet: true}\n"
                                     "attachments:\n  - {iface: "
                                  << labs[0]->host_if << ", hook: xdp}\n";
    }
    d.hup();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(mode("second"), "none");
    // Redis hears no more of it: its last exchange's time stands still.
    auto seen = [&] { return redis.cli({"ZSCORE", "tricolor:{second}:seen", "h0"}); };
    const std::string before = seen();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(seen(), before);
    EXPECT_NE(before, "");
}

// Twelve hosts of a 12 Mbit/s limit: four ask 0.25 Mbit/s each, eight 2.5 each (21 in all).
// Max-min by demand (each asks a sixteenth more than it offers): the four get what they ask,
// 0.27 Mbit/s, the eight split the rest, 1.37 each; status shows each host's share.
TEST_F(Fleet, TwelveHostsShareMaxMinFairlyAndStatusShowsTheShares) {
    cir = 12000000;
    cbs = 120000;
    start_hosts(12);
    std::vector<uint64_t> offer(12, 2500000);
    for (int i = 0; i < 4; ++i)
        offer[i] = 250000;
    std::vector<json> seen(12);
    auto samples = sampled([&] {
        std::thread status([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(2500));
            for (int i = 0; i < 12; ++i)
                seen[i] = fleet_policy_stats(*hosts[i])["fleet"];
        });
        send_steps({offer}, 4.0);
        status.join();
    });
    expect_never_over(samples);
    uint64_t leased = 0;
    for (int i = 0; i < 12; ++i) {
        const auto &f = seen[i];
        std::printf("  host %d offers %.2f Mbit/s: lease %.3f Mbit/s, fair share %.3f\n", i,
                    offer[i] / 1e6, f["lease_rate"].get<double>() / 1e6,
                    f["fair_share"].get<double>() / 1e6);
        EXPECT_EQ(f["hosts_seen"], 12) << f.dump();
        double want = i < 4 ? 265625 : (12000000 - 4 * 265625) / 8.0;
        // The demand each host measures moves with its sender's pacing: a tenth either way.
        EXPECT_NEAR(f["fair_share"].get<double>(), want, want / 10) << f.dump();
        EXPECT_LE(f["lease_rate"].get<uint64_t>(), f["fair_share"].get<uint64_t>() + 1) << f.dump();
        leased += f["lease_rate"].get<uint64_t>();
    }
    EXPECT_LE(leased, cir);
    // And tricolorctl shows it.
    auto r = hosts[5]->ctl({"stats"});
    EXPECT_NE(r.out.find("fair share"), std::string::npos) << r.out;
}

// A host idle for 10 s while the others use the whole limit: its first 10 packets are green
// (its bucket filled at the floor its lease keeps); then iperf3 UDP starts on every host.
TEST_F(Fleet, AHostIdleForTenSecondsSendsItsFirstPacketsGreen) {
    cir = 24000000;
    cbs = 65536;
    start_hosts(3);
    send_steps({{30000000, 30000000, 0}}, 10.0);
    uint64_t before = green_bytes(*hosts[2]);
    auto &lab = *labs[2];
    auto r = lab.in_ns(
        {udp_tool_path(), "send", lab.host_v4, "9", "10", std::to_string(kPayload), "1000"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(green_bytes(*hosts[2]) - before, 10u * kIpBytes)
        << fleet_policy_stats(*hosts[2]).dump();

    // And iperf3's UDP test starts on each host after 1.5 s idle while the two others send at
    // 30 Mbit/s each (the fleet's CIR spent): its first datagram is a handshake, which an empty
    // bucket would drop ("unable to read from stream socket", as under the token grants of
    // before).
    if (run_command({"/bin/sh", "-c", "command -v iperf3"}).exit_code != 0)
        GTEST_SKIP() << "iperf3 is not installed";
    for (int i = 0; i < 3; ++i) {
        std::vector<uint64_t> offers(3, 30000000);
        offers[i] = 0;
        std::thread others([&] { send_steps({offers}, 3.0); });
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        const Lab &l = *labs[i];
        const std::string port = std::to_string(free_loopback_port());
        const std::string pid_file = fmt::format("/tmp/tricolor-e2e-fleet-iperf3-{}.pid", getpid());
        auto server = run_command({"/usr/bin/iperf3", "-s", "-1", "-D", "-B", l.host_v4, "-p", port,
                                   "--pidfile", pid_file});
        RunResult r;
        // Until the server listens (then the test itself: any failure is one).
        for (int tries = 0; server.exit_code == 0 && tries < 40; ++tries) {
            r = l.in_ns({"/usr/bin/iperf3", "-c", l.host_v4, "-p", port, "-u", "-b", "4M", "-l",
                         "1000", "-t", "1"});
            if ((r.out + r.err).find("unable to connect to server") == std::string::npos)
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        others.join();
        run_command(
            {"/bin/sh", "-c", "kill $(cat " + pid_file + ") 2>/dev/null; rm -f " + pid_file});
        ASSERT_EQ(server.exit_code, 0) << server.err;
        EXPECT_EQ(r.exit_code, 0) << "iperf3 UDP from host " << i << ": " << r.out << r.err;
    }
}

// Redis Cluster: three masters with a replica each, in a network namespace of their own; the
// hosts name the masters. The master of the policy's slot is killed 3 s into a run at twice the
// CIR: its replica is promoted (cluster-node-timeout 500 ms), the hosts find it through the
// slot map, and green never passes CBS + CIR*T, fallback included; from 2 s after the promotion
// on, every 2-s window uses at least 90% of CIR.
TEST_F(Fleet, ClusterMasterKilledMidRunTheBoundHoldsAndUseReturnsWithinTwoSeconds) {
    Lab redis_lab;
    RedisCluster cluster(3, 1, 500, redis_lab.ns_v4, redis_lab.ns);
    ASSERT_TRUE(cluster.start()) << cluster.why();
    url = cluster.url();
    cir = 24000000;
    cbs = 65536;
    start_hosts(3, "share", {}, "1000"); // the default lease
    const std::string key = "tricolor:{fleet}:lease";
    const int m = cluster.master_of(key), rep = cluster.replica_of(m);
    ASSERT_GE(m, 0);
    ASSERT_GE(rep, 0);
    auto node = [&](int i) {
        return redis_lab.ns_v4 + ":" + std::to_string(cluster.node(i).port());
    };
    uint64_t start = 0, killed = 0, promoted = 0;
    auto samples = sampled([&] {
        start = mono_ns();
        std::thread killer([&] {
            std::this_thread::sleep_for(std::chrono::seconds(3));
            cluster.node(m).stop();
            killed = mono_ns();
            while (!cluster.is_master(rep) && mono_ns() - killed < 10000000000ull)
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            promoted = mono_ns();
        });
        send_steps({{30000000, 15000000, 5000000}}, 10.0);
        killer.join();
    });
    ASSERT_TRUE(cluster.is_master(rep)) << "no replica was promoted";
    std::printf("master %s killed; replica %s promoted %.2f s later\n", node(m).c_str(),
                node(rep).c_str(), static_cast<double>(promoted - killed) / 1e9);
    expect_never_over(samples);
    auto use = two_second_windows(samples, promoted + 2000000000ull, start + 10000000000ull);
    ASSERT_GE(use.size(), 5u);
    double low = *std::ranges::min_element(use);
    std::printf("from 2 s after the promotion: %zu windows of 2 s, green at least %.1f%% of CIR\n",
                use.size(), low * 100);
    EXPECT_GE(low, 0.90);
    for (auto &h : hosts) {
        auto f = fleet_policy_stats(*h)["fleet"];
        EXPECT_EQ(f["mode"], "fleet") << f.dump();
        EXPECT_EQ(f["redis_node"], node(rep)) << f.dump();
        EXPECT_GT(f["failures"].get<int>(), 0) << f.dump();
        // Whatever a host did in the gap, its log says it.
        if (f["fallbacks"].get<int>() > 0) {
            EXPECT_NE(h->log().find("fallback 'share'"), std::string::npos) << h->log();
        }
        std::printf("  %s\n", f.dump().c_str());
    }
    EXPECT_EQ(request(*hosts[0], {{"cmd", "status"}})["fleet"]["redis_cluster"], true);
}

TEST_F(Fleet, RedisLostAndBackSwitchesToTheFallbackAndReturns) {
    start_hosts(2, "closed");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    redis.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1200)); // > lease (500 ms)
    for (auto &h : hosts) {
        auto f = request(*h, {{"cmd", "status"}})["fleet"];
        EXPECT_EQ(f["in_fallback"], true) << f.dump();
        EXPECT_GE(f["fallbacks"].get<int>(), 1);
    }
    // closed: nothing green while Redis is away.
    uint64_t before = green_bytes(*hosts[0]);
    send(0, 0.5);
    EXPECT_EQ(green_bytes(*hosts[0]), before);
    ASSERT_TRUE(redis.start());                                   // empty
    std::this_thread::sleep_for(std::chrono::milliseconds(1500)); // reconnect backoff
    for (auto &h : hosts) {
        auto f = request(*h, {{"cmd", "status"}})["fleet"];
        EXPECT_EQ(f["in_fallback"], false) << f.dump();
        EXPECT_GE(f["recoveries"].get<int>(), 1) << f.dump();
        EXPECT_NE(h->log().find("Redis answers again"), std::string::npos) << h->log();
    }
    send(0, 0.5);
    EXPECT_GT(green_bytes(*hosts[0]), before);
}

TEST_F(Fleet, DifferentCirOnTwoHostsTheFirstWriterWins) {
    start_hosts(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    start_hosts(1, "share", {2 * kCir}); // asks for another CIR
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto f = fleet_policy_stats(*hosts[1])["fleet"];
    EXPECT_EQ(f["parameters_differ"], true) << f.dump();
    EXPECT_EQ(f["fleet_cir"], kCir) << f.dump();
    EXPECT_NE(hosts[1]->log().find("the fleet's stand"), std::string::npos) << hosts[1]->log();
    EXPECT_EQ(fleet_policy_stats(*hosts[0])["fleet"]["parameters_differ"], false);
}

TEST_F(Fleet, AHostWhoseDaemonDiedSpendsNothingAfterItsLease) {
    start_hosts(1);
    send(0, 0.5);      // it holds tokens now
    hosts[0]->kill9(); // the data path keeps policing without the daemon
    std::this_thread::sleep_for(std::chrono::milliseconds(600)); // > lease (500 ms)
    auto &lab = *labs[0];
    // No daemon to ask: the counters are in the pinned maps; green must not move.
    auto green = [&] {
        auto r = run_command({"/usr/sbin/bpftool", "-j", "map", "dump", "pinned",
                              hosts[0]->pin_dir() + "/abi2/tcm_policy_stats"});
        return r.out;
    };
    std::string before = green();
    auto r = lab.in_ns(
        {udp_tool_path(), "send", lab.host_v4, "9", "200", std::to_string(kPayload), "2000"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Every packet after the lease was red: bytes[green] of every CPU unchanged.
    auto greens = [](const std::string &dump) {
        auto j = json::parse(dump, nullptr, false);
        uint64_t sum = 0;
        if (j.is_array())
            for (const auto &e : j) {
                // bpftool prints the BTF-formatted entry under "formatted".
                const auto &f = e.contains("formatted") ? e["formatted"] : e;
                for (const auto &v : f["values"])
                    if (v["value"].is_object())
                        sum += v["value"]["bytes"][0].get<uint64_t>();
            }
        return sum;
    };
    EXPECT_EQ(greens(green()), greens(before));
    EXPECT_GT(greens(before), 0u);
}

TEST(FleetInput, BadUrlUnreachableRedisAndFleetPolicyWithoutFleet) {
    TRICOLOR_REQUIRE_ROOT();
    // A malformed URL stops tricolord at once, naming the problem.
    auto r = run_command({tricolord_path(), "--fleet", "localhost:6379", "--socket",
                          "/tmp/tricolor-e2e-badurl.sock", "--metrics", "none"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("redis://"), std::string::npos) << r.err;

    // A fleet policy on a daemon in no fleet is refused.
    {
        Daemon d("nofleet");
        auto add = d.ctl({"policy", "add", "fleet", "--algo", "srtcm", "--cir", "1mbit", "--cbs",
                          "10k", "--fleet"});
        EXPECT_NE(add.exit_code, 0);
        EXPECT_NE(add.err.find("fleet needs tricolord --fleet"), std::string::npos) << add.err;
    }
    // Redis unreachable at start: the daemon starts, runs the fallback, keeps retrying.
    {
        auto port = free_loopback_port();
        Daemon d("unreachable", {"--fleet", fmt::format("redis://127.0.0.1:{}", port)});
        auto add = d.ctl({"policy", "add", "fleet", "--algo", "srtcm", "--cir", "1mbit", "--cbs",
                          "10k", "--fleet"});
        ASSERT_EQ(add.exit_code, 0) << add.err;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        auto f = request(d, {{"cmd", "status"}})["fleet"];
        EXPECT_EQ(f["in_fallback"], true) << f.dump();
        EXPECT_GT(f["failures"].get<int>(), 1) << f.dump();
        EXPECT_NE(d.log().find("Redis unreachable since start"), std::string::npos) << d.log();
    }
}

// ---- the benchmark (tests/bench/fleet_bench.sh runs it; not part of the suite) -------------

namespace {

uint64_t cpu_ticks(pid_t pid) {
    std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
    auto close = stat.rfind(')');
    std::istringstream in(stat.substr(close + 2));
    std::string f;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15; ++i) {
        in >> f;
        if (i == 14)
            utime = std::stoull(f);
        if (i == 15)
            stime = std::stoull(f);
    }
    return utime + stime;
}

std::string evalsha_stats(const RedisServer &r) {
    std::string out = r.cli({"INFO", "commandstats"});
    auto at = out.find("cmdstat_evalsha:");
    return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

// "usec_per_call=113.52" of an INFO commandstats line; -1 when absent.
double usec_per_call(const std::string &stats) {
    auto at = stats.find("usec_per_call=");
    return at == std::string::npos ? -1.0 : std::stod(stats.substr(at + 14));
}

} // namespace

TEST_F(Fleet, DISABLED_Bench) {
    // Three hosts, CIR 24 Mbit/s, twice that offered, the demand moving every 3 s through six
    // phases (the suite's case runs three): at a CBS of 10 ms of CIR and at one of 350 ms. No
    // host offers more than 30 Mbit/s: one udp_tool sender does not keep up much beyond that on
    // this machine (48 Mbit/s from one host came out at 22.4 green, all it sent).
    const std::vector<std::vector<uint64_t>> phases = {
        {30000000, 15000000, 5000000}, {5000000, 15000000, 30000000}, {15000000, 5000000, 30000000},
        {30000000, 5000000, 15000000}, {5000000, 30000000, 15000000}, {0, 30000000, 18000000}};
    for (uint64_t size : {65536ull, 1048576ull}) {
        hosts.clear();
        labs.clear();
        redis.stop();
        ASSERT_TRUE(redis.start());
        cir = 24000000;
        cbs = size;
        start_hosts(3, "share", {}, "1000"); // the default lease
        uint64_t cpu0 = cpu_ticks(redis.pid());
        std::vector<uint64_t> ex0;
        for (auto &h : hosts)
            ex0.push_back(request(*h, {{"cmd", "status"}})["fleet"]["exchanges"].get<uint64_t>());
        uint64_t t0 = 0;
        auto samples = sampled([&] {
            t0 = mono_ns();
            send_steps(phases, 3.0);
        });
        uint64_t t1 = samples.back().last_ns;
        double secs = static_cast<double>(t1 - t0) / 1e9;
        double cpu = static_cast<double>(cpu_ticks(redis.pid()) - cpu0) / sysconf(_SC_CLK_TCK);
        uint64_t ex = 0, fallbacks = 0, failures = 0;
        for (size_t i = 0; i < hosts.size(); ++i) {
            auto f = request(*hosts[i], {{"cmd", "status"}})["fleet"];
            ex += f["exchanges"].get<uint64_t>() - ex0[i];
            fallbacks += f["fallbacks"].get<uint64_t>();
            failures += f["failures"].get<uint64_t>();
        }
        expect_never_over(samples);
        bool held = !HasFailure();
        auto use = two_second_windows(samples, t0 + 2000000000ull,
                                      t0 + static_cast<uint64_t>(phases.size()) * 3000000000ull);
        ASSERT_FALSE(use.empty());
        double mean = 0;
        for (double u : use)
            mean += u / static_cast<double>(use.size());
        double low = *std::ranges::min_element(use);
        std::printf("BENCH CBS %llu: %.1f s at 2x CIR, demand moving every 3 s: %zu windows of "
                    "2 s after the first, green min %.1f%%, mean %.1f%% of CIR; never over: %s\n",
                    static_cast<unsigned long long>(size), secs, use.size(), low * 100, mean * 100,
                    held ? "held" : "broken");
        std::printf("RESULT name=fleet_use_cbs%llu seconds=%.1f windows=%zu min_pct=%.1f "
                    "mean_pct=%.1f never_over=%s pairs=%zu\n",
                    static_cast<unsigned long long>(size), secs, use.size(), low * 100, mean * 100,
                    held ? "held" : "broken", samples.size() * (samples.size() - 1) / 2);
        std::printf("RESULT name=fleet_load_cbs%llu exchanges_per_s_per_host=%.1f "
                    "redis_cpu_pct=%.1f evalsha_usec_per_call=%.1f failed=%llu fallbacks=%llu\n",
                    static_cast<unsigned long long>(size),
                    static_cast<double>(ex) / secs / static_cast<double>(hosts.size()),
                    cpu / secs * 100, usec_per_call(evalsha_stats(redis)),
                    static_cast<unsigned long long>(failures),
                    static_cast<unsigned long long>(fallbacks));
    }
    cir = kCir;
    cbs = kCbs;

    // Redis killed for 5 s and restarted, per fallback mode: demand on all three hosts
    // (2/3 CIR each, 2x CIR in all).
    for (std::string mode : {"share", "closed", "open"}) {
        hosts.clear();
        labs.clear();
        redis.stop();
        ASSERT_TRUE(redis.start());
        start_hosts(3, mode, {}, "1000");
        std::vector<std::thread> senders;
        for (int i = 0; i < 3; ++i)
            senders.emplace_back([&, i] { send(i, 12.0, kPps / 3); });
        std::this_thread::sleep_for(std::chrono::seconds(2));
        Sample before = sample();
        redis.stop();
        uint64_t killed = mono_ns();
        std::this_thread::sleep_for(std::chrono::seconds(5));
        Sample gap = sample();
        ASSERT_TRUE(redis.start());
        uint64_t back = mono_ns();
        uint64_t recovered = 0;
        for (int k = 0; k < 400 && !recovered; ++k) {
            bool all = true;
            for (auto &h : hosts)
                all = all && request(*h, {{"cmd", "status"}})["fleet"]["in_fallback"] == false;
            if (all)
                recovered = mono_ns();
            else
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        Sample after0 = sample();
        std::this_thread::sleep_for(std::chrono::seconds(2));
        Sample after = sample();
        for (auto &t : senders)
            t.join();
        double gap_s = static_cast<double>(gap.first_ns - killed) / 1e9;
        double in_gap = static_cast<double>(gap.green - before.green) * 8 /
                        (kCir * static_cast<double>(gap.last_ns - before.first_ns) / 1e9);
        double post = static_cast<double>(after.green - after0.green) * 8 /
                      (kCir * static_cast<double>(after.first_ns - after0.last_ns) / 1e9);
        std::printf("BENCH redis-down %s: green during the %.1f s gap %.1f%% of CIR*gap; back "
                    "to leasing %.0f ms after the restart; the next 2 s %.1f%% of CIR\n",
                    mode.c_str(), gap_s, in_gap * 100,
                    recovered ? static_cast<double>(recovered - back) / 1e6 : -1.0, post * 100);
        std::printf("RESULT name=fleet_redis_down_%s gap_s=%.1f gap_pct=%.1f back_ms=%.0f "
                    "next_2s_pct=%.1f\n",
                    mode.c_str(), gap_s, in_gap * 100,
                    recovered ? static_cast<double>(recovered - back) / 1e6 : -1.0, post * 100);
    }
}
