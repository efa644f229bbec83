// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// delayline: a fixed one-way delay between two interfaces, for a real-RTT lab on kernels
// without netem. It relays every Ethernet frame that arrives on one interface out of the other
// after DELAY, in both directions, over AF_PACKET sockets; a middle network namespace holding
// both interfaces (and no addresses) makes it a wire with latency:
//
//   A [a0] <-veth-> [ma] M: delayline ma mb 10ms [mb] <-veth-> [b0] B
//
// Frames keep their order; each direction holds at most LIMIT frames (tail drop beyond).
// Offloads stay on: frames are read and written with PACKET_VNET_HDR, whose virtio-net header
// carries a GSO super-packet's segment size and a partial checksum's offsets through the
// relay, so a TSO sender's 64 KB packets cross it whole, as they would cross a veth pair.
//
// usage: delayline IF1 IF2 DELAY [--limit N] [--stats FILE]
//   DELAY: 0, 500us, 10ms, 0.1s ... (one way; the RTT adds both directions)
// SIGTERM/SIGINT end it; it prints "relayed N dropped N" per direction on exit.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;

uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

bool parse_delay(const char *text, uint64_t &ns) {
    char *end = nullptr;
    double v = std::strtod(text, &end);
    if (end == text || v < 0)
        return false;
    std::string unit(end);
    double mul = 0;
    if (unit == "ns")
        mul = 1;
    else if (unit == "us")
        mul = 1e3;
    else if (unit == "ms" || (unit.empty() && v == 0))
        mul = 1e6;
    else if (unit == "s")
        mul = 1e9;
    else
        return false;
    ns = static_cast<uint64_t>(v * mul + 0.5);
    return true;
}

int open_port(const char *ifname) {
    unsigned idx = if_nametoindex(ifname);
    if (idx == 0) {
        std::fprintf(stderr, "delayline: no interface %s\n", ifname);
        std::exit(2);
    }
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    if (fd < 0) {
        std::perror("delayline: socket(AF_PACKET)");
        std::exit(1);
    }
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(idx);
    if (bind(fd, reinterpret_cast<sockaddr *>(&sll), sizeof(sll)) < 0) {
        std::perror("delayline: bind");
        std::exit(1);
    }
    int one = 1;
    // Our own transmissions would otherwise come back to us as outgoing frames.
    if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) < 0) {
        std::perror("delayline: PACKET_IGNORE_OUTGOING");
        std::exit(1);
    }
    // Every frame on the wire, whatever its destination MAC.
    packet_mreq mr{};
    mr.mr_ifindex = static_cast<int>(idx);
    mr.mr_type = PACKET_MR_PROMISC;
    setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof(mr));
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) < 0) {
        std::perror("delayline: PACKET_VNET_HDR");
        std::exit(1);
    }
    int buf = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof(buf));
    return fd;
}

struct Frame {
    uint64_t due_ns;
    std::vector<uint8_t> bytes;
};

struct Direction {
    int in_fd, out_fd;
    std::deque<Frame> queue;
    uint64_t relayed = 0, dropped = 0, send_errors = 0;
};

} // namespace

int main(int argc, char **argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: delayline IF1 IF2 DELAY [--limit N] [--stats FILE]\n");
        return 2;
    }
    uint64_t delay = 0;
    if (!parse_delay(argv[3], delay)) {
        std::fprintf(stderr, "delayline: '%s' is not a delay (e.g. 10ms, 500us, 0)\n", argv[3]);
        return 2;
    }
    size_t limit = 10000;
    const char *stats = nullptr;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--limit") == 0)
            limit = std::strtoul(argv[i + 1], nullptr, 10);
        else if (std::strcmp(argv[i], "--stats") == 0)
            stats = argv[i + 1];
        else {
            std::fprintf(stderr, "delayline: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    // Timers fire within 1 ns of asking rather than the default 50 us slack.
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    // A loaded machine would otherwise add its scheduling delays to ours: run as a low
    // real-time priority where allowed (it sleeps in ppoll whenever it has nothing due).
    sched_param sp{};
    sp.sched_priority = 1;
    sched_setscheduler(0, SCHED_FIFO, &sp);
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_stop = 1; };
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);

    int p1 = open_port(argv[1]), p2 = open_port(argv[2]);
    Direction dirs[2] = {{p1, p2, {}}, {p2, p1, {}}};
    std::vector<uint8_t> buf(256 * 1024); // a virtio-net header and a GSO packet

    while (!g_stop) {
        // 1. Send what is due.
        uint64_t now = now_ns();
        uint64_t next_due = UINT64_MAX;
        bool blocked = false;
        for (auto &d : dirs) {
            while (!d.queue.empty() && d.queue.front().due_ns <= now) {
                const auto &f = d.queue.front();
                if (send(d.out_fd, f.bytes.data(), f.bytes.size(), 0) < 0) {
                    if (errno == EAGAIN || errno == ENOBUFS) {
                        blocked = true; // the device queue is full: retry in a moment
                        break;
                    }
                    ++d.send_errors;
                }
                ++d.relayed;
                d.queue.pop_front();
            }
            if (!d.queue.empty())
                next_due =
                    std::min(next_due, std::max(d.queue.front().due_ns, blocked ? now + 50000 : 0));
        }
        // 2. Wait for a frame or for the next departure.
        pollfd pfd[2] = {{p1, POLLIN, 0}, {p2, POLLIN, 0}};
        timespec ts{}, *tsp = nullptr;
        if (next_due != UINT64_MAX) {
            uint64_t wait = next_due > now ? next_due - now : 0;
            ts.tv_sec = static_cast<time_t>(wait / 1000000000ull);
            ts.tv_nsec = static_cast<long>(wait % 1000000000ull);
            tsp = &ts;
        }
        int n = ppoll(pfd, 2, tsp, nullptr);
        if (n < 0 && errno != EINTR) {
            std::perror("delayline: ppoll");
            return 1;
        }
        // 3. Take in everything that arrived, stamped with its departure time.
        for (int i = 0; i < 2; ++i) {
            if (n <= 0 || !(pfd[i].revents & POLLIN))
                continue;
            Direction &d = dirs[i];
            for (;;) {
                ssize_t len = recv(d.in_fd, buf.data(), buf.size(), 0);
                if (len < 0)
                    break;
                if (d.queue.size() >= limit) {
                    ++d.dropped;
                    continue;
                }
                d.queue.push_back(Frame{now_ns() + delay, {buf.begin(), buf.begin() + len}});
            }
        }
    }
    FILE *out = stats ? std::fopen(stats, "w") : stderr;
    if (!out)
        out = stderr;
    for (int i = 0; i < 2; ++i)
        std::fprintf(out, "%s->%s relayed %llu dropped %llu send_errors %llu\n", argv[1 + i],
                     argv[2 - i], static_cast<unsigned long long>(dirs[i].relayed),
                     static_cast<unsigned long long>(dirs[i].dropped),
                     static_cast<unsigned long long>(dirs[i].send_errors));
    if (out != stderr)
        std::fclose(out);
    return 0;
}
