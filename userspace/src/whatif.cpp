// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// whatif.cpp: see whatif.hpp. The packet's verdict is the data path's own (tcm_test_last_*); this
// file reads the frame's addresses only to name flows and to count bytes as replay -f does.
#include "tricolor/whatif.hpp"

#include "tricolor/capture.hpp"

#include <algorithm>
#include <cstring>
#include <ostream>
#include <unordered_map>

#include <fmt/format.h>

namespace tricolor {
namespace {

constexpr uint64_t kSecond = 1000000000;
constexpr uint64_t kFirstBinNs = 1000000; // 1 ms, doubled until the capture fits kWhatIfMaxBins

uint16_t be16(const uint8_t *p) {
    return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

} // namespace

std::optional<FlowTracePacket> frame_flow(const std::vector<uint8_t> &f) {
    size_t off = 12;
    if (f.size() < off + 2)
        return std::nullopt;
    uint16_t type = be16(&f[off]);
    for (int tags = 0; (type == 0x8100 || type == 0x88a8) && tags < 8; ++tags) {
        off += 4;
        if (f.size() < off + 2)
            return std::nullopt;
        type = be16(&f[off]);
    }
    off += 2;
    FlowTracePacket p;
    size_t l4 = 0;
    bool first_fragment = true;
    if (type == 0x0800) {
        if (f.size() < off + 20 || f[off] >> 4 != 4)
            return std::nullopt;
        size_t ihl = (f[off] & 0xf) * 4u;
        p.bytes = be16(&f[off + 2]);
        // What the data path calls malformed (parse.h): not counted as IP here either.
        if (ihl < 20 || p.bytes < ihl || p.bytes > f.size() - off || f.size() < off + ihl)
            return std::nullopt;
        p.proto = f[off + 9];
        first_fragment = (be16(&f[off + 6]) & 0x1fff) == 0;
        std::memcpy(p.src.data(), &f[off + 12], 4);
        std::memcpy(p.dst.data(), &f[off + 16], 4);
        l4 = off + ihl;
    } else if (type == 0x86dd) {
        if (f.size() < off + 40 || f[off] >> 4 != 6)
            return std::nullopt;
        p.ipv6 = true;
        p.bytes = 40u + be16(&f[off + 4]);
        if (p.bytes > f.size() - off)
            return std::nullopt;
        std::memcpy(p.src.data(), &f[off + 8], 16);
        std::memcpy(p.dst.data(), &f[off + 24], 16);
        uint8_t nh = f[off + 6];
        l4 = off + 40;
        // Hop-by-hop, routing, destination options, fragment and AH: the data path walks them.
        for (int i = 0; i < 8 && f.size() >= l4 + 8; ++i) {
            if (nh == 0 || nh == 43 || nh == 60) {
                nh = f[l4];
                l4 += (f[l4 + 1] + 1u) * 8;
            } else if (nh == 44) {
                first_fragment = (be16(&f[l4 + 2]) & 0xfff8) == 0;
                nh = f[l4];
                l4 += 8;
            } else if (nh == 51) {
                nh = f[l4];
                l4 += (f[l4 + 1] + 2u) * 4;
            } else {
                break;
            }
        }
        p.proto = nh;
    } else {
        return std::nullopt;
    }
    if (protocol_has_ports(p.proto) && first_fragment && f.size() >= l4 + 4) {
        p.ports = true;
        p.sport = be16(&f[l4]);
        p.dport = be16(&f[l4 + 2]);
    }
    return p;
}

namespace {

// A flow's key as bytes: family, addresses, protocol, ports and the policy it matched.
std::string flow_key(const FlowTracePacket &p, uint32_t policy) {
    std::string k(1 + 32 + 1 + 4 + 4, '\0');
    k[0] = p.ipv6;
    std::memcpy(&k[1], p.src.data(), 16);
    std::memcpy(&k[17], p.dst.data(), 16);
    k[33] = static_cast<char>(p.proto);
    uint16_t ports[2] = {p.sport, p.dport};
    std::memcpy(&k[34], ports, 4);
    std::memcpy(&k[38], &policy, 4);
    return k;
}

// The policy's plot state: the bin being filled and its bucket, as of the last packet.
struct Track {
    size_t index = 0; // into the result's policies
    bool keyed = false;
    bool empty = false; // start: empty
    tcm_meter_config cfg{};
    tcm_meter_state state{}; // after this policy's last packet
    bool started = false;
    tcm_policy_ext ext{}; // --warmup, --quota
    tcm_ext_state ext_state{};
    uint64_t red_second = 0, red_in_second = 0;
};

class Runner {
  public:
    Runner(HierBpfEngine &engine, const std::vector<Policy> &policies, const WhatIfOptions &o)
        : options_(o), engine_(engine) {
        for (const Policy &p : policies) {
            WhatIfPolicy w;
            w.id = p.id;
            w.name = p.name;
            w.levels = p.per == TCM_PER_AGGREGATE;
            Track t;
            t.index = result_.policies.size();
            t.keyed = !w.levels;
            t.empty = p.meter.start_empty;
            t.cfg = make_meter_config(p.meter);
            t.ext = make_policy_ext(p.meter);
            w.cold_factor = t.ext.warm.k;
            w.quota = t.ext.quota.bytes;
            track_[p.id] = t;
            names_[p.id] = p.name;
            for (const Policy &q : policies)
                if (!p.parent.empty() && q.name == p.parent)
                    parent_[p.id] = q.id;
            result_.policies.push_back(std::move(w));
        }
        result_.bin_ns = kFirstBinNs;
    }

    Result<WhatIfResult> run(const std::string &path) {
        auto reader = CaptureReader::open(path);
        if (!reader)
            return std::unexpected(reader.error());
        result_.link_type = (*reader)->link_type();
        std::string out;
        for (;;) {
            auto next = (*reader)->next();
            if (!next)
                return std::unexpected(next.error() +
                                       " (no result: the capture was not read to its end)");
            if (!*next)
                break;
            try {
                packet(**next, out);
            } catch (const std::exception &e) {
                return std::unexpected(fmt::format(
                    "{}: packet {}: {}", path == "-" ? "stdin" : path, (*next)->number, e.what()));
            }
            if (options_.packets && out.size() > (1 << 16) - 256)
                flush(out);
            if (options_.progress && (result_.packets & 0xffff) == 0)
                options_.progress((*reader)->progress(), result_.packets);
        }
        flush(out);
        if (options_.plot)
            close_bins(result_.duration_ns);
        finish_flows();
        return std::move(result_);
    }

  private:
    void flush(std::string &out) {
        if (options_.packets)
            options_.packets->write(out.data(), static_cast<std::streamsize>(out.size()));
        out.clear();
    }

    void packet(const CapturedPacket &cp, std::string &out) {
        if (result_.packets++ == 0) {
            first_ns_ = cp.time_ns;
            // The data path meters at times from the first packet; a quota's periods are the
            // capture's own UTC.
            engine_.set_wall_offset(first_ns_);
        }
        // A stamp that goes back is passed as it is (the data path meters it as no time passing,
        // docs/spec.md §2), and printed as it is, as replay -f prints its line; only a stamp
        // before the first packet's is taken as the first's.
        uint64_t t = cp.time_ns >= first_ns_ ? cp.time_ns - first_ns_ : 0;
        const bool back = cp.time_ns < first_ns_ || t < last_ns_;
        if (back && result_.backwards++ == 0)
            result_.first_backwards = fmt::format(
                "packet {}, {} ns before packet {}", cp.number,
                cp.time_ns < first_ns_ ? first_ns_ - cp.time_ns + last_ns_ : last_ns_ - t,
                latest_number_);
        if (!back)
            latest_number_ = cp.number;
        const uint64_t t_meter = std::max(t, last_ns_);
        last_ns_ = t_meter;
        result_.duration_ns = t_meter;
        if (options_.plot)
            close_bins(t_meter);

        auto flow = frame_flow(cp.frame);
        HierVerdict v = engine_.mark_frame(t, cp.frame);
        if (!flow) {
            result_.not_ip_packets += 1;
            result_.not_ip_bytes += cp.frame.size() - 14;
            if (options_.packets)
                fmt::format_to(std::back_inserter(out), "{},{},{},-\n", t, cp.frame.size() - 14,
                               to_string(Color::green));
            return;
        }
        uint32_t bytes = flow->bytes;
        if (!v.policy_id) {
            result_.unclassified.add(Color::green, bytes);
        } else {
            // At its policy and each parent above it, with the colour the chain gave it.
            for (auto id = v.policy_id; id; id = parent_of(*id))
                count(track_.at(*id), t_meter, v.color, bytes);
        }
        if (options_.flows) {
            uint32_t id = v.policy_id ? *v.policy_id : UINT32_MAX;
            auto &f = flows_[flow_key(*flow, id)];
            if (f.policy.empty()) {
                f.key = *flow;
                f.policy = v.policy_id ? names_[id] : "-";
            }
            f.counts.add(v.policy_id ? v.color : Color::green, bytes);
        }
        if (options_.packets)
            fmt::format_to(std::back_inserter(out), "{},{},{},{}\n", t, bytes, to_string(v.color),
                           v.policy_id ? names_[*v.policy_id] : "-");
    }

    std::optional<uint32_t> parent_of(uint32_t id) const {
        auto it = parent_.find(id);
        return it == parent_.end() ? std::nullopt : std::optional<uint32_t>{it->second};
    }

    void count(Track &tr, uint64_t t, Color color, uint32_t bytes) {
        WhatIfPolicy &w = result_.policies[tr.index];
        w.counts.add(color, bytes);
        if (color == Color::red) {
            uint64_t second = t / kSecond;
            if (second != tr.red_second)
                tr.red_second = second, tr.red_in_second = 0;
            tr.red_in_second += bytes;
            if (tr.red_in_second > w.peak_red_bytes)
                w.peak_red_bytes = tr.red_in_second, w.peak_red_second = second;
        }
        if (options_.plot) {
            WhatIfBin &b = bin(w);
            b.bytes[static_cast<size_t>(color)] += bytes;
            if (!tr.keyed) {
                tcm_flow s = engine_.datapath().policy_state(w.id);
                tr.state = s.meter;
                tr.started = s.flags & TCM_FLOW_F_STARTED;
                if (tr.ext.warm.d_ns || tr.ext.quota.bytes) {
                    tcm_flow_id key{};
                    key.head = TCM_FLOW_HEAD(w.id, 0);
                    tr.ext_state = engine_.datapath().ext_state(key).value_or(tcm_ext_state{});
                    note_ext(tr, tr.ext_state, b, t); // the open bin's, until it ends
                }
                note_level(tr, b, tr.state);
            }
        }
    }

    // The warm-up's step and the quota's use at @t (the capture's, from its first packet).
    void note_ext(const Track &tr, const tcm_ext_state &x, WhatIfBin &b, uint64_t t) const {
        if (tr.ext.warm.d_ns)
            b.warm_step = !x.started ? 1 : warm_step(tr.ext.warm, x.warm, t);
        if (tr.ext.quota.bytes)
            b.quota_used =
                x.quota.period_end && first_ns_ + t < x.quota.period_end ? x.quota.used : 0;
    }

    // The step a warm-up started at @ws.start_ns fills at, at @t: 1..K, K + 1 once warm (the
    // meter's own count of steps, on its time in 1/K ns).
    static uint32_t warm_step(const tcm_warm_config &w, const tcm_warm_state &ws, uint64_t t) {
        if (t <= ws.start_ns)
            return 1;
        if (t - ws.start_ns >= w.d_ns)
            return w.k + 1;
        return static_cast<uint32_t>(meter_warm_steps(w.d_ns, (t - ws.start_ns) * w.k)) + 1;
    }

    static uint64_t units(const tcm_meter_config &cfg, uint64_t tokens) {
        return cfg.unit_tokens ? tokens / cfg.unit_tokens : 0;
    }

    void note_level(const Track &tr, WhatIfBin &b, const tcm_meter_state &s) {
        b.c_low = std::min(b.c_low, units(tr.cfg, s.c_tokens));
        b.e_low = std::min(b.e_low, units(tr.cfg, s.e_tokens));
    }

    WhatIfBin &bin(WhatIfPolicy &w) {
        if (w.bins.empty())
            w.bins.push_back(fresh_bin());
        return w.bins.back();
    }

    WhatIfBin fresh_bin() const {
        return WhatIfBin{.bytes = {}, .c_low = UINT64_MAX, .e_low = UINT64_MAX};
    }

    // Ends every bin before the one @t falls in: each bucket's level at the bin's end (refilled
    // from the policy's last packet by the shared meter code) counts towards its low, then the
    // next bin starts; past kWhatIfMaxBins the bins merge in pairs and double in width, so that a
    // long gap costs bins in proportion to its logarithm.
    void close_bins(uint64_t t) {
        // Division, not (open_bin_ + 1) * bin_ns: no product to overflow at any stamp.
        while (t / result_.bin_ns > open_bin_) {
            uint64_t end = (open_bin_ + 1) * result_.bin_ns;
            for (auto &[id, tr] : track_) {
                WhatIfPolicy &w = result_.policies[tr.index];
                WhatIfBin &b = bin(w);
                if (!tr.keyed) {
                    // Not started: full, as the first packet will find it.
                    tcm_meter_state s =
                        tr.started ? tr.state : tcm_meter_state{0, tr.cfg.c_size, tr.cfg.e_size};
                    tcm_ext_state x = tr.ext_state;
                    // The warm-up's refill when it has one (the meter's own code, on copies):
                    // the gap is earned at the rates of the step it is in.
                    if (tr.started && tr.ext.warm.d_ns && x.started)
                        meter_refill_warm(&tr.cfg, &tr.ext.warm, &s, &x.warm, end);
                    else if (tr.started)
                        meter_refill(&tr.cfg, &s, end);
                    note_level(tr, b, s);
                    note_ext(tr, x, b, end);
                }
                w.bins.push_back(fresh_bin());
            }
            if (++open_bin_ + 1 > kWhatIfMaxBins)
                merge_bins();
        }
    }

    void merge_bins() {
        for (WhatIfPolicy &w : result_.policies) {
            std::vector<WhatIfBin> merged;
            for (size_t i = 0; i < w.bins.size(); i += 2) {
                WhatIfBin m = w.bins[i];
                if (i + 1 < w.bins.size()) {
                    const WhatIfBin &n = w.bins[i + 1];
                    for (size_t c = 0; c < TCM_NR_COLORS; ++c)
                        m.bytes[c] += n.bytes[c];
                    m.c_low = std::min(m.c_low, n.c_low);
                    m.e_low = std::min(m.e_low, n.e_low);
                    m.warm_step = n.warm_step; // as the later bin ends
                    m.quota_used = n.quota_used;
                }
                merged.push_back(m);
            }
            w.bins = std::move(merged);
        }
        result_.bin_ns *= 2;
        open_bin_ /= 2;
    }

    void finish_flows() {
        for (auto &[k, f] : flows_)
            result_.flows.push_back(std::move(f));
        std::sort(result_.flows.begin(), result_.flows.end(), [](const auto &a, const auto &b) {
            if (a.counts.total_bytes() != b.counts.total_bytes())
                return a.counts.total_bytes() > b.counts.total_bytes();
            return a.policy < b.policy;
        });
        if (result_.flows.size() > options_.flows)
            result_.flows.resize(options_.flows);
    }

    const WhatIfOptions &options_;
    HierBpfEngine &engine_;
    WhatIfResult result_;
    std::map<uint32_t, Track> track_;
    std::map<uint32_t, std::string> names_;
    std::map<uint32_t, uint32_t> parent_;
    std::unordered_map<std::string, WhatIfFlow> flows_;
    uint64_t first_ns_ = 0, last_ns_ = 0, open_bin_ = 0;
    uint64_t latest_number_ = 0; // the packet with the latest stamp so far
};

} // namespace

Result<WhatIfResult> run_whatif(HierBpfEngine &engine, const std::vector<Policy> &policies,
                                const std::string &path, const WhatIfOptions &options) {
    // A fleet policy's committed bucket is refilled by grants from the other hosts' exchange:
    // on its own, a capture is metered as a local policy of the same CIR.
    std::vector<Policy> local = policies;
    for (Policy &p : local)
        p.fleet = false;
    // Through an empty set, so that every policy starts with fresh buckets, counters and flows
    // (an id that stays in the set would keep them).
    if (auto r = engine.datapath().apply({}); !r)
        return std::unexpected(r.error());
    if (auto r = engine.datapath().apply(local); !r)
        return std::unexpected(r.error());
    Runner r(engine, local, options);
    return r.run(path);
}

Result<WhatIfResult> run_whatif(const std::vector<Policy> &policies, const std::string &path,
                                const WhatIfOptions &options) {
    HierBpfEngine engine({});
    return run_whatif(engine, policies, path, options);
}

Result<WhatIfSuggestion> suggest_whatif(const std::vector<Policy> &policies,
                                        const std::string &path, const std::string &name,
                                        const std::string &what, double red_share) {
    auto it = std::find_if(policies.begin(), policies.end(),
                           [&](const Policy &p) { return p.name == name; });
    if (it == policies.end())
        return std::unexpected(fmt::format("no policy '{}' in the policy file", name));
    const bool peak = what == "pbs" || what == "pir";
    if (what != "cbs" && what != "cir" && !peak)
        return std::unexpected(fmt::format("--suggest takes cbs, cir, pbs or pir, not '{}'", what));
    // A peak bucket alone colours red: CBS and CIR then only split green from yellow.
    const bool has_peak = info(it->meter.algo).second == SecondBucket::peak;
    if (has_peak && !peak)
        return std::unexpected(
            fmt::format("policy '{}' is {}: its red is set by PIR and PBS (--suggest pir or pbs)",
                        name, to_string(it->meter.algo)));
    if (!has_peak && peak)
        return std::unexpected(
            fmt::format("policy '{}' is {}: it has no PIR or PBS (--suggest cir or cbs)", name,
                        to_string(it->meter.algo)));
    if (!(red_share >= 0 && red_share <= 1))
        return std::unexpected("--red-at-most is a share from 0% to 100%");
    const size_t index = static_cast<size_t>(it - policies.begin());
    WhatIfSuggestion s;
    s.what = what;
    HierBpfEngine engine({}); // one load; each run starts it afresh
    // The red share at @value, or an error; nullopt if validation refuses the value.
    auto red_at = [&](uint64_t value) -> Result<std::optional<double>> {
        std::vector<Policy> trial = policies;
        MeterParams &m = trial[index].meter;
        if (what == "cbs")
            m.cbs = value;
        else if (what == "cir")
            m.cir = value;
        else if (what == "pbs")
            m.pbs = value;
        else
            m.pir = value;
        if (!validate(trial[index].meter).ok())
            return std::optional<double>{};
        WhatIfOptions o;
        auto r = run_whatif(engine, trial, path, o);
        if (!r)
            return std::unexpected(r.error());
        ++s.runs;
        const ColorCounts &c = r->policies[index].counts;
        uint64_t total = c.total_bytes();
        if (!total)
            return std::unexpected(
                fmt::format("policy '{}' matched no packet of the capture: nothing to size", name));
        return std::optional<double>{
            total ? static_cast<double>(c.bytes[static_cast<size_t>(Color::red)]) /
                        static_cast<double>(total)
                  : 0.0};
    };
    // Up: the first value that validates and meets the share.
    const bool size = what == "cbs" || what == "pbs";
    const uint64_t kMax = size ? TCM_METER_MAX_SIZE : TCM_METER_MAX_RATE;
    uint64_t lo = 0, hi = 1; // lo fails (or is below what validates), hi is being tried
    std::optional<double> at_hi;
    for (;;) {
        auto r = red_at(hi);
        if (!r)
            return std::unexpected(r.error());
        if (*r && **r <= red_share) {
            at_hi = **r;
            break;
        }
        lo = hi;
        if (hi >= kMax)
            return std::unexpected(fmt::format(
                "no {} up to {} keeps red at most {:.4g}% for policy '{}'{}", what,
                size ? format_size(kMax) : format_rate(kMax), red_share * 100, name,
                it->parent.empty() ? "" : " (its red comes from its parents' buckets too)"));
        hi = std::min(kMax, hi * 2);
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        auto r = red_at(mid);
        if (!r)
            return std::unexpected(r.error());
        if (*r && **r <= red_share) {
            hi = mid;
            at_hi = **r;
        } else {
            lo = mid;
        }
    }
    s.value = hi;
    s.red_share = *at_hi;
    return s;
}

} // namespace tricolor
