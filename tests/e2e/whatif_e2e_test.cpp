// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// whatif on a real capture (docs/spec.md §12): tcpdump records iperf3's UDP and TCP through the
// lab, over IPv4, IPv6 and a VLAN; `tricolorctl whatif --packets` on it agrees line for line with
// `tricolorctl replay -f --engine bpf` on the same packets written as a trace.
#include "lab.hpp"

#include "tricolor/capture.hpp"
#include "tricolor/whatif.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace tricolor;
using namespace tricolor::test;
using ::testing::HasSubstr;

namespace {

const std::string kCtl = TRICOLORCTL_PATH;

std::string addr(const FlowTracePacket &p, bool src) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(p.ipv6 ? AF_INET6 : AF_INET, (src ? p.src : p.dst).data(), buf, sizeof(buf));
    return buf;
}

// The capture as a replay -f trace: times from the first packet, each packet's IP length,
// addresses, protocol and ports. Counts the packets with a VLAN tag into @tagged.
std::string capture_as_trace(const std::string &pcap, size_t &packets, size_t &tagged) {
    auto reader = CaptureReader::open(pcap);
    EXPECT_TRUE(reader) << reader.error();
    std::string out;
    uint64_t t0 = 0;
    packets = tagged = 0;
    for (;;) {
        auto next = (*reader)->next();
        EXPECT_TRUE(next) << next.error();
        if (!next || !*next)
            break;
        const CapturedPacket &cp = **next;
        if (packets++ == 0)
            t0 = cp.time_ns;
        tagged += cp.frame[12] == 0x81 && cp.frame[13] == 0x00;
        auto f = frame_flow(cp.frame);
        EXPECT_TRUE(f) << "packet " << cp.number << " is not IP (the capture's filter is IP)";
        if (!f)
            continue;
        out += fmt::format("{} {} {} {} {}", cp.time_ns - t0, f->bytes, addr(*f, true),
                           addr(*f, false), f->proto);
        if (f->ports)
            out += fmt::format(" {} {}", f->sport, f->dport);
        out += "\n";
    }
    return out;
}

TEST(WhatIfE2E, ATcpdumpCaptureOfIperf3AgreesWithReplayLineForLine) {
    if (!is_root())
        GTEST_SKIP() << "needs root (namespaces, tcpdump, BPF_PROG_TEST_RUN)";
    Lab lab;
    // VLAN 7 on the wire without VLAN devices (the kernel here has no 8021q): a tc program tags
    // UDP to port 5312 leaving the host's veth and one takes the tag off entering the
    // namespace's (vlan_tag.bpf.c).
    const std::string obj = VLAN_TAG_OBJ;
    ASSERT_EQ(run_command({"/sbin/tc", "qdisc", "add", "dev", lab.host_if, "clsact"}).exit_code, 0);
    auto push = run_command({"/sbin/tc", "filter", "add", "dev", lab.host_if, "egress", "bpf", "da",
                             "obj", obj, "sec", "tc", "program", "vlan_push"});
    ASSERT_EQ(push.exit_code, 0) << push.err;
    ASSERT_EQ(lab.in_ns({"/sbin/tc", "qdisc", "add", "dev", lab.ns_if, "clsact"}).exit_code, 0);
    auto pop = lab.in_ns({"/sbin/tc", "filter", "add", "dev", lab.ns_if, "ingress", "bpf", "da",
                          "obj", obj, "sec", "tc", "program", "vlan_pop"});
    ASSERT_EQ(pop.exit_code, 0) << pop.err;

    auto dir = std::filesystem::temp_directory_path() / ("whatif_e2e." + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::string pcap = (dir / "lab.pcap").string();
    // tcpdump for a fixed time (SIGINT ends it cleanly); the traffic fits well inside it.
    RunResult dump;
    std::thread capture([&] {
        dump = run_command({"/usr/bin/timeout", "-s", "INT", std::to_string(int(9 * time_scale())),
                            "/usr/bin/tcpdump", "-i", lab.host_if, "-w", pcap, "-s", "0", "-U",
                            "--time-stamp-precision=nano", "ip or ip6 or vlan"});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ASSERT_EQ(lab.in_ns({"/usr/bin/iperf3", "-s", "-D", "-p", "5311"}).exit_code, 0);
    ASSERT_EQ(lab.in_ns({"/usr/bin/iperf3", "-s", "-D", "-p", "5312"}).exit_code, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (const auto &args : std::vector<std::vector<std::string>>{
             {"-c", lab.ns_v4, "-u", "-b", "6M", "-t", "1", "-l", "1200"},
             {"-c", lab.ns_v4, "-t", "1"},
             {"-c", lab.ns_v6, "-u", "-b", "3M", "-t", "1", "-l", "1000"},
             {"-p", "5312", "-c", lab.ns_v4, "-u", "-b", "4M", "-t", "1", "-l", "800"}}) {
        std::vector<std::string> cmd = {"/usr/bin/iperf3"};
        if (args.front() != "-p")
            cmd.insert(cmd.end(), {"-p", "5311"});
        cmd.insert(cmd.end(), args.begin(), args.end());
        // iperf3's control connection can be reset as a test ends (esnet/iperf#499: the server
        // closes before the client's FIN) or refused while the server is still busy with the last
        // one: run it again then. A rerun's packets are in the capture too, which the test only
        // needs to read the same way twice.
        RunResult r;
        for (int tries = 0; tries < 3; ++tries) {
            r = run_command(cmd);
            const std::string said = r.out + r.err;
            if (r.exit_code == 0 || (said.find("control message") == std::string::npos &&
                                     said.find("unable to connect") == std::string::npos &&
                                     said.find("server is busy") == std::string::npos))
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    lab.in_ns({"/usr/bin/pkill", "-f", "iperf3 -s -D -p 531"});
    capture.join();
    ASSERT_TRUE(std::filesystem::exists(pcap)) << dump.err;

    std::ofstream(dir / "p.yaml") << fmt::format(
        "policies:\n"
        "  - {{name: vlan, algo: srtcm, cir: 2mbit, cbs: 8k, match: {{dst: {}/32, proto: udp, "
        "dport: 5312}}}}\n"
        "  - {{name: udp4, algo: srtcm, cir: 3mbit, cbs: 12k, ebs: 6k, match: {{dst: {}/32, "
        "proto: udp}}, priority: 10, yellow: 'dscp:af12', red: drop}}\n"
        "  - {{name: tcp, algo: trtcm, cir: 50mbit, cbs: 32k, pir: 200mbit, pbs: 64k, per: src, "
        "match: {{proto: tcp}}}}\n"
        "  - {{name: udp6, algo: rfc4115, cir: 2mbit, cbs: 8k, eir: 500kbit, ebs: 4k, match: "
        "{{dst: {}/128}}}}\n",
        lab.ns_v4, lab.ns_v4, lab.ns_v6);
    size_t packets = 0, tagged = 0;
    std::ofstream(dir / "lab.trace") << capture_as_trace(pcap, packets, tagged);
    EXPECT_GT(packets, 1000u);
    EXPECT_GT(tagged, 300u) << "the VLAN run's packets carry their tag in the capture";

    auto whatif = run_command({kCtl, "whatif", pcap, "-f", (dir / "p.yaml").string(), "--packets"});
    ASSERT_EQ(whatif.exit_code, 0) << whatif.err;
    auto replay = run_command({kCtl, "replay", "-f", (dir / "p.yaml").string(), "--engine", "bpf",
                               (dir / "lab.trace").string()});
    ASSERT_EQ(replay.exit_code, 0) << replay.err;
    EXPECT_EQ(first_difference(whatif.out, replay.out), "");
    for (const char *seen : {",red,udp4", ",green,tcp", ",red,udp6", ",red,vlan", ",yellow,udp4"})
        EXPECT_THAT(whatif.out, HasSubstr(seen)) << "each policy met its traffic";
    std::filesystem::remove_all(dir);
}

} // namespace
