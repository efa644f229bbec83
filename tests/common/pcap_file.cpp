// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// pcap_file.cpp: the writer alone, apart from the tricolor headers (linux/bpf.h).
#include "pcap_file.hpp"

#include <pcap/pcap.h>

#include <stdexcept>

namespace tricolor::test {

void write_pcap(const std::string &path, int dlt, bool nano, const std::vector<PcapPacket> &packets,
                uint32_t snaplen) {
    pcap_t *p = pcap_open_dead_with_tstamp_precision(dlt, static_cast<int>(snaplen),
                                                     nano ? PCAP_TSTAMP_PRECISION_NANO
                                                          : PCAP_TSTAMP_PRECISION_MICRO);
    if (!p)
        throw std::runtime_error("pcap_open_dead failed");
    pcap_dumper_t *d = pcap_dump_open(p, path.c_str());
    if (!d) {
        std::string e = pcap_geterr(p);
        pcap_close(p);
        throw std::runtime_error("pcap_dump_open: " + e);
    }
    for (const PcapPacket &pkt : packets) {
        pcap_pkthdr h{};
        h.ts.tv_sec = static_cast<time_t>(pkt.time_ns / 1000000000u);
        uint64_t frac = pkt.time_ns % 1000000000u;
        h.ts.tv_usec = static_cast<suseconds_t>(nano ? frac : frac / 1000);
        h.caplen = std::min<uint32_t>(static_cast<uint32_t>(pkt.data.size()), snaplen);
        h.len = pkt.orig_len ? pkt.orig_len : static_cast<uint32_t>(pkt.data.size());
        pcap_dump(reinterpret_cast<u_char *>(d), &h, pkt.data.data());
    }
    pcap_dump_close(d);
    pcap_close(p);
}

} // namespace tricolor::test
