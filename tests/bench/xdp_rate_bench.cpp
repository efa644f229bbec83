// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// xdp_rate_bench: packets per second through an XDP program on a real receive path, a veth
// whose peer sends (tests/bench/xdp_rate_bench.sh sets the pair up, each end in a namespace of
// its own, and runs the cases).
//
// Traffic is made as xdp-trafficgen makes it: bpf/bench.bpf.c's bench_gen, run through
// BPF_PROG_TEST_RUN in live-frames mode on one CPU, rewrites each frame's source and sends it out
// of the sending veth (XDP_TX); the kernel hands it to the peer, whose native XDP program runs in
// that peer's NAPI poll. The figure is what the receiver took over the measured seconds (the
// veth's own count of frames its poll handed to XDP), so what the sender offered beyond it is
// not counted; the time per packet is the kernel's BPF statistics' (run_time_ns / run_cnt,
// measured apart: they cost a clock read or two a run).
//
//   xdp_rate_bench attach NETNS IFACE PROG [red]   a program of bench.bpf.c on IFACE (native);
//                                                  red: the plain meter's new keys get rate 0
//   xdp_rate_bench detach NETNS IFACE
//   xdp_rate_bench run TX_NETNS TX_IFACE RX_NETNS RX_IFACE SECONDS FLOWS v4|v6 NAME
//       FLOWS sources (a power of two) from 198.18.0.0/16 (v4) or 2001:db8::/108 (v6) to
//       198.19.0.2 or 2001:db8:1::2; every source is sent once before the measured seconds.
//       Prints "RESULT name=NAME mpps=... ns_per_packet=... offered_mpps=...".
#include "packet.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "bench.skel.h"

namespace {

using tricolor::test::Packet;

// Enters the network namespace `ip netns add NAME` made (without remounting /sys, as `ip netns
// exec` would: bpffs stays where it is).
void enter_netns(const std::string &name) {
    std::string path = "/var/run/netns/" + name;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
        throw std::runtime_error(fmt::format("cannot enter {}: {}", path, std::strerror(errno)));
    close(fd);
}

unsigned ifindex_of(const std::string &iface) {
    unsigned idx = if_nametoindex(iface.c_str());
    if (idx == 0)
        throw std::runtime_error(fmt::format("no interface {}", iface));
    return idx;
}

std::array<uint8_t, 6> mac_of(const std::string &iface) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", iface.c_str());
    if (s < 0 || ioctl(s, SIOCGIFHWADDR, &ifr) != 0)
        throw std::runtime_error(fmt::format("cannot read the MAC of {}", iface));
    close(s);
    std::array<uint8_t, 6> mac;
    std::memcpy(mac.data(), ifr.ifr_hwaddr.sa_data, 6);
    return mac;
}

// The packets the receiving veth's NAPI took (veth counts each frame its poll hands to XDP,
// whatever the verdict), in the namespace this thread is in.
uint64_t rx_packets(const std::string &iface) {
    ifaddrs *all = nullptr;
    if (getifaddrs(&all) != 0)
        throw std::runtime_error("getifaddrs failed");
    uint64_t n = 0;
    bool found = false;
    for (ifaddrs *a = all; a; a = a->ifa_next)
        if (a->ifa_addr && a->ifa_addr->sa_family == AF_PACKET && a->ifa_data &&
            iface == a->ifa_name) {
            n = static_cast<const rtnl_link_stats *>(a->ifa_data)->rx_packets;
            found = true;
        }
    freeifaddrs(all);
    if (!found)
        throw std::runtime_error(fmt::format("no counters of {}", iface));
    return n;
}

struct Stats {
    uint64_t run_cnt = 0, run_time_ns = 0;
};

Stats stats_of(int prog_fd) {
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0)
        throw std::runtime_error("cannot read the program's statistics");
    return {info.run_cnt, info.run_time_ns};
}

int cmd_attach(const std::string &netns, const std::string &iface, const std::string &prog,
               bool red) {
    enter_netns(netns);
    struct bench *skel = bench__open_and_load();
    if (!skel)
        throw std::runtime_error("cannot load bench.bpf.o");
    if (red)
        skel->data->plain_fresh_rate = 0;
    bpf_program *p = bpf_object__find_program_by_name(skel->obj, prog.c_str());
    if (!p)
        throw std::runtime_error(fmt::format("no program {} in bench.bpf.o", prog));
    int rc = bpf_xdp_attach(static_cast<int>(ifindex_of(iface)), bpf_program__fd(p),
                            XDP_FLAGS_DRV_MODE, nullptr);
    if (rc != 0)
        throw std::runtime_error(
            fmt::format("cannot attach {} to {}: {}", prog, iface, std::strerror(-rc)));
    // The attachment holds the program and its maps after this process ends.
    bench__destroy(skel);
    return 0;
}

int cmd_detach(const std::string &netns, const std::string &iface) {
    enter_netns(netns);
    bpf_xdp_detach(static_cast<int>(ifindex_of(iface)), XDP_FLAGS_DRV_MODE, nullptr);
    return 0;
}

int cmd_run(const std::string &tx_netns, const std::string &tx_iface, const std::string &rx_netns,
            const std::string &rx_iface, double seconds, uint32_t flows, bool v6,
            const std::string &name) {
    if (flows == 0 || (flows & (flows - 1)) != 0)
        throw std::runtime_error("FLOWS is a power of two");
    int root = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    enter_netns(rx_netns);
    int rx_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    const auto mac = mac_of(rx_iface);
    uint32_t prog_id = 0;
    if (bpf_xdp_query_id(static_cast<int>(ifindex_of(rx_iface)), XDP_FLAGS_DRV_MODE, &prog_id) !=
            0 ||
        prog_id == 0)
        throw std::runtime_error(fmt::format("no native XDP program on {}", rx_iface));
    int rx_fd = bpf_prog_get_fd_by_id(prog_id);
    if (rx_fd < 0)
        throw std::runtime_error("cannot open the receiving program");
    setns(root, CLONE_NEWNET);
    enter_netns(tx_netns);
    int tx_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    const int tx_ifindex = static_cast<int>(ifindex_of(tx_iface));
    auto received = [&] {
        setns(rx_ns, CLONE_NEWNET);
        uint64_t n = rx_packets(rx_iface);
        setns(tx_ns, CLONE_NEWNET);
        return n;
    };

    struct bench *skel = bench__open_and_load();
    if (!skel)
        throw std::runtime_error("cannot load bench.bpf.o");
    skel->bss->gen_mask = flows - 1;
    std::vector<uint8_t> frame =
        v6 ? Packet().ipv6("2001:db8::", "2001:db8:1::2").udp(1000, 2000).payload(18).build()
           : Packet().ipv4("198.18.0.0", "198.19.0.2").udp(1000, 2000).payload(18).build();
    std::memcpy(frame.data(), mac.data(), 6); // to the receiver: its stack takes what passes

    xdp_md ctx{};
    ctx.data_end = static_cast<uint32_t>(frame.size());
    ctx.ingress_ifindex = static_cast<uint32_t>(tx_ifindex);
    auto send = [&](uint32_t packets) {
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                    .data_size_in = static_cast<uint32_t>(frame.size()), .ctx_in = &ctx,
                    .ctx_size_in = sizeof(ctx), .repeat = static_cast<int>(packets),
                    .flags = BPF_F_TEST_XDP_LIVE_FRAMES);
        if (bpf_prog_test_run_opts(bpf_program__fd(skel->progs.bench_gen), &opts) != 0)
            throw std::runtime_error(
                fmt::format("live-frames run failed: {}", std::strerror(errno)));
    };
    // Sends for @secs in batches of 2^18; returns the seconds it took.
    auto send_for = [&](double secs) {
        const auto t0 = std::chrono::steady_clock::now();
        double elapsed = 0;
        while (elapsed < secs) {
            send(1 << 18);
            elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        return elapsed;
    };
    // Every source once (the flows made), then the measured seconds: packets per second with
    // the kernel's BPF statistics off (they cost a clock read or two a run), then the time per
    // packet with them on, for a third as long.
    send(std::max<uint32_t>(flows, 1 << 16));
    const uint64_t rx_before = received();
    const uint32_t gen_before = skel->bss->gen_counter;
    const double elapsed = send_for(seconds);
    const uint64_t took = received() - rx_before;
    const uint64_t sent = skel->bss->gen_counter - gen_before;

    int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
    if (stats_fd < 0)
        throw std::runtime_error("cannot enable BPF statistics");
    const Stats before = stats_of(rx_fd);
    send_for(seconds / 3);
    const Stats after = stats_of(rx_fd);
    const uint64_t runs = after.run_cnt - before.run_cnt;
    std::printf("RESULT name=%s mpps=%.3f ns_per_packet=%.1f offered_mpps=%.3f\n", name.c_str(),
                static_cast<double>(took) / elapsed / 1e6,
                runs ? static_cast<double>(after.run_time_ns - before.run_time_ns) /
                           static_cast<double>(runs)
                     : 0.0,
                static_cast<double>(sent) / elapsed / 1e6);
    bench__destroy(skel);
    close(stats_fd);
    close(rx_fd);
    close(tx_ns);
    close(rx_ns);
    close(root);
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    std::vector<std::string> a(argv + 1, argv + argc);
    try {
        if (a.size() >= 4 && a[0] == "attach")
            return cmd_attach(a[1], a[2], a[3], a.size() > 4 && a[4] == "red");
        if (a.size() == 3 && a[0] == "detach")
            return cmd_detach(a[1], a[2]);
        if (a.size() == 9 && a[0] == "run")
            return cmd_run(a[1], a[2], a[3], a[4], std::stod(a[5]),
                           static_cast<uint32_t>(std::stoul(a[6])), a[7] == "v6", a[8]);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "xdp_rate_bench: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr, "usage: see the top of tests/bench/xdp_rate_bench.cpp\n");
    return 2;
}
