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

#include <atomic>
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

uint64_t mono_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

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
    void start_hosts(int n, const std::string &fallback = "share", std::vector<uint64_t> cirs = {},
                     const std::string &lease = "500") {
        for (int k = 0; k < n; ++k) {
            int i = static_cast<int>(hosts.size()); // names and nodes unique across calls
            labs.push_back(std::make_unique<Lab>());
            hosts.push_back(std::make_unique<Daemon>(
                fmt::format("fleet{}", i),
                std::vector<std::string>{"--fleet", redis.url(), "--fleet-node",
                                         fmt::format("h{}", i), "--fleet-fallback", fallback,
                                         "--fleet-lease", lease}));
            auto ctl = [&](std::vector<std::string> args) {
                auto r = hosts.back()->ctl(args);
                ASSERT_EQ(r.exit_code, 0) << r.err << hosts.back()->log();
            };
            ctl({"attach", labs.back()->host_if});
            uint64_t cir = k < static_cast<int>(cirs.size()) ? cirs[k] : kCir;
            ctl({"policy", "add", "fleet", "--algo", "srtcm", "--cir", std::to_string(cir), "--cbs",
                 std::to_string(kCbs), "--match", "proto", "udp", "--fleet"});
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
    RedisServer redis;
    std::vector<std::unique_ptr<Lab>> labs;
    std::vector<std::unique_ptr<Daemon>> hosts;
};

// Every pair of samples: green(j) - green(i) <= CBS + CIR * (last_j - first_i), exactly.
void expect_never_over(const std::vector<Sample> &samples) {
    for (size_t i = 0; i < samples.size(); ++i)
        for (size_t j = i + 1; j < samples.size(); ++j) {
            __int128 green = samples[j].green - samples[i].green;
            __int128 t = samples[j].last_ns - samples[i].first_ns;
            ASSERT_LE(green * 8 * 1000000000,
                      static_cast<__int128>(kCbs) * 8000000000 + static_cast<__int128>(kCir) * t)
                << "window " << i << ".." << j << ": " << static_cast<uint64_t>(green)
                << " green bytes in " << static_cast<double>(t) / 1e9 << " s";
        }
}

} // namespace

TEST_F(Fleet, ThreeHostsNeverOverAndUseTheLimitAsDemandMoves) {
    std::vector<Sample> samples;
    samples.push_back({mono_ns(), mono_ns(), 0}); // nothing is green before the hosts exist
    start_hosts(3);
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::thread sampler([&] {
        while (!stop) {
            Sample s = sample();
            {
                std::lock_guard l(mu);
                samples.push_back(s);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    });
    // Demand moves: host 0, then 1, then 2, 1.5 s each at 2x CIR; then 0 and 2 together at
    // CIR each.
    Sample start = sample();
    for (int i = 0; i < 3; ++i)
        send(i, 1.5);
    std::thread other([&] { send(2, 1.5, kPps / 2); });
    send(0, 1.5, kPps / 2);
    other.join();
    Sample end = sample();
    stop = true;
    sampler.join();
    samples.push_back(end);
    expect_never_over(samples);

    double secs = static_cast<double>(end.first_ns - start.last_ns) / 1e9;
    double use = static_cast<double>(end.green - start.green) * 8 / (kCir * secs);
    std::printf("fleet: %zu samples, %.2f s of traffic at 2x CIR, green %.1f%% of CIR\n",
                samples.size(), secs, use * 100);
    for (auto &h : hosts) {
        auto st = request(*h, {{"cmd", "status"}});
        auto f = st["fleet"];
        EXPECT_EQ(f["in_fallback"], false) << f.dump();
        EXPECT_EQ(f["failures"], 0) << f.dump();
        EXPECT_EQ(f["policies"]["fleet"]["hosts_seen"], 3) << f.dump();
        std::printf("  %s\n", f["policies"]["fleet"].dump().c_str());
    }
    // The goal is 95%; the test asks for 85% so that a loaded machine (the senders pace in
    // user space) does not fail it. tests/bench/fleet_bench.sh measures the figure.
    EXPECT_GE(use, 0.85);
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

// Green throughput over every 2 s window of @samples (samples every ~100 ms), as a fraction
// of CIR: the lowest, and the lowest of the windows that start within @after_ns of a move.
struct Use {
    double min = 1e9, min_after_move = 1e9, mean = 0;
};

Use windows(const std::vector<Sample> &s, const std::vector<uint64_t> &moves, uint64_t from,
            uint64_t to) {
    Use u;
    double sum = 0;
    int n = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i].first_ns < from)
            continue;
        for (size_t j = i + 1; j < s.size(); ++j) {
            if (s[j].last_ns > to)
                break;
            double t = static_cast<double>(s[j].first_ns - s[i].last_ns) / 1e9;
            if (t < 2.0)
                continue;
            double use = static_cast<double>(s[j].green - s[i].green) * 8 / (kCir * t);
            if (use < 0.95)
                std::printf("BENCH window at +%.1f s: %.1f%%\n",
                            static_cast<double>(s[i].first_ns - from) / 1e9, use * 100);
            u.min = std::min(u.min, use);
            for (uint64_t m : moves)
                if (s[i].first_ns >= m && s[i].first_ns < m + 1000000000ull)
                    u.min_after_move = std::min(u.min_after_move, use);
            sum += use;
            ++n;
            break;
        }
    }
    u.mean = n ? sum / n : 0;
    return u;
}

} // namespace

TEST_F(Fleet, DISABLED_Bench) {
    const double phase = 3.0;
    start_hosts(3, "share", {}, "1000"); // the default lease
    std::vector<Sample> samples{{mono_ns(), mono_ns(), 0}};
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::thread sampler([&] {
        while (!stop) {
            Sample s = sample();
            {
                std::lock_guard l(mu);
                samples.push_back(s);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
    uint64_t cpu0 = cpu_ticks(redis.pid());
    std::vector<uint64_t> ex0;
    for (auto &h : hosts)
        ex0.push_back(request(*h, {{"cmd", "status"}})["fleet"]["exchanges"].get<uint64_t>());
    uint64_t t0 = mono_ns();
    std::vector<uint64_t> moves;
    // One host at a time, then two at CIR each, then back to one: demand moves every phase.
    for (int i : {0, 1, 2, 0}) {
        moves.push_back(mono_ns());
        send(i, phase);
    }
    moves.push_back(mono_ns());
    std::thread other([&] { send(1, phase, kPps / 2); });
    send(2, phase, kPps / 2);
    other.join();
    uint64_t t1 = mono_ns();
    stop = true;
    sampler.join();
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
    Use u = windows(samples, moves, t0, t1);
    std::printf("BENCH use: %.2f s at 2x CIR, demand moving every %.0f s: 2 s windows "
                "min %.1f%%, mean %.1f%%, min of windows starting within 1 s after a move "
                "%.1f%%\n",
                secs, phase, u.min * 100, u.mean * 100, u.min_after_move * 100);
    std::printf("BENCH load: %.1f exchanges/s per host, Redis CPU %.1f%% of a core (%s); "
                "%llu failed exchanges, %llu fallbacks\n",
                static_cast<double>(ex) / secs / hosts.size(), cpu / secs * 100,
                evalsha_stats(redis).c_str(), static_cast<unsigned long long>(failures),
                static_cast<unsigned long long>(fallbacks));
    // The same figures for the docs (tests/bench/figures.py).
    std::printf("RESULT name=fleet_use seconds=%.2f min_pct=%.1f mean_pct=%.1f "
                "min_after_move_pct=%.1f never_over=%s pairs=%zu\n",
                secs, u.min * 100, u.mean * 100, u.min_after_move * 100, held ? "held" : "broken",
                samples.size() * (samples.size() - 1) / 2);
    std::printf("RESULT name=fleet_load exchanges_per_s_per_host=%.1f redis_cpu_pct=%.1f "
                "evalsha_usec_per_call=%.1f failed=%llu fallbacks=%llu\n",
                static_cast<double>(ex) / secs / hosts.size(), cpu / secs * 100,
                usec_per_call(evalsha_stats(redis)), static_cast<unsigned long long>(failures),
                static_cast<unsigned long long>(fallbacks));

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
