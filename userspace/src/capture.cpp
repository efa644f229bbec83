// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// capture.cpp: see capture.hpp. libpcap reads both formats and both timestamp resolutions
// (opened at nanosecond precision, it scales a microsecond file's stamps); this file only
// reframes each packet as Ethernet and names what goes wrong.
#include "tricolor/capture.hpp"

#include <pcap/pcap.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace tricolor {

struct CaptureReader::Pcap {
    pcap_t *p = nullptr;
    ~Pcap() {
        if (p)
            pcap_close(p);
    }
};

namespace {

constexpr uint32_t kEthLen = 14;
// The largest frame handed to the data path: an IP packet cannot be longer than 64 KiB, and a
// few VLAN tags on top. (A capture taken before segmentation offload can record larger ones.)
constexpr uint32_t kMaxFrame = kEthLen + 8 * 4 + 65535;

struct Link {
    uint32_t header = 0;   // bytes of the capture's link header that are dropped
    int proto_at = -1;     // where its EtherType is (-1: from the IP version nibble)
    bool ethernet = false; // the packet is an Ethernet frame already
};

std::optional<Link> link_of(int dlt) {
    switch (dlt) {
    case DLT_EN10MB:
        return Link{.header = 0, .proto_at = -1, .ethernet = true};
    case DLT_LINUX_SLL: // packet type, ARPHRD, address length, 8 address bytes, protocol
        return Link{.header = 16, .proto_at = 14};
    case DLT_LINUX_SLL2: // protocol, reserved, ifindex, ARPHRD, packet type, address length...
        return Link{.header = 20, .proto_at = 0};
    case DLT_RAW:
    case DLT_IPV4:
    case DLT_IPV6:
        return Link{.header = 0, .proto_at = -1};
    default:
        return std::nullopt;
    }
}

} // namespace

Result<std::unique_ptr<CaptureReader>> CaptureReader::open(const std::string &path) {
    char err[PCAP_ERRBUF_SIZE] = {};
    std::unique_ptr<CaptureReader> r(new CaptureReader);
    r->pcap_ = std::make_unique<Pcap>();
    r->name_ = path == "-" ? "stdin" : path;
    r->pcap_->p =
        pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
    if (!r->pcap_->p) {
        std::string why = err;
        if (why.find("unknown file format") != std::string::npos)
            return std::unexpected(
                fmt::format("{}: not a pcap or pcapng capture ({})", r->name_, why));
        if (why.starts_with(path)) // libpcap names the file when it cannot open it
            return std::unexpected(why);
        return std::unexpected(fmt::format("{}: {}", r->name_, why));
    }
    r->link_ = pcap_datalink(r->pcap_->p);
    if (!link_of(r->link_)) {
        const char *name = pcap_datalink_val_to_name(r->link_);
        const char *desc = pcap_datalink_val_to_description(r->link_);
        return std::unexpected(fmt::format(
            "{}: link type {} ({}{}) is not one whatif reads: Ethernet (EN10MB), Linux cooked "
            "(LINUX_SLL, LINUX_SLL2) or raw IP (RAW, IPV4, IPV6)",
            r->name_, name ? name : std::to_string(r->link_), desc ? desc : "unknown",
            name ? fmt::format(", {}", r->link_) : ""));
    }
    struct stat st {};
    if (path != "-" && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
        r->size_ = static_cast<uint64_t>(st.st_size);
    return r;
}

CaptureReader::~CaptureReader() = default;

std::string CaptureReader::link_type() const {
    const char *name = pcap_datalink_val_to_name(link_);
    return name ? name : std::to_string(link_);
}

double CaptureReader::progress() const {
    if (!size_)
        return 0;
    FILE *f = pcap_file(pcap_->p);
    long at = f ? ftell(f) : -1;
    return at < 0 ? 0 : std::min(1.0, static_cast<double>(at) / static_cast<double>(size_));
}

Result<std::optional<CapturedPacket>> CaptureReader::next() {
    pcap_pkthdr *h = nullptr;
    const u_char *data = nullptr;
    int rc = pcap_next_ex(pcap_->p, &h, &data);
    if (rc == PCAP_ERROR_BREAK)
        return std::optional<CapturedPacket>{};
    if (rc != 1)
        return std::unexpected(
            fmt::format("{}: packet {}: {}", name_, count_ + 1, pcap_geterr(pcap_->p)));
    CapturedPacket pkt;
    pkt.number = ++count_;
    // Nanoseconds at this precision; a stamp past 2^64 ns (the year 2554) is not one.
    if (h->ts.tv_sec < 0 || static_cast<uint64_t>(h->ts.tv_sec) >= UINT64_MAX / 1000000000u ||
        h->ts.tv_usec < 0 || h->ts.tv_usec >= 1000000000)
        return std::unexpected(fmt::format("{}: packet {}: timestamp {} s + {} ns is out of range",
                                           name_, pkt.number, static_cast<int64_t>(h->ts.tv_sec),
                                           static_cast<int64_t>(h->ts.tv_usec)));
    pkt.time_ns =
        static_cast<uint64_t>(h->ts.tv_sec) * 1000000000u + static_cast<uint64_t>(h->ts.tv_usec);
    pkt.caplen = h->caplen;
    pkt.orig_len = std::max(h->len, h->caplen);
    Link link = *link_of(link_);
    if (pkt.caplen < link.header ||
        (link.proto_at >= 0 && pkt.caplen < static_cast<uint32_t>(link.proto_at) + 2))
        return std::unexpected(fmt::format("{}: packet {}: {} bytes cannot hold its {} link header",
                                           name_, pkt.number, pkt.caplen, link_type()));
    // In 64 bits: a record's length is the file's word, up to 2^32 - 1. The frame is at least an
    // Ethernet header (a runt is then not IP: counted apart) and at most kMaxFrame (the
    // kernel's test run takes no more); a longer packet keeps its first kMaxFrame bytes, which
    // the data path finds shorter than its IP header says (malformed, as it would be).
    const uint64_t head = link.ethernet ? 0 : kEthLen;
    const uint64_t body = std::min<uint64_t>(pkt.caplen - link.header, kMaxFrame - head);
    const uint64_t whole = uint64_t{pkt.orig_len} - link.header;
    pkt.frame.assign(std::clamp<uint64_t>(head + whole, kEthLen, kMaxFrame), 0);
    std::memcpy(pkt.frame.data() + head, data + link.header, body);
    if (!link.ethernet) {
        uint16_t proto;
        if (link.proto_at >= 0) {
            proto = static_cast<uint16_t>(data[link.proto_at] << 8 | data[link.proto_at + 1]);
        } else {
            // Raw IP: the version nibble says which (anything else is left for the data path
            // to count as not IP).
            unsigned version = body ? data[link.header] >> 4 : 0;
            proto = version == 4 ? 0x0800 : version == 6 ? 0x86dd : 0;
        }
        pkt.frame[12] = static_cast<uint8_t>(proto >> 8);
        pkt.frame[13] = static_cast<uint8_t>(proto);
    }
    return std::optional<CapturedPacket>{std::move(pkt)};
}

} // namespace tricolor
