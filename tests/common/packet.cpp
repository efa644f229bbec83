// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// packet.cpp: see packet.hpp.
#include "packet.hpp"

#include <arpa/inet.h>
#include <cstring>
#include <stdexcept>

namespace tricolor::test {

namespace {
void put16(std::vector<uint8_t> &b, uint16_t v) {
    b.push_back(v >> 8);
    b.push_back(v & 0xff);
}
} // namespace

Packet &Packet::vlan(uint16_t id, uint16_t tpid) {
    vlans_.emplace_back(tpid, id);
    return *this;
}
Packet &Packet::ethertype(uint16_t type) {
    ethertype_ = type;
    ip_ = false;
    return *this;
}
Packet &Packet::ipv4(const std::string &src, const std::string &dst) {
    ip_ = true;
    v6_ = false;
    ethertype_ = 0x0800;
    if (inet_pton(AF_INET, src.c_str(), src_) != 1 || inet_pton(AF_INET, dst.c_str(), dst_) != 1)
        throw std::invalid_argument("bad IPv4 address");
    return *this;
}
Packet &Packet::ipv6(const std::string &src, const std::string &dst) {
    ip_ = true;
    v6_ = true;
    ethertype_ = 0x86dd;
    if (inet_pton(AF_INET6, src.c_str(), src_) != 1 || inet_pton(AF_INET6, dst.c_str(), dst_) != 1)
        throw std::invalid_argument("bad IPv6 address");
    return *this;
}
Packet &Packet::dscp(uint8_t d) {
    dscp_ = d;
    return *this;
}
Packet &Packet::ecn(uint8_t e) {
    ecn_ = e;
    return *this;
}
Packet &Packet::ip_options(size_t bytes) {
    ip_options_ = bytes;
    return *this;
}
Packet &Packet::fragment(uint16_t offset_8b, bool more) {
    frag_ = true;
    frag_offset_ = offset_8b;
    more_ = more;
    if (v6_)
        exts_.push_back({44, 8});
    return *this;
}
Packet &Packet::ext(uint8_t type, size_t bytes) {
    exts_.push_back({type, bytes});
    return *this;
}
Packet &Packet::udp(uint16_t s, uint16_t d) {
    l4_ = 17;
    l4_len_ = 8;
    sport_ = s;
    dport_ = d;
    return *this;
}
Packet &Packet::tcp(uint16_t s, uint16_t d, size_t option_bytes) {
    l4_ = 6;
    l4_len_ = 20 + option_bytes;
    tcp_options_ = option_bytes;
    sport_ = s;
    dport_ = d;
    return *this;
}
Packet &Packet::sctp(uint16_t s, uint16_t d) {
    l4_ = 132;
    l4_len_ = 12;
    sport_ = s;
    dport_ = d;
    return *this;
}
Packet &Packet::icmp() {
    l4_ = v6_ ? 58 : 1;
    l4_len_ = 8;
    return *this;
}
Packet &Packet::proto(uint8_t p) {
    l4_ = p;
    l4_len_ = 0;
    return *this;
}
Packet &Packet::payload(size_t bytes) {
    payload_ = bytes;
    return *this;
}
Packet &Packet::l3_size(size_t bytes) {
    size_t headers = l3_length() - payload_;
    if (bytes < headers)
        throw std::invalid_argument("l3_size below the headers");
    payload_ = bytes - headers;
    return *this;
}
Packet &Packet::trailer(size_t bytes) {
    trailer_ = bytes;
    return *this;
}

size_t Packet::l3_offset() const {
    return 14 + 4 * vlans_.size();
}

size_t Packet::l3_length() const {
    if (!ip_)
        return payload_;
    size_t ext = 0;
    for (const auto &e : exts_)
        ext += e.bytes;
    size_t l4 = (frag_ && frag_offset_ != 0) ? 0 : l4_len_;
    return (v6_ ? 40 + ext : 20 + ip_options_) + l4 + payload_;
}

std::vector<size_t> Packet::header_ends() const {
    std::vector<size_t> ends;
    size_t off = 14;
    ends.push_back(off);
    for (size_t i = 0; i < vlans_.size(); ++i)
        ends.push_back(off += 4);
    if (!ip_)
        return ends;
    ends.push_back(off += v6_ ? 40 : 20 + ip_options_);
    for (const auto &e : exts_)
        ends.push_back(off += e.bytes);
    if (l4_len_ && !(frag_ && frag_offset_ != 0))
        ends.push_back(off += l4_len_);
    return ends;
}

std::vector<uint8_t> Packet::build() const {
    std::vector<uint8_t> b = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
    for (auto [tpid, id] : vlans_) {
        put16(b, tpid);
        put16(b, id & 0x0fff);
    }
    put16(b, ethertype_);
    if (!ip_) {
        b.resize(b.size() + payload_ + trailer_, 0);
        return b;
    }
    size_t l3 = b.size();
    size_t total = l3_length();
    bool later = frag_ && frag_offset_ != 0;
    if (!v6_) {
        size_t ihl = 20 + ip_options_;
        b.push_back(0x40 | static_cast<uint8_t>(ihl / 4));
        b.push_back(static_cast<uint8_t>(dscp_ << 2 | (ecn_ & 3)));
        put16(b, static_cast<uint16_t>(total));
        put16(b, 0x1234);
        put16(b, frag_ ? static_cast<uint16_t>((more_ ? 0x2000 : 0) | frag_offset_) : 0x4000);
        b.push_back(64);
        b.push_back(l4_);
        put16(b, 0);
        b.insert(b.end(), src_, src_ + 4);
        b.insert(b.end(), dst_, dst_ + 4);
        for (size_t i = 0; i < ip_options_; ++i)
            b.push_back(i + 1 == ip_options_ ? 0 : 1); // NOP..., EOL
        uint16_t sum = ipv4_checksum(&b[l3], ihl);
        b[l3 + 10] = sum >> 8;
        b[l3 + 11] = sum & 0xff;
    } else {
        uint8_t tc = static_cast<uint8_t>(dscp_ << 2 | (ecn_ & 3));
        b.push_back(0x60 | tc >> 4);
        b.push_back(static_cast<uint8_t>((tc & 0x0f) << 4) | 0x0a); // flow label 0xa_bcde
        put16(b, 0xbcde);
        put16(b, static_cast<uint16_t>(total - 40));
        b.push_back(exts_.empty() ? l4_ : exts_[0].type);
        b.push_back(64);
        b.insert(b.end(), src_, src_ + 16);
        b.insert(b.end(), dst_, dst_ + 16);
        for (size_t i = 0; i < exts_.size(); ++i) {
            uint8_t next = i + 1 < exts_.size() ? exts_[i + 1].type : l4_;
            size_t start = b.size();
            b.resize(start + exts_[i].bytes, 0);
            b[start] = next;
            if (exts_[i].type == 44) {
                uint16_t fo = static_cast<uint16_t>(frag_offset_ << 3 | (more_ ? 1 : 0));
                b[start + 2] = fo >> 8;
                b[start + 3] = fo & 0xff;
            } else if (exts_[i].type == 51) {
                b[start + 1] = static_cast<uint8_t>(exts_[i].bytes / 4 - 2);
            } else {
                b[start + 1] = static_cast<uint8_t>(exts_[i].bytes / 8 - 1);
            }
        }
    }
    if (!later && l4_len_) {
        size_t l4 = b.size();
        b.resize(l4 + l4_len_, 0);
        if (l4_ == 6 || l4_ == 17 || l4_ == 132) {
            b[l4] = sport_ >> 8;
            b[l4 + 1] = sport_ & 0xff;
            b[l4 + 2] = dport_ >> 8;
            b[l4 + 3] = dport_ & 0xff;
        }
        if (l4_ == 17) {
            uint16_t ulen = static_cast<uint16_t>(8 + payload_);
            b[l4 + 4] = ulen >> 8;
            b[l4 + 5] = ulen & 0xff;
        }
        if (l4_ == 6)
            b[l4 + 12] = static_cast<uint8_t>((20 + tcp_options_) / 4) << 4;
        if (l4_ == 1 || l4_ == 58)
            b[l4] = 8; // echo request (ICMPv6: 128)
        if (l4_ == 58)
            b[l4] = 128;
    }
    b.resize(b.size() + payload_ + trailer_, 0);
    return b;
}

uint16_t ipv4_checksum(const uint8_t *hdr, size_t len) {
    uint32_t sum = 0;
    for (size_t i = 0; i + 1 < len; i += 2)
        sum += static_cast<uint32_t>(hdr[i] << 8 | hdr[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
}

} // namespace tricolor::test
