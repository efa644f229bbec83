// hier_reference.hpp: an exact reference model of SPEC §1 and §9, written from the spec and
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
    tc_per per = TC_PER_AGGREGATE;
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
        std::vector<RefBucket> next;
        std::vector<RefBucket *> at;
        Color c = in;
        for (size_t i = 0; i < levels_.size(); ++i) {
            const RefLevel &l = levels_[i];
            RefBucket &b = buckets_[i][key_parts[l.per]];
            at.push_back(&b);
            next.push_back(b);
            Color incoming = (i == 0 && !l.aware) ? Color::green : c;
            c = RefMeter::mark(l, next.back(), now, bytes + l.overhead, incoming);
        }
        for (size_t i = 0; i < levels_.size(); ++i) {
            if (c != Color::red)
                *at[i] = next[i];
            else if (!at[i]->started)
                RefMeter::start(levels_[i], *at[i], now);
            // Per-level admitted bytes, for the bounds.
            if (c != Color::red)
                admitted_[i][key_parts[levels_[i].per]] += bytes + levels_[i].overhead;
        }
        return c;
    }
    const std::vector<RefLevel> &levels() const { return levels_; }
    const std::map<std::string, RefBucket> &buckets(size_t level) const { return buckets_[level]; }
    const std::map<std::string, uint64_t> &admitted(size_t level) const { return admitted_[level]; }

  private:
    std::vector<RefLevel> levels_;
    std::vector<std::map<std::string, RefBucket>> buckets_;
    std::map<std::string, uint64_t> admitted_[TC_MAX_LEVELS];
};

} // namespace tricolor::test
