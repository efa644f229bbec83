// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// pcap_frames.cpp: replay -f's frames reframed for each link type the whatif tests write.
#include "pcap_file.hpp"

#include "tricolor/hier_replay.hpp"

#include <stdexcept>

namespace tricolor::test {

std::vector<uint8_t> reframe(const std::vector<uint8_t> &eth, int dlt, int vlans) {
    std::vector<uint8_t> ip(eth.begin() + 14, eth.end());
    const uint8_t t0 = eth[12], t1 = eth[13];
    switch (dlt) {
    case kDltEthernet: {
        std::vector<uint8_t> f(eth.begin(), eth.begin() + 12);
        for (int i = 0; i < vlans; ++i) {
            uint16_t vid = static_cast<uint16_t>(100 + i);
            f.insert(f.end(),
                     {0x81, 0x00, static_cast<uint8_t>(vid >> 8), static_cast<uint8_t>(vid)});
        }
        f.insert(f.end(), {t0, t1});
        f.insert(f.end(), ip.begin(), ip.end());
        return f;
    }
    case kDltSll: { // packet type 0 (to us), ARPHRD_ETHER, 6-byte address
        std::vector<uint8_t> f = {0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, t0, t1};
        f.insert(f.end(), ip.begin(), ip.end());
        return f;
    }
    case kDltSll2: { // protocol, reserved, ifindex 2, ARPHRD_ETHER, type 0, 6-byte address
        std::vector<uint8_t> f = {t0, t1, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0};
        f.insert(f.end(), ip.begin(), ip.end());
        return f;
    }
    case kDltRaw:
        return ip;
    default:
        throw std::invalid_argument("reframe: link type not written by the tests");
    }
}

std::vector<PcapPacket> trace_packets(const std::vector<FlowTracePacket> &trace, int dlt,
                                      int vlans) {
    std::vector<PcapPacket> out;
    for (const FlowTracePacket &p : trace)
        out.push_back({p.time_ns, reframe(synthesize_frame(p), dlt, vlans), 0});
    return out;
}

} // namespace tricolor::test
