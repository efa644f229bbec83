// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// hier_reference.hpp: an exact reference model of docs/spec.md §1 and §9, written from the spec and
// independent of bpf/lib/meter.h: no fill times, no capped-add helpers, 128-bit arithmetic,
// tokens in units of 1/(8*10^9) byte (or 10^-9 packet) so that R*dt is exact. The tests hold the
// model and bpf engines to it on random chains and traces.
#pragma once

#include "tricolor/datapath.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tricolor::test {

using u128 = unsigned __int128;

struct RefLevel {
    Algo algo = Algo::srtcm;
    uint64_t cir = 0, cbs = 0, second_rate = 0, second_size = 0; // EIR/EBS, PIR/PBS or 0/EBS
    bool aware = false, packet_mode = false, coupling = false, start_empty = false;
    tcm_per per = TCM_PER_AGGREGATE;
    uint8_t prefix4 = 32, prefix6 = 128; // per src/N, dst/N
    uint32_t overhead = 0;
};

struct RefBucket {
    u128 c = 0, e = 0;
    uint64_t last = 0;
    bool started = false;
};

// One §1 meter on a bucket pair, exact.
class RefMeter {
  public:
    static u128 unit(const RefLevel &l) { return l.packet_mode ? 1000000000ull : 8000000000ull; }
    static void refill(const RefLevel &l, RefBucket &b, uint64_t now) {
        if (now <= b.last)
            return;
        u128 dt = now - b.last;
        b.last = now;
        u128 csize = u128(l.cbs) * unit(l), esize = u128(l.second_size) * unit(l);
        u128 c = b.c + dt * l.cir; // < 2^64 * 2^40: fits
        u128 over = c > csize ? c - csize : 0;
        b.c = std::min(c, csize);
        u128 e = b.e + dt * (l.algo == Algo::srtcm ? 0 : l.second_rate);
        if (l.algo == Algo::srtcm || (l.algo == Algo::rfc4115 && l.coupling))
            e += over;
        b.e = std::min(e, esize);
    }
    static void start(const RefLevel &l, RefBucket &b, uint64_t now) {
        b.started = true;
        b.last = now;
        b.c = l.start_empty ? 0 : u128(l.cbs) * unit(l);
        b.e = l.start_empty ? 0 : u128(l.second_size) * unit(l);
    }
    // Colour-aware decision of one packet (in is the incoming colour); takes the tokens.
    static Color mark(const RefLevel &l, RefBucket &b, uint64_t now, uint32_t len, Color in) {
        if (!b.started)
            start(l, b, now);
        refill(l, b, now);
        u128 cost = l.packet_mode ? unit(l) : u128(len) * unit(l);
        if (l.algo == Algo::trtcm) {
            if (in == Color::red || b.e < cost)
                return Color::red;
            b.e -= cost;
            if (in == Color::yellow || b.c < cost)
                return Color::yellow;
            b.c -= cost;
            return Color::green;
        }
        if (in == Color::green && b.c >= cost) {
            b.c -= cost;
            return Color::green;
        }
        if (in != Color::red && b.e >= cost) {
            b.e -= cost;
            return Color::yellow;
        }
        return Color::red;
    }
};

// A chain (levels[0] the matched policy) with buckets per level and key.
class RefChain {
  public:
    explicit RefChain(std::vector<RefLevel> levels) : levels_(std::move(levels)) {
        buckets_.resize(levels_.size());
    }
    // @key_parts: the key each `per` picks: [aggregate, src, dst, 5tuple] as strings.
    Color mark(uint64_t now, uint32_t bytes, Color in, const std::string key_parts[4]) {
        return mark_with(now, bytes, in,
                         [&](const RefLevel &l) -> std::string { return key_parts[l.per]; });
    }
    // @key_of(level): the bucket key that level picks.
    template <typename KeyOf>
    Color mark_with(uint64_t now, uint32_t bytes, Color in, KeyOf key_of) {
        std::vector<RefBucket> next;
        std::vector<RefBucket *> at;
        std::vector<Color> level_color;
        Color c = in;
        for (size_t i = 0; i < levels_.size(); ++i) {
            const RefLevel &l = levels_[i];
            RefBucket &b = buckets_[i][key_of(l)];
            at.push_back(&b);
            next.push_back(b);
            Color incoming = (i == 0 && !l.aware) ? Color::green : c;
            c = RefMeter::mark(l, next.back(), now, bytes + l.overhead, incoming);
            level_color.push_back(c);
        }
        for (size_t i = 0; i < levels_.size(); ++i) {
            const std::string k = key_of(levels_[i]);
            if (c != Color::red)
                *at[i] = next[i];
            else if (!at[i]->started)
                RefMeter::start(levels_[i], *at[i], now);
            Usage &u = usage_[i][k];
            if (!u.seen)
                u.first = now;
            u.seen = true;
            u.last = std::max(u.last, now);
            if (c != Color::red) {
                u.passed += bytes + levels_[i].overhead;
                if (level_color[i] == Color::green)
                    u.green += bytes + levels_[i].overhead;
            }
        }
        return c;
    }
    const std::vector<RefLevel> &levels() const { return levels_; }
    const std::map<std::string, RefBucket> &buckets(size_t level) const { return buckets_[level]; }

    // What each level's key took: bytes of packets that passed, and of those it coloured
    // green (from its C bucket), over [first, last] arrival.
    struct Usage {
        bool seen = false;
        uint64_t first = 0, last = 0, passed = 0, green = 0;
    };
    // The bounds of docs/spec.md §1 at every level and key: green <= CBS + CIR*T (C alone; CIR*T
    // when flows start empty), and passed <= what both buckets can give over T. Empty if they hold,
    // else the first violation.
    std::string check_bounds() const {
        for (size_t i = 0; i < levels_.size(); ++i) {
            const RefLevel &l = levels_[i];
            for (const auto &[k, u] : usage_[i]) {
                u128 T = u.last - u.first, unit = RefMeter::unit(l);
                u128 full = l.start_empty ? 0 : 1;
                u128 green_max = full * l.cbs * unit + T * l.cir;
                u128 passed_max = 0;
                if (l.algo == Algo::trtcm)
                    passed_max = full * l.second_size * unit + T * l.second_rate;
                else if (l.algo == Algo::srtcm)
                    passed_max = full * (l.cbs + l.second_size) * unit + T * l.cir;
                else
                    passed_max =
                        full * (l.cbs + l.second_size) * unit + T * (l.cir + l.second_rate);
                if (u128(u.green) * unit > green_max || u128(u.passed) * unit > passed_max)
                    return "level " + std::to_string(i) + ": green " + std::to_string(u.green) +
                           ", passed " + std::to_string(u.passed) + " over " +
                           std::to_string(static_cast<uint64_t>(T)) + " ns exceed the bounds";
            }
        }
        return "";
    }

  private:
    std::vector<RefLevel> levels_;
    std::vector<std::map<std::string, RefBucket>> buckets_;
    std::map<std::string, Usage> usage_[TCM_MAX_LEVELS];
};

} // namespace tricolor::test

// ---- random chains and traces --------------------------------------------------------------

#include "tricolor/hier_replay.hpp"

#include <arpa/inet.h>
#include <cstring>
#include <random>

namespace tricolor::test {

// A random chain of 1 to 4 levels: its policies (ids 0..n-1; level 0 matches udp, the levels
// above are only_parent), the same levels for RefChain, and a random trace over a few flows.
struct RandomCase {
    std::vector<Policy> policies;
    std::vector<RefLevel> levels;
    std::vector<FlowTracePacket> trace;
};

inline RandomCase random_case(std::mt19937_64 &rng, size_t packets, int levels = 0) {
    auto pick = [&](uint64_t lo, uint64_t hi) {
        return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
    };
    RandomCase rc;
    size_t n = levels ? levels : pick(1, TCM_MAX_LEVELS);
    for (size_t i = 0; i < n; ++i) {
        RefLevel l;
        Policy p;
        p.id = static_cast<uint32_t>(i);
        p.name = "l" + std::to_string(i);
        l.algo = algorithms()[pick(0, algorithms().size() - 1)].algo;
        // Around 10..400 kB/s and bursts of 1.5..30 kB against ~600-byte packets every
        // ~2 ms from a few flows: every colour turns up at every level.
        l.cir = pick(80000, 3200000);
        l.cbs = pick(1500, 30000);
        p.meter.algo = l.algo;
        p.meter.cir = l.cir;
        p.meter.cbs = l.cbs;
        switch (l.algo) {
        case Algo::srtcm:
            l.second_size = pick(0, 3) == 0 ? 0 : pick(1, 30000);
            p.meter.ebs = l.second_size;
            break;
        case Algo::trtcm:
            l.second_rate = l.cir + pick(0, 3200000);
            l.second_size = pick(1500, 30000);
            p.meter.pir = l.second_rate;
            p.meter.pbs = l.second_size;
            break;
        case Algo::rfc4115:
            l.second_rate = pick(0, 3) == 0 ? 0 : pick(1, 3200000);
            l.second_size = pick(0, 30000);
            l.coupling = pick(0, 1);
            p.meter.eir = l.second_rate;
            p.meter.ebs = l.second_size;
            p.meter.coupling = l.coupling;
            break;
        }
        l.start_empty = pick(0, 3) == 0;
        p.meter.start_empty = l.start_empty;
        l.aware = i == 0 && pick(0, 1);
        p.meter.color_aware = l.aware;
        l.per = static_cast<tcm_per>(pick(0, 3));
        p.per = l.per;
        if ((l.per == TCM_PER_SRC || l.per == TCM_PER_DST) && pick(0, 2) == 0) {
            l.prefix4 = p.prefix4 = 24; // src/24, src/64 for IPv6: one bucket for the trace's
            l.prefix6 = p.prefix6 = 64; // neighbours
        }
        l.overhead = pick(0, 2) == 0 ? 24 : 0;
        p.overhead = l.overhead;
        if (i == 0)
            p.match.proto = 17;
        else
            p.only_parent = true;
        if (i + 1 < n)
            p.parent = "l" + std::to_string(i + 1);
        rc.policies.push_back(p);
        rc.levels.push_back(l);
    }
    uint64_t t = pick(0, 1ull << 40);
    for (size_t k = 0; k < packets; ++k) {
        FlowTracePacket p;
        switch (pick(0, 9)) {
        case 0:
            t += pick(0, 3000000000ull); // an idle
            break;
        case 1:
        case 2:
            break; // back to back
        default:
            t += pick(0, 4000000);
        }
        p.time_ns = t;
        p.bytes = static_cast<uint32_t>(pick(0, 3) == 0 ? 1500 : pick(28, 1500));
        p.color = static_cast<Color>(pick(0, 2));
        if (pick(0, 4) == 0) { // IPv6: 2001:db8::x to 2001:db8:0:9::y
            p.ipv6 = true;
            p.src = {0x20, 0x01, 0x0d, 0xb8};
            p.dst = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 9};
            p.src[15] = static_cast<uint8_t>(pick(1, 3));
            p.dst[15] = static_cast<uint8_t>(pick(1, 2));
            p.bytes = std::max<uint32_t>(p.bytes, 48);
        } else {
            uint32_t src = htonl(0xc6120700 | static_cast<uint32_t>(pick(1, 3))); // 198.18.7.x
            uint32_t dst = htonl(0xc6120900 | static_cast<uint32_t>(pick(1, 2))); // 198.18.9.x
            std::memcpy(p.src.data(), &src, 4);
            std::memcpy(p.dst.data(), &dst, 4);
        }
        p.proto = pick(0, 7) == 0 ? 6 : 17; // some tcp: unclassified
        // Room for the headers, as a trace line must have (the sanitizer build found TCP
        // packets of 28 bytes written past the frame's end).
        p.bytes = std::max<uint32_t>(p.bytes, (p.ipv6 ? 40u : 20u) + (p.proto == 6 ? 20u : 8u));
        p.ports = true;
        p.sport = static_cast<uint16_t>(1000 + pick(0, 1));
        p.dport = 7000;
        rc.trace.push_back(p);
    }
    return rc;
}

// The packet through RefChain, each level keyed by its own `per` and prefix length.
inline Color ref_mark(RefChain &chain, const FlowTracePacket &p) {
    auto masked = [&](const std::array<uint8_t, 16> &addr, unsigned bits) {
        std::string a(reinterpret_cast<const char *>(addr.data()), p.ipv6 ? 16 : 4);
        for (size_t i = 0; i < a.size(); ++i) {
            unsigned keep = bits > 8 * i ? std::min(8u, bits - static_cast<unsigned>(8 * i)) : 0;
            a[i] = static_cast<char>(a[i] & (keep ? 0xff << (8 - keep) : 0));
        }
        return std::string(1, p.ipv6 ? '6' : '4') + a;
    };
    auto key_of = [&](const RefLevel &l) -> std::string {
        unsigned bits = p.ipv6 ? l.prefix6 : l.prefix4;
        switch (l.per) {
        case TCM_PER_SRC:
            return masked(p.src, bits);
        case TCM_PER_DST:
            return masked(p.dst, bits);
        case TCM_PER_5TUPLE:
            return masked(p.src, 128) + masked(p.dst, 128) + std::to_string(p.proto) + ":" +
                   std::to_string(p.sport) + ":" + std::to_string(p.dport);
        default:
            return "";
        }
    };
    return chain.mark_with(p.time_ns, p.bytes, p.color, key_of);
}

} // namespace tricolor::test
