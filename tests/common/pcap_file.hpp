// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// pcap_file.hpp: captures written for the whatif tests with libpcap's own writer, in any link
// type whatif reads, microsecond or nanosecond, snapped or whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tricolor {
struct FlowTracePacket; // hier_replay.hpp, which pcap_file.cpp cannot include
}

namespace tricolor::test {

struct PcapPacket {
    uint64_t time_ns = 0;
    std::vector<uint8_t> data; // as the link type frames it
    uint32_t orig_len = 0;     // 0: data.size()
};

// Link types as libpcap numbers them (pcap/bpf.h cannot be included beside linux/bpf.h).
inline constexpr int kDltNull = 0, kDltEthernet = 1, kDltRaw = 12, kDltSll = 113, kDltSll2 = 276;

void write_pcap(const std::string &path, int dlt, bool nano, const std::vector<PcapPacket> &packets,
                uint32_t snaplen = 262144);

// An Ethernet frame of replay -f's (synthesize_frame) reframed for @dlt; with @vlans, that many
// 802.1Q tags after the Ethernet addresses (Ethernet only).
std::vector<uint8_t> reframe(const std::vector<uint8_t> &ethernet, int dlt, int vlans = 0);

// The packets of a replay -f trace, each line's frame reframed for @dlt.
std::vector<PcapPacket> trace_packets(const std::vector<FlowTracePacket> &trace, int dlt,
                                      int vlans = 0);

} // namespace tricolor::test
