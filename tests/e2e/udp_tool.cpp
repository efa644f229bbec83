// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// udp_tool: the e2e tests' traffic, run inside a test namespace.
//   udp_tool send ADDR PORT COUNT SIZE [PPS] [TOS] [STAMPS|-] [SRC]
//                                                    COUNT datagrams of SIZE payload bytes; with
//                                                    STAMPS, writes "start end" a line: the
//                                                    CLOCK_MONOTONIC ns (what bpf_ktime_get_ns
//                                                    reads) before and after each sendto; from
//                                                    SRC (an IPv4 address) if given
//   udp_tool steps ADDR PORT SIZE SECONDS PPS...     datagrams of SIZE payload bytes at each PPS
//                                                    in turn, SECONDS each (0: silent), with no
//                                                    gap between steps
//   udp_tool flows ADDR PORT N COUNT PPS             COUNT datagrams of 100 payload bytes at PPS,
//                                                    round robin from N sockets (N source
//                                                    ports: N flows of a per-5-tuple policy)
//   udp_tool spread ADDR PORT N ROUNDS SIZE PPS     ROUNDS rounds of SIZE-byte datagrams to the
//                                                    N IPv4 addresses from ADDR on (N flows of a
//                                                    per-destination policy), at PPS
//   udp_tool recv ADDR PORT SECONDS                  prints "packets N bytes B tos T:N ..."
//   udp_tool tcp-recv ADDR PORT SECONDS              accepts one connection, prints "bytes B"
//   udp_tool tcp-send ADDR PORT SECONDS              sends as fast as TCP lets it
// Addresses are the tests' own (198.18.0.0/15, 2001:db8::/32); nothing else is ever a target.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

bool resolve(const char *addr, int port, sockaddr_storage &ss, socklen_t &len) {
    std::memset(&ss, 0, sizeof(ss));
    auto *v4 = reinterpret_cast<sockaddr_in *>(&ss);
    auto *v6 = reinterpret_cast<sockaddr_in6 *>(&ss);
    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        len = sizeof(*v4);
        return true;
    }
    if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        len = sizeof(*v6);
        return true;
    }
    return false;
}

uint64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int usage() {
    std::fprintf(stderr, "usage: udp_tool send ADDR PORT COUNT SIZE [PPS] [TOS] [STAMPS|-] [SRC]\n"
                         "       udp_tool steps ADDR PORT SIZE SECONDS PPS...\n"
                         "       udp_tool flows ADDR PORT N COUNT PPS\n"
                         "       udp_tool spread ADDR PORT N ROUNDS SIZE PPS\n"
                         "       udp_tool recv ADDR PORT SECONDS\n"
                         "       udp_tool tcp-recv|tcp-send ADDR PORT SECONDS\n");
    return 2;
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 5)
        return usage();
    std::string mode = argv[1];
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (!resolve(argv[2], std::atoi(argv[3]), ss, len)) {
        std::fprintf(stderr, "udp_tool: bad address %s\n", argv[2]);
        return 2;
    }
    bool v6 = ss.ss_family == AF_INET6;
    if (mode == "tcp-recv" || mode == "tcp-send") {
        double seconds = std::atof(argv[4]);
        auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        int s = socket(ss.ss_family, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        std::vector<char> buf(1 << 16, 'x');
        long long bytes = 0;
        if (mode == "tcp-recv") {
            if (bind(s, reinterpret_cast<sockaddr *>(&ss), len) < 0 || listen(s, 1) < 0) {
                std::perror("bind");
                return 1;
            }
            std::printf("ready\n");
            std::fflush(stdout);
            int c = accept(s, nullptr, nullptr);
            timeval tv{0, 200000};
            setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
            std::chrono::steady_clock::time_point first{}, last{};
            while (std::chrono::steady_clock::now() < end) {
                ssize_t n = read(c, buf.data(), buf.size());
                if (n == 0)
                    break;
                if (n > 0) {
                    if (bytes == 0)
                        first = std::chrono::steady_clock::now();
                    last = std::chrono::steady_clock::now();
                    bytes += n;
                }
            }
            std::printf("bytes %lld seconds %.6f\n", bytes,
                        std::chrono::duration<double>(last - first).count());
            return 0;
        } else {
            if (connect(s, reinterpret_cast<sockaddr *>(&ss), len) < 0) {
                std::perror("connect");
                return 1;
            }
            timeval tv{0, 200000};
            setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
            while (std::chrono::steady_clock::now() < end) {
                ssize_t n = write(s, buf.data(), buf.size());
                if (n > 0)
                    bytes += n;
            }
        }
        std::printf("bytes %lld\n", bytes);
        return 0;
    }
    if (mode == "flows" && argc >= 7) {
        long n = std::atol(argv[4]), count = std::atol(argv[5]);
        double pps = std::atof(argv[6]);
        std::vector<int> fds;
        for (long i = 0; i < n; ++i)
            fds.push_back(socket(ss.ss_family, SOCK_DGRAM, 0));
        std::vector<char> payload(100, 'x');
        auto start = std::chrono::steady_clock::now();
        long sent = 0;
        for (long i = 0; i < count; ++i) {
            std::this_thread::sleep_until(start + std::chrono::duration<double>(i / pps));
            sent += sendto(fds[static_cast<size_t>(i % n)], payload.data(), payload.size(), 0,
                           reinterpret_cast<sockaddr *>(&ss), len) == 100;
        }
        std::printf("sent %ld\n", sent);
        return sent == count ? 0 : 1;
    }
    if (mode == "spread" && argc >= 8 && !v6) {
        const long n = std::atol(argv[4]), rounds = std::atol(argv[5]), size = std::atol(argv[6]);
        const double pps = std::atof(argv[7]);
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        auto *to = reinterpret_cast<sockaddr_in *>(&ss);
        const uint32_t base = ntohl(to->sin_addr.s_addr);
        std::vector<char> payload(static_cast<size_t>(size), 'x');
        auto start = std::chrono::steady_clock::now();
        long sent = 0;
        for (long i = 0; i < n * rounds; ++i) {
            // Paced in batches of 64 when fast: a sleep is coarser than one datagram's 10 us at
            // 10^5/s.
            if (pps < 64000 || i % 64 == 0)
                std::this_thread::sleep_until(start + std::chrono::duration<double>(i / pps));
            to->sin_addr.s_addr = htonl(base + static_cast<uint32_t>(i % n));
            sent += sendto(s, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr *>(to),
                           sizeof(*to)) == size;
        }
        std::printf(
            "sent %ld seconds %.3f\n", sent,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        return sent == n * rounds ? 0 : 1;
    }
    int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
    if (mode == "send" && argc >= 6) {
        long count = std::atol(argv[4]), size = std::atol(argv[5]);
        double pps = argc > 6 ? std::atof(argv[6]) : 0;
        int tos = argc > 7 ? std::atoi(argv[7]) : 0;
        const char *stamps_path = argc > 8 && std::strcmp(argv[8], "-") != 0 ? argv[8] : nullptr;
        std::vector<std::pair<uint64_t, uint64_t>> stamps;
        stamps.reserve(stamps_path ? static_cast<size_t>(count) : 0);
        if (tos)
            setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_TCLASS : IP_TOS, &tos,
                       sizeof(tos));
        if (argc > 9) { // a source address of the namespace's own (several senders, one ns)
            sockaddr_in src{};
            src.sin_family = AF_INET;
            if (inet_pton(AF_INET, argv[9], &src.sin_addr) != 1 ||
                bind(fd, reinterpret_cast<sockaddr *>(&src), sizeof(src)) < 0) {
                std::perror("bind source");
                return 2;
            }
        }
        std::vector<char> payload(static_cast<size_t>(size), 'x');
        auto start = std::chrono::steady_clock::now();
        long sent = 0;
        for (long i = 0; i < count; ++i) {
            if (pps > 0) {
                auto due = start + std::chrono::duration<double>(i / pps);
                std::this_thread::sleep_until(due);
            }
            uint64_t before = monotonic_ns();
            bool ok = sendto(fd, payload.data(), payload.size(), 0,
                             reinterpret_cast<sockaddr *>(&ss), len) == size;
            uint64_t after = monotonic_ns();
            if (ok) {
                ++sent;
                if (stamps_path)
                    stamps.emplace_back(before, after);
            }
        }
        if (stamps_path) {
            FILE *f = std::fopen(stamps_path, "w");
            if (!f) {
                std::perror(stamps_path);
                return 1;
            }
            for (auto [b, a] : stamps)
                std::fprintf(f, "%llu %llu\n", static_cast<unsigned long long>(b),
                             static_cast<unsigned long long>(a));
            std::fclose(f);
        }
        double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("sent %ld seconds %.6f\n", sent, secs);
        return sent == count ? 0 : 1;
    }
    if (mode == "steps" && argc >= 7) {
        long size = std::atol(argv[4]);
        double step = std::atof(argv[5]);
        std::vector<char> payload(static_cast<size_t>(size), 'x');
        auto start = std::chrono::steady_clock::now();
        long sent = 0, tried = 0;
        for (int k = 6; k < argc; ++k) {
            // Each step's packets are due from its own start: a late step does not shift the
            // next one.
            double pps = std::atof(argv[k]);
            auto from = start + std::chrono::duration<double>(step * (k - 6));
            long n = static_cast<long>(pps * step);
            for (long i = 0; i < n; ++i) {
                std::this_thread::sleep_until(from + std::chrono::duration<double>(i / pps));
                ++tried;
                sent += sendto(fd, payload.data(), payload.size(), 0,
                               reinterpret_cast<sockaddr *>(&ss), len) == size;
            }
            std::this_thread::sleep_until(from + std::chrono::duration<double>(step));
        }
        std::printf("sent %ld\n", sent);
        return sent == tried ? 0 : 1;
    }
    if (mode == "recv") {
        int one = 1;
        setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_RECVTCLASS : IP_RECVTOS, &one,
                   sizeof(one));
        if (bind(fd, reinterpret_cast<sockaddr *>(&ss), len) < 0) {
            std::perror("bind");
            return 1;
        }
        std::printf("ready\n");
        std::fflush(stdout);
        double seconds = std::atof(argv[4]);
        auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        long packets = 0, bytes = 0;
        std::map<int, long> tos_count;
        timeval tv{0, 100000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        while (std::chrono::steady_clock::now() < end) {
            char buf[65536], ctrl[256];
            iovec iov{buf, sizeof(buf)};
            msghdr msg{};
            msg.msg_iov = &iov;
            msg.msg_iovlen = 1;
            msg.msg_control = ctrl;
            msg.msg_controllen = sizeof(ctrl);
            ssize_t n = recvmsg(fd, &msg, 0);
            if (n < 0)
                continue;
            ++packets;
            bytes += n;
            for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
                if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) ||
                    (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS)) {
                    int t = c->cmsg_type == IP_TOS
                                ? *reinterpret_cast<unsigned char *>(CMSG_DATA(c))
                                : *reinterpret_cast<int *>(CMSG_DATA(c));
                    tos_count[t]++;
                }
        }
        std::printf("packets %ld bytes %ld", packets, bytes);
        for (auto [t, n] : tos_count)
            std::printf(" tos %d:%ld", t, n);
        std::printf("\n");
        return 0;
    }
    return usage();
}
