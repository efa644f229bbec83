// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The capture reader of `tricolorctl whatif` (libpcap, pcap and pcapng) and the frame parser
// that names a packet's flow. Properties: no crash or sanitizer finding; packets are numbered
// 1, 2, ... in order; every frame the reader hands on has at least an Ethernet header; a read
// that fails names the packet it failed at (the next number); a frame's IP length, when it is
// IP, is what its IP header says, never more than 64 KiB plus the IPv6 header.
#include "fuzz.hpp"

#include "tricolor/capture.hpp"
#include "tricolor/whatif.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // libpcap reads files: the input as one in memory.
    static int fd = memfd_create("capture_fuzz", 0);
    FUZZ_REQUIRE(fd >= 0, "memfd_create failed");
    FUZZ_REQUIRE(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == static_cast<ssize_t>(size),
                 "writing the input failed");
    auto reader = tricolor::CaptureReader::open("/proc/self/fd/" + std::to_string(fd));
    if (!reader)
        return 0;
    uint64_t expect = 1;
    for (;; ++expect) {
        auto next = (*reader)->next();
        if (!next) {
            FUZZ_REQUIRE(next.error().find("packet " + std::to_string(expect) + ":") !=
                             std::string::npos,
                         "the error names packet %llu: %s", static_cast<unsigned long long>(expect),
                         next.error().c_str());
            break;
        }
        if (!*next)
            break;
        const tricolor::CapturedPacket &p = **next;
        FUZZ_REQUIRE(p.number == expect, "packet %llu numbered %llu",
                     static_cast<unsigned long long>(expect),
                     static_cast<unsigned long long>(p.number));
        FUZZ_REQUIRE(p.frame.size() >= 14, "a %zu-byte frame", p.frame.size());
        if (auto f = tricolor::frame_flow(p.frame))
            FUZZ_REQUIRE(f->bytes <= 65535u + 40u, "an IP length of %u", f->bytes);
    }
    return 0;
}
