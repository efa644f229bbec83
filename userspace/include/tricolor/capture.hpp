// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// capture.hpp: a pcap or pcapng file read one packet at a time (libpcap), each packet turned into
// the Ethernet frame the data path parses: `tricolorctl whatif` (docs/spec.md §12). Link types:
// Ethernet (VLAN tags stay in the frame: the data path walks them), Linux cooked v1 and v2, and
// raw IP; anything else is refused by name. Memory is one packet, whatever the capture's size.
#pragma once

#include "tricolor/result.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tricolor {

struct CapturedPacket {
    uint64_t number = 0;   // 1 for the capture's first packet
    uint64_t time_ns = 0;  // the capture's timestamp, nanoseconds since the epoch
    uint32_t caplen = 0;   // bytes the capture kept
    uint32_t orig_len = 0; // bytes on the wire (as the capture's link type framed them)
    // Ethernet, then the packet after the capture's link header; a snapped packet is padded with
    // zeroes to its original length, so that the data path meters it whole.
    std::vector<uint8_t> frame;
};

class CaptureReader {
  public:
    // "-" reads standard input. Errors name the file and what libpcap said.
    static Result<std::unique_ptr<CaptureReader>> open(const std::string &path);
    ~CaptureReader();
    CaptureReader(const CaptureReader &) = delete;
    CaptureReader &operator=(const CaptureReader &) = delete;

    // The next packet, std::nullopt at the end; a packet cut short by the file's end, or a
    // corrupt record, is an error naming its number.
    Result<std::optional<CapturedPacket>> next();
    // The link type's name, as libpcap names it ("EN10MB", "LINUX_SLL2", "RAW").
    std::string link_type() const;
    // How far into the file the reader is, 0 to 1 (0 when the size is unknown: a pipe).
    double progress() const;

  private:
    CaptureReader() = default;
    struct Pcap;
    std::unique_ptr<Pcap> pcap_;
    std::string name_;
    int link_ = 0;
    uint64_t size_ = 0; // bytes of the file, 0 if not a regular file
    uint64_t count_ = 0;
};

} // namespace tricolor
