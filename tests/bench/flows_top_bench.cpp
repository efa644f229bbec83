// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// flows_top_bench: `tricolorctl flows --top 10` end to end at 2^20 flows: the CLI process, the
// control socket and the daemon (docs/datapath.md, "flows --top at 2^20"). A real tricolord
// with its own socket and pin directory (no interface: the flows are made by running its own XDP
// program through BPF_PROG_TEST_RUN, one packet per source of 10.0.0.0/12, then a staircase of
// heavy hitters), two passes for the heavy hitters (counting only, every 10 s: a full table
// would be reclaimed under pressure), then medians of 7:
//   RESULT name=flows_top10_2e20_daemon cli_ms=<tricolorctl, from the heavy hitters>
//          socket_ms=<the same request on the socket> walk_socket_ms=<"walk": true> ...
#include "bench_daemon.hpp"
#include "packet.hpp"
#include "test_util.hpp"
#include "tricolor/control.hpp"
#include "tricolor/datapath.hpp"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tricolor;
using nlohmann::json;

namespace {

// Runs @fd once on @frame with the IPv4 source 10.0.0.0 + @i.
void run_from(int fd, std::vector<uint8_t> &frame, uint32_t i) {
    uint32_t src = 0x0a000000u | i;
    frame[26] = src >> 24;
    frame[27] = src >> 16;
    frame[28] = src >> 8;
    frame[29] = src;
    bench::run_once(fd, frame);
}

} // namespace

int main() {
    quiet_libbpf_logging();
    if (geteuid() != 0) {
        std::fprintf(stderr, "flows_top_bench: needs root\n");
        return 1;
    }
    int rc = 0;
    try {
        // The table made whole: no growth while the flows are made.
        bench::BenchDaemon d("flows-top", {"--reclaim-interval", "0", "--flows", "1048576"});
        auto ask = [&](const json &r) { return d.ask(r); };
        auto ctl = [&](std::vector<std::string> args) {
            args.insert(args.begin(), {TRICOLORCTL_PATH, "--socket", d.sock});
            auto r = test::run_command(args);
            if (r.exit_code != 0)
                throw std::runtime_error("tricolorctl: " + r.err);
            return r;
        };
        ctl({"policy", "add", "per-src", "--algo", "trtcm", "--cir", "1tbit", "--cbs", "1g",
             "--pir", "1tbit", "--pbs", "1g", "--per", "src", "--match", "dst", "198.19.0.1/32"});
        int prog = d.xdp_prog();
        auto small = test::Packet().ipv4("10.0.0.0", "198.19.0.1").udp(1, 2).l3_size(64).build();
        auto big = test::Packet().ipv4("10.0.0.0", "198.19.0.1").udp(1, 2).l3_size(1500).build();
        auto a = std::chrono::steady_clock::now();
        for (uint32_t i = 0; i < (1u << 20); ++i)
            run_from(prog, small, i);
        for (uint32_t r = 4096; r >= 1; r /= 4)
            for (uint32_t i = 0; i < r; ++i)
                run_from(prog, big, i);
        std::fprintf(stderr, "2^20 flows made in %.1f s\n", bench::ms_since(a) / 1000);
        close(prog);
        // The pass after these packets picks the threshold, the one after installs it.
        json top;
        for (int i = 0; i < 600; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            top = ask({{"cmd", "status"}})["flows"];
            if (top["used"] == 1u << 20 && top["top"].value("tracking", false))
                break;
        }
        if (!top["top"].value("tracking", false))
            throw std::runtime_error("no heavy hitters after 60 s: " + top.dump());
        std::vector<double> cli_ms, socket_ms, walk_ms, status_ms;
        auto listed = [](const json &r) {
            std::vector<std::string> out;
            for (const auto &f : r["flows"])
                out.push_back(f["key"].get<std::string>() + " " + f["green"]["bytes"].dump());
            return out;
        };
        bool same = true;
        for (int round = 0; round < 7; ++round) {
            a = std::chrono::steady_clock::now();
            auto cli = json::parse(ctl({"-j", "flows", "--top", "10"}).out);
            cli_ms.push_back(bench::ms_since(a));
            a = std::chrono::steady_clock::now();
            auto hot = ask({{"cmd", "flows"}, {"top", 10}});
            socket_ms.push_back(bench::ms_since(a));
            a = std::chrono::steady_clock::now();
            auto walked = ask({{"cmd", "flows"}, {"top", 10}, {"walk", true}});
            walk_ms.push_back(bench::ms_since(a));
            a = std::chrono::steady_clock::now();
            ctl({"status"});
            status_ms.push_back(bench::ms_since(a));
            same = same && cli["via"] == "hot" && hot["via"] == "hot" &&
                   listed(cli) == listed(walked) && listed(hot) == listed(walked) &&
                   walked["flows"].size() == 10;
        }
        double w = bench::median(walk_ms), s = bench::median(socket_ms);
        std::printf("%-44s %10s\n", "flows --top 10 at 2^20 flows (median of 7)", "ms");
        std::printf("%-44s %10.1f\n", "tricolorctl -j flows --top 10 (heavy hitters)",
                    bench::median(cli_ms));
        std::printf("%-44s %10.1f\n", "the same request on the socket", s);
        std::printf("%-44s %10.1f\n", "the request with \"walk\": true", w);
        std::printf("%-44s %10.1f\n", "tricolorctl status", bench::median(status_ms));
        std::printf("%s\n", same ? "same lists" : "LISTS DIFFER");
        std::printf("RESULT name=flows_top10_2e20_daemon cli_ms=%.1f socket_ms=%.1f "
                    "walk_socket_ms=%.1f ratio=%.0f status_ms=%.1f same=%d target_ms=50\n",
                    bench::median(cli_ms), s, w, w / s, bench::median(status_ms), same ? 1 : 0);
        rc = same ? 0 : 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "flows_top_bench: %s\n", e.what());
        rc = 1;
    }
    return rc;
}
