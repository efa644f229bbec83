// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// packet.hpp: a small fluent builder of test frames: Ethernet, VLAN tags, IPv4 (options,
// fragments) or IPv6 (extension headers), TCP/UDP/SCTP/ICMP, with every length field and the
// IPv4 header checksum filled in, and the offsets of each header kept for truncation tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tricolor::test {

class Packet {
  public:
    Packet &vlan(uint16_t id, uint16_t tpid = 0x8100);
    Packet &ethertype(uint16_t type); // a non-IP frame (ARP: 0x0806)
    Packet &ipv4(const std::string &src, const std::string &dst);
    Packet &ipv6(const std::string &src, const std::string &dst);
    Packet &dscp(uint8_t dscp);
    Packet &ecn(uint8_t ecn);
    Packet &ip_options(size_t bytes); // IPv4 options, a multiple of 4 (NOPs then EOL)
    Packet &fragment(uint16_t offset_8b,
                     bool more);             // IPv4 flags/offset, or an IPv6 fragment header
    Packet &ext(uint8_t type, size_t bytes); // IPv6 extension header of @bytes (multiple of 8)
    Packet &udp(uint16_t sport, uint16_t dport);
    Packet &tcp(uint16_t sport, uint16_t dport, size_t option_bytes = 0);
    Packet &sctp(uint16_t sport, uint16_t dport);
    Packet &icmp();
    Packet &proto(uint8_t proto); // an L4 protocol with no header we parse
    Packet &payload(size_t bytes);
    Packet &l3_size(size_t bytes); // pad the payload so the IP packet is @bytes long
    Packet &trailer(size_t bytes); // bytes after the IP packet (Ethernet padding)

    std::vector<uint8_t> build() const;
    // Offsets where each header ends in build(): truncating inside [14, last) cuts a header.
    std::vector<size_t> header_ends() const;
    size_t l3_offset() const;
    size_t l3_length() const;

  private:
    struct Ext {
        uint8_t type;
        size_t bytes;
    };
    std::vector<std::pair<uint16_t, uint16_t>> vlans_;
    uint16_t ethertype_ = 0x0800;
    bool ip_ = false, v6_ = false;
    uint8_t src_[16] = {}, dst_[16] = {};
    uint8_t dscp_ = 0, ecn_ = 0;
    size_t ip_options_ = 0;
    bool frag_ = false, more_ = false;
    uint16_t frag_offset_ = 0;
    std::vector<Ext> exts_;
    uint8_t l4_ = 0;
    size_t l4_len_ = 0;
    uint16_t sport_ = 0, dport_ = 0;
    size_t tcp_options_ = 0;
    size_t payload_ = 0, trailer_ = 0;
};

// The IPv4 header checksum over @len bytes at @hdr: 0 when the header is consistent.
uint16_t ipv4_checksum(const uint8_t *hdr, size_t len);

} // namespace tricolor::test
