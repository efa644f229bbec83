// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// shape_e2e_test.cpp: --shape sockets and edt (docs/spec.md §8) with the real daemon. The test's
// own TCP sockets, in the root namespace, connect to a listener in the lab's namespace through the
// veth where tricolor is attached on tc egress; their pacing rate is read back with
// getsockopt(SO_MAX_PACING_RATE). Mechanism, not speed: the one throughput check is a loose
// floor against the hard policer (exact figures: tests/bench/tcp_bench.sh). The Edt cases put
// fq on that veth and skip where the kernel has no sch_fq (tricolor.sh test-kernels runs them
// in Debian's 6.1, which has it).
#include "lab.hpp"
#include "tricolor/datapath.hpp"

#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace tricolor::test {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr uint32_t kUnpaced = 0xffffffffu;

// A listening socket created inside @ns (a thread enters the namespace, makes the socket, and
// ends: the socket stays in the namespace).
int listen_in_ns(const std::string &ns, const std::string &addr, uint16_t port) {
    int fd = -1;
    std::thread t([&] {
        int nsfd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
        if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0)
            return;
        close(nsfd);
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(port);
        inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
        if (bind(s, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) != 0 || listen(s, 16) != 0) {
            close(s);
            return;
        }
        fd = s;
    });
    t.join();
    return fd;
}

int connect_to(const std::string &addr, uint16_t port) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
    if (connect(s, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) != 0) {
        close(s);
        return -1;
    }
    return s;
}

uint32_t pacing(int fd) {
    uint32_t v = 0;
    socklen_t len = sizeof(v);
    getsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v, &len);
    return v;
}

// The two rates a paced socket switches between around its share (bpf/lib/shape.h): under it
// while its bucket is under half full, over it while the bucket is at least half full.
struct Share {
    uint32_t lo, hi;
};
constexpr Share kUnpacedShare{kUnpaced, kUnpaced};

bool paced_at(uint32_t v, Share s) {
    return v == s.lo || v == s.hi;
}

MATCHER_P(IsPacedAt, share, "") {
    *result_listener << "(pacing " << share.lo << " or " << share.hi << ")";
    return paced_at(arg, share);
}

// Until its first ten segments are out a socket is paced at a quarter of that rate (under a
// quarter full, the eighth less too).
MATCHER_P(IsStartingAt, share, "") {
    *result_listener << "(pacing " << (share.lo >> 2) << " or " << (share.hi >> 2) << ")";
    return arg == share.lo >> 2 || arg == share.hi >> 2 || arg == (share.lo - (share.lo >> 3)) >> 2;
}

tcp_info tcp_info_of(int fd) {
    tcp_info ti{};
    socklen_t len = sizeof(ti);
    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len);
    return ti;
}

// Sends @bytes at a time on @fd (the peer @peer reads them) every 20 ms until @want(pacing
// rate) or 5 s (scaled) pass: a socket re-reads its share and its bucket on its RTT callbacks,
// so it needs ACKs.
template <class Want>
uint32_t pacing_after_traffic(int fd, int peer, Want want, size_t bytes) {
    char buf[4096] = {};
    bytes = std::min(bytes, sizeof(buf));
    auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(int(5000 * time_scale()));
    uint32_t v = pacing(fd);
    while (!want(v) && std::chrono::steady_clock::now() < deadline) {
        (void)!send(fd, buf, bytes, MSG_DONTWAIT);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        while (recv(peer, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
        }
        v = pacing(fd);
    }
    return v;
}

uint32_t pacing_after_traffic(int fd, int peer, Share want) {
    return pacing_after_traffic(
        fd, peer, [&](uint32_t v) { return paced_at(v, want); }, 4096);
}

json policy_stats(const Daemon &d, const std::string &name) {
    return json::parse(d.ctl({"-j", "stats", name}).out)["policies"][0];
}

class Shape : public DaemonLabTest {
  protected:
    void SetUp() override {
        DaemonLabTest::SetUp();
        ASSERT_EQ(daemon->ctl({"attach", lab->host_if, "--hook", "tc", "--direction", "egress"})
                      .exit_code,
                  0);
    }

    // An iperf3 server in the lab's namespace, killed when the test ends: after a failed
    // assertion too, so that the next case finds its port free.
    void start_iperf_server() {
        auto server = lab->in_ns({"/usr/bin/iperf3", "-s", "-D", "--pidfile", kIperfPid});
        ASSERT_EQ(server.exit_code, 0) << server.err;
        iperf_server_ = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(int(300 * time_scale())));
    }
    void TearDown() override {
        if (iperf_server_)
            run_command({"/bin/sh", "-c", std::string("kill $(cat ") + kIperfPid + ")"});
        DaemonLabTest::TearDown();
    }
    static constexpr const char *kIperfPid = "/tmp/tricolor-e2e-shape-iperf3.pid";
    bool iperf_server_ = false;

    // A srtcm policy on the lab's address with --shape sockets.
    void add_sockets_policy(const std::string &name, const std::string &cir,
                            const std::string &cbs) {
        ASSERT_EQ(daemon
                      ->ctl({"policy", "add", name, "--algo", "srtcm", "--cir", cir, "--cbs", cbs,
                             "--match", "dst", lab->ns_v4 + "/32", "--shape", "sockets"})
                      .exit_code,
                  0);
    }

    // A TCP connection from here to the lab's namespace: the listener, this end, the far end.
    struct Conn {
        int lst = -1, a = -1, pa = -1;
    };
    void connect_pair(uint16_t port, Conn *c) {
        c->lst = listen_in_ns(lab->ns, lab->ns_v4, port);
        ASSERT_GE(c->lst, 0);
        c->a = connect_to(lab->ns_v4, port);
        ASSERT_GE(c->a, 0);
        c->pa = accept(c->lst, nullptr, nullptr);
    }

    Share share_of(const std::string &cir, int sockets) {
        Policy p;
        p.meter.cir = std::stoull(cir);
        uint64_t share = shape_payload_rate(p) / sockets;
        return {static_cast<uint32_t>(share - share / 32),
                static_cast<uint32_t>(share + share / 64)};
    }
};

// Sends @bytes on @fd, read on @peer: enough makes a socket active in its policy's share.
void pump(int fd, int peer, size_t bytes, const std::function<void()> &each = {}) {
    char buf[16384] = {};
    size_t sent = 0, got = 0;
    auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(int(5000 * time_scale()));
    while (got < bytes && std::chrono::steady_clock::now() < deadline) {
        if (sent < bytes) {
            ssize_t n = send(fd, buf, std::min(sizeof(buf), bytes - sent), MSG_DONTWAIT);
            if (n > 0)
                sent += static_cast<size_t>(n);
        }
        ssize_t n = recv(peer, buf, sizeof(buf), MSG_DONTWAIT);
        if (each)
            each();
        if (n > 0)
            got += static_cast<size_t>(n);
        else
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // the last ACKs
}

TEST_F(Shape, PacesOnlyMatchingSocketsAndResharesAmongActiveOnes) {
    ASSERT_EQ(daemon
                  ->ctl({"policy",   "add",    "tcp", "--algo",  "srtcm", "--cir",
                         "20000000", "--cbs",  "64k", "--match", "dst",   lab->ns_v4 + "/32",
                         "--match",  "proto",  "tcp", "--match", "dport", "5201",
                         "--shape",  "sockets"})
                  .exit_code,
              0)
        << daemon->log();
    int lst = listen_in_ns(lab->ns, lab->ns_v4, 5201);
    int other = listen_in_ns(lab->ns, lab->ns_v4, 5202);
    ASSERT_GE(lst, 0);
    ASSERT_GE(other, 0);
    auto sockets = [&] {
        auto r = daemon->ctl({"-j", "stats", "tcp"});
        return json::parse(r.out)["policies"][0]["shape"]["sockets"].get<uint64_t>();
    };

    // One matching socket: the whole rate. Its peer (a socket in the namespace, whose packets
    // go the other way) and a socket to another port are not paced.
    int a = connect_to(lab->ns_v4, 5201);
    ASSERT_GE(a, 0);
    int pa = accept(lst, nullptr, nullptr);
    EXPECT_THAT(pacing(a), IsStartingAt(share_of("20000000", 1)));
    EXPECT_EQ(pacing(pa), kUnpaced);
    int o = connect_to(lab->ns_v4, 5202);
    int po = accept(other, nullptr, nullptr);
    EXPECT_EQ(pacing(o), kUnpaced);
    // Active once it has sent 16 KiB.
    EXPECT_EQ(sockets(), 0u);
    pump(a, pa, 256 * 1024);
    EXPECT_EQ(sockets(), 1u);
    EXPECT_THAT(pacing(a), IsPacedAt(share_of("20000000", 1)));

    // A second: paced at the half it would have; an idle one takes nothing from the first.
    int b = connect_to(lab->ns_v4, 5201);
    int pb = accept(lst, nullptr, nullptr);
    EXPECT_THAT(pacing(b), IsStartingAt(share_of("20000000", 2)));
    EXPECT_THAT(pacing_after_traffic(a, pa, share_of("20000000", 1)),
                IsPacedAt(share_of("20000000", 1)));
    // Once it sends, both get half, the first as soon as it sees an ACK.
    pump(b, pb, 256 * 1024);
    EXPECT_EQ(sockets(), 2u);
    EXPECT_THAT(pacing(b), IsPacedAt(share_of("20000000", 2)));
    EXPECT_THAT(pacing_after_traffic(a, pa, share_of("20000000", 2)),
                IsPacedAt(share_of("20000000", 2)));

    // The second closes (and its peer, so it is gone for good): the first gets it all back.
    close(b);
    close(pb);
    EXPECT_THAT(pacing_after_traffic(a, pa, share_of("20000000", 1)),
                IsPacedAt(share_of("20000000", 1)));
    EXPECT_EQ(sockets(), 1u);
    EXPECT_THAT(daemon->ctl({"stats"}).out, HasSubstr("paced sockets 1"));

    // A rate change re-paces the live socket; shape off unpaces it.
    ASSERT_EQ(daemon->ctl({"policy", "set", "tcp", "--cir", "40000000"}).exit_code, 0);
    EXPECT_THAT(pacing_after_traffic(a, pa, share_of("40000000", 1)),
                IsPacedAt(share_of("40000000", 1)));
    ASSERT_EQ(daemon->ctl({"policy", "set", "tcp", "--shape", "off"}).exit_code, 0);
    EXPECT_EQ(pacing_after_traffic(a, pa, kUnpacedShare), kUnpaced);
    for (int fd : {a, pa, o, po, lst, other})
        close(fd);
}

// At a round trip short beside the bucket the congestion window is clamped to the full
// segments half the bucket holds, so that no TSO chunk outgrows the bucket: CBS 16 KiB,
// 1500-byte segments: 5, the initial window too (a socket of no shaped policy starts at Linux's
// 10). Short: the share sends under a sixteenth of half the bucket in one smoothed RTT, i.e.
// under ~210 us at 20 Mbit/s. A veth here is tens of microseconds (clamped); in the emulated
// guest it is longer (no clamp): the test reads the socket's RTT and expects what it implies
// (after the transfer only where it was short throughout: a clamp set or lifted midway leaves
// the window where it was until it grows again).
TEST_F(Shape, ShortRoundTripClampsTheWindowToHalfTheBucket) {
    ASSERT_EQ(daemon
                  ->ctl({"policy", "add", "small", "--algo", "srtcm", "--cir", "20mbit", "--cbs",
                         "16k", "--match", "dst", lab->ns_v4 + "/32", "--match", "dport", "5205",
                         "--shape", "sockets"})
                  .exit_code,
              0);
    int ls = listen_in_ns(lab->ns, lab->ns_v4, 5205), lo = listen_in_ns(lab->ns, lab->ns_v4, 5206);
    ASSERT_GE(ls, 0);
    ASSERT_GE(lo, 0);
    int a = connect_to(lab->ns_v4, 5205), o = connect_to(lab->ns_v4, 5206);
    ASSERT_GE(a, 0);
    ASSERT_GE(o, 0);
    int pa = accept(ls, nullptr, nullptr), po = accept(lo, nullptr, nullptr);
    const uint64_t c_half = (16384 * TCM_TOKENS_PER_BYTE / 2) | 1;
    const uint64_t rate_lo = share_of("20000000", 1).lo;
    auto is_short = [&](uint32_t rtt_us) {
        return uint64_t{rtt_us} * rate_lo <= c_half >> TCM_SHAPE_SHORT_RTT_SHIFT;
    };
    tcp_info ti = tcp_info_of(a);
    const bool short_from_start = is_short(ti.tcpi_rtt);
    RecordProperty("rtt_us", std::to_string(ti.tcpi_rtt));
    EXPECT_EQ(ti.tcpi_snd_cwnd, short_from_start ? 5u : 10u) << "srtt " << ti.tcpi_rtt << " us";
    EXPECT_EQ(tcp_info_of(o).tcpi_snd_cwnd, 10u);
    // The round trip is read throughout: under load (a busy CI machine) it can go long for a
    // while, the clamp lifts and the window grows, and red follows. That is the design (no clamp
    // at a long round trip), not what this test is about, so only a run short throughout is held
    // to the clamp (25 runs beside two busy loops: red > 0 in exactly the 5 whose RTT crossed).
    uint32_t max_rtt = ti.tcpi_rtt, max_cwnd = ti.tcpi_snd_cwnd;
    pump(a, pa, 256 * 1024, [&] {
        tcp_info t = tcp_info_of(a);
        max_rtt = std::max(max_rtt, t.tcpi_rtt);
        max_cwnd = std::max(max_cwnd, t.tcpi_snd_cwnd);
    });
    ti = tcp_info_of(a);
    max_rtt = std::max(max_rtt, ti.tcpi_rtt);
    RecordProperty("max_rtt_us", std::to_string(max_rtt));
    if (short_from_start && is_short(max_rtt)) {
        EXPECT_LE(max_cwnd, 5u) << "srtt up to " << max_rtt << " us";
        EXPECT_EQ(policy_stats(*daemon, "small")["red"]["packets"].get<uint64_t>(), 0u);
        // Its policy gone, the socket is no longer shaped: the clamp goes too. (Which of the
        // socket's reads lifts it depends on whether an ACK falls between the daemon's shape
        // update and its policy-set switch; both orders lift it.)
        ASSERT_EQ(daemon->ctl({"policy", "del", "small"}).exit_code, 0);
        pump(a, pa, 4 * 1024 * 1024);
        EXPECT_GT(tcp_info_of(a).tcpi_snd_cwnd, 5u);
    }
    for (int fd : {a, pa, o, po, ls, lo})
        close(fd);
}

// The pace follows the bucket: over the share while the policy's bucket is at least half full,
// under it once other traffic of the policy (UDP here, which no pacing slows) has emptied it, and
// over it again when it has refilled. CIR 512 kbit/s, CBS 64 KiB: half the bucket refills in
// half a second, so a socket sending 1 KB every 20 ms reads it under half for that long (nothing
// slow, such as a CLI call, between the emptying and that reading: in an emulated guest it
// takes longer than that).
TEST_F(Shape, PaceFollowsTheBucketsLevel) {
    ASSERT_NO_FATAL_FAILURE(add_sockets_policy("pace", "512kbit", "64k"));
    Conn c;
    ASSERT_NO_FATAL_FAILURE(connect_pair(5204, &c));
    const int a = c.a, pa = c.pa;
    const Share share = share_of("512000", 1);
    auto is = [](uint32_t want) { return [want](uint32_t v) { return v == want; }; };
    auto red = [&] { return policy_stats(*daemon, "pace")["red"]["packets"].get<uint64_t>(); };

    std::this_thread::sleep_for(std::chrono::milliseconds(1200)); // full
    EXPECT_EQ(pacing_after_traffic(a, pa, is(share.hi), 1024), share.hi);

    // 100 datagrams of 1428 IP bytes, 143 KB into a 64 KiB bucket: empty, the rest red.
    auto r = run_command({udp_tool_path(), "send", lab->ns_v4, "9000", "100", "1400"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::this_thread::sleep_for(std::chrono::milliseconds(30)); // tokens for a green 1 KB
    EXPECT_EQ(pacing_after_traffic(a, pa, is(share.lo), 1024), share.lo);
    EXPECT_GT(red(), 0u);

    std::this_thread::sleep_for(std::chrono::milliseconds(1200)); // full again
    EXPECT_EQ(pacing_after_traffic(a, pa, is(share.hi), 1024), share.hi);
    for (int fd : {c.a, c.pa, c.lst})
        close(fd);
}

TEST_F(Shape, ARestartedDaemonKeepsPacing) {
    ASSERT_NO_FATAL_FAILURE(add_sockets_policy("tcp", "20000000", "64k"));
    daemon->kill9();
    daemon->start(); // adopts the pinned maps and swaps its sock_ops program into the pinned link
    Conn c;
    ASSERT_NO_FATAL_FAILURE(connect_pair(5203, &c));
    EXPECT_THAT(pacing(c.a), IsStartingAt(share_of("20000000", 1)));
    pump(c.a, c.pa, 256 * 1024);
    EXPECT_THAT(pacing(c.a), IsPacedAt(share_of("20000000", 1)));
    EXPECT_EQ(
        json::parse(daemon->ctl({"-j", "stats", "tcp"}).out)["policies"][0]["shape"]["sockets"], 1);
    for (int fd : {c.a, c.pa, c.lst})
        close(fd);
}

TEST_F(Shape, RefusedWhereItCannotWork) {
    // XDP only: the daemon says why.
    Lab xdp_lab;
    Daemon x{"shape-xdp"};
    ASSERT_EQ(x.ctl({"attach", xdp_lab.host_if}).exit_code, 0);
    auto r = x.ctl({"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k",
                    "--shape", "sockets"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("tc egress"));
    // edt without fq names the command that fixes it.
    r = daemon->ctl({"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k",
                     "--shape", "edt"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("tc qdisc replace dev " + lab->host_if + " root fq"));
    // Bad values and impossible combinations.
    r = daemon->ctl({"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k",
                     "--shape", "fast"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("not off, sockets or edt"));
    r = daemon->ctl({"policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "16k",
                     "--match", "proto", "udp", "--shape", "sockets"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("paces TCP"));
}

// --aqm on XDP ingress with UDP from the namespace: 100 datagrams of 100 IP bytes into an
// 8000-byte bucket that does not refill; the one early drop (at 6/8) is in stats -j, the table
// and the metrics, and the colours are what they would be without it.
TEST_F(Shape, AqmCountersInStatsTableAndMetrics) {
    ASSERT_EQ(daemon->ctl({"attach", lab->host_if}).exit_code, 0);
    ASSERT_EQ(daemon
                  ->ctl({"policy", "add", "udp", "--algo", "srtcm", "--cir", "8bit", "--cbs",
                         "8000", "--match", "proto", "udp", "--aqm", "drop"})
                  .exit_code,
              0);
    auto r = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", "100", "72"});
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    auto s = json::parse(daemon->ctl({"-j", "stats", "udp"}).out)["policies"][0];
    EXPECT_EQ(s["green"]["packets"], 80);
    EXPECT_EQ(s["red"]["packets"], 20);
    EXPECT_EQ(s["aqm"]["dropped"]["packets"], 1);
    EXPECT_EQ(s["aqm"]["dropped"]["bytes"], 100);
    EXPECT_EQ(s["aqm"]["marked"]["packets"], 0);
    EXPECT_EQ(s["shape"]["sockets"], 0);
    EXPECT_THAT(daemon->ctl({"stats"}).out, HasSubstr("aqm marked 0 dropped 1 pkts"));
    auto status = json::parse(daemon->ctl({"-j", "status"}).out);
    std::string body = scrape_metrics(status["metrics"]);
    EXPECT_THAT(body, HasSubstr("tricolor_tcp_signal_packets_total{action=\"aqm_dropped\",parent="
                                "\"\",policy=\"udp\"} 1"));
    EXPECT_THAT(body, HasSubstr("tricolor_shape_sockets{parent=\"\",policy=\"udp\"} 0"));

    // A new policy on the id this one leaves starts from zero, these counters too.
    ASSERT_EQ(daemon->ctl({"policy", "del", "udp"}).exit_code, 0);
    ASSERT_EQ(daemon
                  ->ctl({"policy", "add", "udp2", "--algo", "srtcm", "--cir", "8bit", "--cbs",
                         "8000", "--match", "proto", "udp", "--aqm", "drop"})
                  .exit_code,
              0);
    s = json::parse(daemon->ctl({"-j", "stats", "udp2"}).out)["policies"][0];
    EXPECT_EQ(s["green"]["packets"], 0);
    EXPECT_EQ(s["aqm"]["dropped"]["packets"], 0);
}

// iperf3 from this namespace to the lab's, through tc egress: goodput in bit/s.
double iperf_goodput(const Lab &lab, int seconds) {
    auto r = run_command(
        {"/usr/bin/iperf3", "-C", "cubic", "-c", lab.ns_v4, "-t", std::to_string(seconds), "-J"});
    if (r.exit_code != 0)
        return -1;
    return json::parse(r.out)["end"]["sum_received"]["bits_per_second"].get<double>();
}

TEST_F(Shape, TcpThroughTcEgressGetsFarMoreThanWithTheHardPolicer) {
    if (run_command({"/bin/sh", "-c", "command -v iperf3"}).exit_code != 0)
        GTEST_SKIP() << "iperf3 is not installed";
    ASSERT_NO_FATAL_FAILURE(start_iperf_server());
    ASSERT_EQ(daemon
                  ->ctl({"policy", "add", "tcp", "--algo", "srtcm", "--cir", "20mbit", "--cbs",
                         "16k", "--match", "dst", lab->ns_v4 + "/32", "--match", "proto", "tcp"})
                  .exit_code,
              0);
    auto red = [&] { return policy_stats(*daemon, "tcp")["red"]["packets"].get<uint64_t>(); };
    double hard = iperf_goodput(*lab, 3);
    uint64_t red_hard = red();
    ASSERT_EQ(daemon->ctl({"policy", "set", "tcp", "--shape", "sockets"}).exit_code, 0);
    double shaped = iperf_goodput(*lab, 3);
    uint64_t red_shaped = red() - red_hard;
    RecordProperty("hard_mbit", std::to_string(hard / 1e6));
    RecordProperty("shaped_mbit", std::to_string(shaped / 1e6));
    // Loose: the benchmark measures ≥ 95% on an idle machine.
    EXPECT_GT(shaped, 0.5 * 20e6) << "hard " << hard / 1e6 << " Mbit/s";
    EXPECT_GT(shaped, 3 * hard) << "hard " << hard / 1e6 << " Mbit/s";
    // One flow through 16 KiB at a veth's round trip: its start (the unpaced first ten
    // segments, then a TSO chunk larger than the bucket) cost a red segment and a 200 ms stall
    // before the quarter-rate start and the window clamp. A pacing timer that fires late (an
    // emulated guest; a busy machine, where the round trip also crosses the clamp's line and
    // the window grows, ShortRoundTripClampsTheWindowToHalfTheBucket) sends a backlog the
    // bucket does not hold: a few red segments are allowed (8 in a CI run here, against the
    // hard policer's 115); none on an idle machine.
    EXPECT_LE(red_shaped, 16u) << "hard " << red_hard << " red";
}

// Four flows that start at once through 16 KiB at a veth's round trip: their first ten
// segments each are unpaced, more than the bucket holds, and a socket refused with nothing in
// flight would wait for its zero-window probe (200 ms or more; all four did, together). A red
// packet of several segments from such a socket is dropped as a lost one instead (shape.h,
// shape_tc_drop): TCP recovers it with a retransmission, which a refusal never causes. So the
// senders retransmit here, where before they stalled with none.
TEST_F(Shape, StartsThatMeetRedAreLostNotRefused) {
    if (run_command({"/bin/sh", "-c", "command -v iperf3"}).exit_code != 0)
        GTEST_SKIP() << "iperf3 is not installed";
    if (time_scale() > 1)
        GTEST_SKIP() << "whether a start meets red with nothing in flight depends on timing "
                        "an emulated CPU does not keep";
    ASSERT_NO_FATAL_FAILURE(start_iperf_server());
    ASSERT_NO_FATAL_FAILURE(add_sockets_policy("starts", "20mbit", "16k"));
    auto r = run_command(
        {"/usr/bin/iperf3", "-C", "cubic", "-c", lab->ns_v4, "-P", "4", "-t", "2", "-J"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto end = json::parse(r.out)["end"];
    uint64_t retransmits = end["sum_sent"]["retransmits"].get<uint64_t>();
    uint64_t red = policy_stats(*daemon, "starts")["red"]["packets"].get<uint64_t>();
    RecordProperty("red", std::to_string(red));
    RecordProperty("retransmits", std::to_string(retransmits));
    ASSERT_GT(red, 0u) << "no red segment: the case tests nothing";
    EXPECT_GT(retransmits, 0u) << red << " red packets, every one refused";
    // Loose: the benchmark measures the goodput.
    EXPECT_GT(end["sum_received"]["bits_per_second"].get<double>(), 0.5 * 20e6);
}

// A red drop on the sender's host is a refused transmit, and Linux answers it as it answers a
// loss: CWR, ssthresh to 0.7 of the window. In slow start at a long round trip that left four
// flows sharing 16 KiB at 63% of CIR for a whole benchmark run (CUBIC then regrows about one
// segment per RTT). Pacing, not the window, holds a shaped socket to its share, so a socket whose
// ssthresh fell under two bandwidth-delay products of its share without a retransmission or a
// CE mark gets it back (shape.h). Here: four flows, RTT 100 ms (the delay line, in
// shape_long_rtt.sh), whose starts meet red; five seconds in, every data socket's ssthresh is
// unbounded or over one and a half such products.
TEST(ShapeLongRtt, LocalRefusalsDoNotEndSlowStart) {
    if (run_command({"/bin/sh", "-c", "command -v iperf3"}).exit_code != 0)
        GTEST_SKIP() << "iperf3 is not installed";
    if (time_scale() > 1)
        GTEST_SKIP() << "four 20 Mbit/s flows through a delay line need a machine at full speed";
    auto r = run_command({TRICOLOR_SOURCE_DIR "/tests/e2e/shape_long_rtt.sh", TRICOLOR_SOURCE_DIR,
                          TRICOLOR_BINARY_DIR});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::istringstream lines(r.out);
    std::string line;
    int sockets = 0;
    uint64_t red = 0;
    while (std::getline(lines, line)) {
        unsigned long long ssthresh = 0, mss = 0, rtt_us = 0;
        if (sscanf(line.c_str(), "socket ssthresh=%llu mss=%llu rtt_us=%llu", &ssthresh, &mss,
                   &rtt_us) == 3) {
            sockets++;
            const double share_bdp = 20e6 / 8 / 4 * rtt_us / 1e6; // bytes
            EXPECT_TRUE(ssthresh == 0 || ssthresh * mss >= 1.5 * share_bdp)
                << line << " (share's BDP " << share_bdp << " bytes)";
        } else if (sscanf(line.c_str(), "red %llu", &ssthresh) == 1) {
            red = ssthresh;
        }
    }
    RecordProperty("red", std::to_string(red));
    EXPECT_EQ(sockets, 4) << r.out;
    EXPECT_GT(red, 0u) << "no refusal: the case tests nothing\n" << r.out;
}

// --shape edt needs fq as the egress qdisc: on the veth, or a skip where the kernel lacks it.
#define REQUIRE_FQ(lab)                                                                            \
    do {                                                                                           \
        auto fq =                                                                                  \
            run_command({"/sbin/tc", "qdisc", "replace", "dev", (lab).host_if, "root", "fq"});     \
        if (fq.exit_code != 0)                                                                     \
            GTEST_SKIP() << "no sch_fq in this kernel (tc qdisc replace ... root fq: " << fq.err   \
                         << "): shape edt needs it; ./tricolor.sh test-kernels runs this case "    \
                            "under Debian's 6.1, which has it";                                    \
    } while (0)

uint64_t passed_bytes(const json &s) {
    return s["green"]["bytes"].get<uint64_t>() + s["yellow"]["bytes"].get<uint64_t>();
}

// TCP from this namespace through tc egress under fq: the hard policer, then edt. The packets
// the bucket has no tokens for wait in fq instead of being lost, so TCP gets several times the
// hard policer's goodput, and what passed is still within CBS + CIR·T over the run.
TEST_F(Shape, EdtUnderFqDelaysTcpInsteadOfDroppingIt) {
    if (run_command({"/bin/sh", "-c", "command -v iperf3"}).exit_code != 0)
        GTEST_SKIP() << "iperf3 is not installed";
    REQUIRE_FQ(*lab);
    ASSERT_NO_FATAL_FAILURE(start_iperf_server());
    constexpr double kCir = 10e6, kCbs = 16384;
    ASSERT_EQ(daemon
                  ->ctl({"policy", "add", "tcp", "--algo", "srtcm", "--cir", "10mbit", "--cbs",
                         "16k", "--match", "dst", lab->ns_v4 + "/32", "--match", "proto", "tcp"})
                  .exit_code,
              0)
        << daemon->log();
    double hard = iperf_goodput(*lab, 3);
    auto r = daemon->ctl({"policy", "set", "tcp", "--shape", "edt"});
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon->log();
    std::this_thread::sleep_for(std::chrono::seconds(1)); // the bucket refills: CBS at most
    auto before = policy_stats(*daemon, "tcp");
    auto t0 = std::chrono::steady_clock::now();
    double edt = iperf_goodput(*lab, 3);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto after = policy_stats(*daemon, "tcp");
    RecordProperty("hard_mbit", std::to_string(hard / 1e6));
    RecordProperty("edt_mbit", std::to_string(edt / 1e6));
    RecordProperty("edt_delayed", after["shape"]["delayed"]["packets"].dump());
    RecordProperty("edt_dropped", after["shape"]["dropped"]["packets"].dump());
    EXPECT_GT(after["shape"]["delayed"]["packets"].get<uint64_t>(),
              before["shape"]["delayed"]["packets"].get<uint64_t>());
    // Loose, for an emulated guest: the hard policer has given 1.6 to 3.7 Mbit/s there, edt
    // 9.6 (of 10); the benchmark is where the figures belong.
    EXPECT_GT(edt, 2 * hard) << "hard " << hard / 1e6 << " Mbit/s, edt " << edt / 1e6;
    EXPECT_GT(edt, 0.7 * kCir) << "edt " << edt / 1e6 << " Mbit/s";
    // The bound, on what passed (IP bytes, every packet charged by its departure, which is at
    // most the horizon after the run ended).
    double bound = kCbs + kCir / 8 * (wall + TCM_EDT_HORIZON_NS / 1e9);
    EXPECT_LE(double(passed_bytes(after) - passed_bytes(before)), bound) << "over " << wall << " s";
    EXPECT_LE(edt, kCir) << "goodput above CIR";
}

// UDP does not back off: 200 datagrams of 1500 IP bytes at once into a 2 Mbit/s bucket (6 ms a
// datagram). After CBS, each waits in fq for its tokens, up to the 100 ms horizon (about 16);
// the rest are dropped, red, and counted shape dropped: in stats -j, the table and the metrics.
TEST_F(Shape, EdtUnderFqDropsWhatWouldLeaveBeyondTheHorizon) {
    REQUIRE_FQ(*lab);
    ASSERT_EQ(daemon
                  ->ctl({"policy", "add", "udp", "--algo", "srtcm", "--cir", "2mbit", "--cbs",
                         "16k", "--match", "dst", lab->ns_v4 + "/32", "--match", "proto", "udp",
                         "--shape", "edt"})
                  .exit_code,
              0)
        << daemon->log();
    auto r = run_command({udp_tool_path(), "send", lab->ns_v4, "9000", "200", "1472"});
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    auto s = policy_stats(*daemon, "udp");
    uint64_t delayed = s["shape"]["delayed"]["packets"].get<uint64_t>(),
             dropped = s["shape"]["dropped"]["packets"].get<uint64_t>();
    RecordProperty("delayed", std::to_string(delayed));
    RecordProperty("dropped", std::to_string(dropped));
    EXPECT_GE(delayed, 10u);
    EXPECT_GE(dropped, 1u);
    EXPECT_EQ(s["red"]["packets"].get<uint64_t>(), dropped) << "every red packet waited or went";
    EXPECT_EQ(s["green"]["packets"].get<uint64_t>() + s["yellow"]["packets"].get<uint64_t>() +
                  dropped,
              200u);
    EXPECT_EQ(s["shape"]["dropped"]["bytes"].get<uint64_t>(), 1500 * dropped);
    EXPECT_THAT(daemon->ctl({"stats"}).out,
                HasSubstr(fmt::format("edt delayed {} dropped {} pkts", delayed, dropped)));
    auto status = json::parse(daemon->ctl({"-j", "status"}).out);
    EXPECT_THAT(scrape_metrics(status["metrics"]),
                HasSubstr(fmt::format("tricolor_tcp_signal_packets_total{{action=\"shape_delayed\","
                                      "parent=\"\",policy=\"udp\"}} {}",
                                      delayed)));
}

} // namespace
} // namespace tricolor::test
