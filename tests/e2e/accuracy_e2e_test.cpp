// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Accuracy on a real link: UDP at twice CIR through each algorithm, IPv4 and IPv6, XDP and tc
// (ingress and egress). Both sides are bounded. The ceilings are the meter's guarantee over a
// measured window (CLOCK_MONOTONIC, what bpf_ktime_get_ns reads, from the first datagram's send
// call to the bucket's own time of its newest packet), so they hold however loaded the machine
// is. The floors are what the bucket must have admitted given when each datagram was sent
// (admission_floor in lab.hpp): green cannot be short of CIR*T by more than the send calls'
// own durations can explain. No tolerance is tuned.
#include "lab.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <regex>
#include <thread>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;

namespace {

using i128 = __int128;

struct Case {
    std::string algo;
    bool ipv6;
    std::string hook; // xdp, tc-ingress, tc-egress
};

std::string case_name(const ::testing::TestParamInfo<Case> &info) {
    std::string hook = info.param.hook;
    std::replace(hook.begin(), hook.end(), '-', '_');
    return info.param.algo + (info.param.ipv6 ? "_ipv6_" : "_ipv4_") + hook;
}

class Accuracy : public ::testing::TestWithParam<Case> {};

constexpr uint64_t kCir = 8000000; // 1 MB/s
constexpr uint64_t kCbs = 10240, kSecondSize = 20480;
constexpr uint64_t kPir = 12000000, kEir = 4000000;
constexpr long kPayload = 1000;
constexpr long kPackets = 2000; // at 2000/s: 16 Mbit/s, twice CIR, for one second

TEST_P(Accuracy, BoundsHoldEveryPacketIsMeteredRedIsDroppedYellowIsRemarked) {
    TRICOLOR_REQUIRE_ROOT();
    const Case &c = GetParam();
    Lab lab;
    Daemon daemon(case_name(::testing::TestParamInfo<Case>(c, 0)));
    auto ctl = [&](std::vector<std::string> args) {
        auto r = daemon.ctl(args);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return r;
    };
    bool egress = c.hook == "tc-egress";
    if (c.hook == "xdp")
        ctl({"attach", lab.host_if});
    else
        ctl({"attach", lab.host_if, "--hook", "tc", "--direction", egress ? "egress" : "ingress"});
    std::vector<std::string> add = {"policy",
                                    "add",
                                    "p",
                                    "--algo",
                                    c.algo,
                                    "--cir",
                                    std::to_string(kCir),
                                    "--cbs",
                                    std::to_string(kCbs),
                                    "--match",
                                    "proto",
                                    "udp",
                                    "--yellow",
                                    "dscp:af12"};
    if (c.algo == "trtcm")
        add.insert(add.end(),
                   {"--pir", std::to_string(kPir), "--pbs", std::to_string(kSecondSize)});
    else
        add.insert(add.end(), {"--ebs", std::to_string(kSecondSize)});
    if (c.algo == "rfc4115")
        add.insert(add.end(), {"--eir", std::to_string(kEir)});
    ctl(add);

    // Egress: the host sends into the namespace; ingress: the namespace sends to the host.
    std::string dst =
        egress ? (c.ipv6 ? lab.ns_v6 : lab.ns_v4) : (c.ipv6 ? lab.host_v6 : lab.host_v4);
    std::vector<std::string> recv = {udp_tool_path(), "recv", dst, "9000", "3"};
    std::string stamps_path = fmt::format("/tmp/tricolor-e2e-stamps-{}-{}", getpid(),
                                          case_name(::testing::TestParamInfo<Case>(c, 0)));
    std::vector<std::string> send = {
        udp_tool_path(),          "send", dst, "9000",     std::to_string(kPackets),
        std::to_string(kPayload), "2000", "0", stamps_path};
    RunResult received;
    std::thread rx([&] { received = egress ? lab.in_ns(recv) : run_command(recv); });
    std::this_thread::sleep_for(std::chrono::milliseconds(400)); // the receiver binds
    auto sent = egress ? run_command(send) : lab.in_ns(send);
    ASSERT_EQ(sent.exit_code, 0) << sent.err;
    auto stamps = read_send_stamps(stamps_path);
    std::filesystem::remove(stamps_path);
    ASSERT_EQ(stamps.size(), static_cast<size_t>(kPackets));
    rx.join();

    auto stats = json::parse(daemon.ctl({"-j", "stats"}).out);
    auto p = stats["policies"][0];
    uint64_t gp = p["green"]["packets"], yp = p["yellow"]["packets"], rp = p["red"]["packets"];
    i128 gb = p["green"]["bytes"].get<uint64_t>(), yb = p["yellow"]["bytes"].get<uint64_t>();
    i128 rb = p["red"]["bytes"].get<uint64_t>();
    ASSERT_EQ(gp + yp + rp, static_cast<uint64_t>(kPackets)) << "every datagram metered";
    // Every datagram is the same size: its IP packet, the metered length.
    const uint64_t len = static_cast<uint64_t>((gb + yb + rb) / kPackets);
    ASSERT_EQ(i128(len) * kPackets, gb + yb + rb);
    EXPECT_EQ(len, kPayload + 8 + (c.ipv6 ? 40 : 20));

    // The window: from the first datagram's send call to the newest arrival the bucket saw
    // (its last_ns, read from the pinned map): every datagram was metered inside it, whatever
    // the scheduler did, and nothing pads it (no sleep).
    auto last = last_metered_ns(daemon.pin_dir());
    ASSERT_TRUE(last.has_value()) << "no started policy state under " << daemon.pin_dir();
    ASSERT_GE(*last, stamps.back().start);
    const i128 unit = 8000000000, T = *last - stamps.front().start;

    // Ceilings, exact in tokens (1 byte = 8e9; R bit/s = R tokens/ns) over T.
    EXPECT_LE(gb * unit, i128(kCbs) * unit + i128(kCir) * T) << "green <= CBS + CIR*T";
    if (c.algo == "srtcm") {
        EXPECT_LE((gb + yb) * unit, i128(kCbs + kSecondSize) * unit + i128(kCir) * T);
    } else if (c.algo == "trtcm") {
        EXPECT_LE((gb + yb) * unit, i128(kSecondSize) * unit + i128(kPir) * T);
    } else {
        EXPECT_LE(yb * unit, i128(kSecondSize) * unit + i128(kEir) * T);
    }
    EXPECT_GT(rp, 0u) << "twice CIR must overflow the buckets";

    // Floors (see admission_floor): a colour-blind meter's green is decided by C alone in srtcm
    // and rfc4115, green+yellow by P alone in trtcm. The premise, each datagram metered within
    // its own send call, holds by construction on tc egress (the program runs in the sender's
    // sendto) and on ingress whenever the veth's receive softirq runs on the way out of
    // sendto, as it does unless softirqs are pushed to ksoftirqd; the last packet's arrival
    // checks it.
    uint64_t floor = 0, admitted = 0;
    const char *what = "";
    if (c.algo == "trtcm") {
        floor = admission_floor(stamps, kPir, kSecondSize, len);
        admitted = gp + yp;
        what = "green+yellow (P)";
    } else {
        floor = admission_floor(stamps, kCir, kCbs, len);
        admitted = gp;
        what = "green (C)";
    }
    EXPECT_GT(floor, 0u);
    if (*last <= stamps.back().end) {
        EXPECT_GE(admitted, floor) << what << " below what the bucket must have admitted";
    } else {
        std::cout << fmt::format("[ accuracy ] the last datagram was metered {} ns after its "
                                 "send call returned: floor not checked\n",
                                 *last - stamps.back().end);
    }

    // At the receiver: red dropped, the rest delivered; yellow remarked AF12 (TOS 48), green not.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(received.out, m, std::regex("packets (\\d+) "))) << received.out;
    EXPECT_EQ(std::stoull(m[1]), gp + yp);
    uint64_t af12 = 0, plain = 0;
    if (std::regex_search(received.out, m, std::regex("tos 48:(\\d+)")))
        af12 = std::stoull(m[1]);
    if (std::regex_search(received.out, m, std::regex("tos 0:(\\d+)")))
        plain = std::stoull(m[1]);
    EXPECT_EQ(af12, yp) << received.out;
    EXPECT_EQ(plain, gp) << received.out;
    std::cout << fmt::format("[ accuracy ] {} {} {}: T {:.3f} s, green {} ({:.2f} Mbit/s), "
                             "yellow {}, red {}; {} {} >= floor {}\n",
                             c.algo, c.ipv6 ? "IPv6" : "IPv4", c.hook, double(T) / 1e9, gp,
                             double(gb) * 8 / (double(T) / 1e9) / 1e6, yp, rp, what, admitted,
                             floor);
}

std::vector<Case> cases() {
    std::vector<Case> out;
    for (const char *algo : {"srtcm", "trtcm", "rfc4115"})
        for (bool v6 : {false, true})
            for (const char *hook : {"xdp", "tc-ingress", "tc-egress"})
                out.push_back({algo, v6, hook});
    return out;
}

INSTANTIATE_TEST_SUITE_P(AllPaths, Accuracy, ::testing::ValuesIn(cases()), case_name);

} // namespace
