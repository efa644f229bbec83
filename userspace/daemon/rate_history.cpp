// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rate_history.cpp: see rate_history.hpp.
#include "rate_history.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iterator>
#include <limits>

namespace tricolor {

namespace {
constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
}

void RateHistory::add(const std::vector<PolicyTotal> &totals, int64_t t_ms, double dt_s) {
    ++seq_;
    size_t slot = seq_ % kSamples;
    t_ms_[slot] = t_ms;
    for (auto it = series_.begin(); it != series_.end();) {
        // Gone for a whole history: nothing of it is shown any more.
        if (it->second.seen + kSamples <= seq_) {
            it = series_.erase(it);
            continue;
        }
        for (auto &c : it->second.bps)
            c[slot] = kNone;
        ++it;
    }
    for (const auto &p : totals) {
        auto [it, added] = series_.try_emplace(p.name);
        Series &s = it->second;
        if (added)
            for (auto &c : s.bps)
                c.fill(kNone);
        bool same = !added && s.id == p.id && s.seen + 1 == seq_ && dt_s > 0;
        for (int c = 0; c < 3; ++c) {
            uint64_t diff = p.bytes[c] >= s.last[c] ? p.bytes[c] - s.last[c] : p.bytes[c];
            s.bps[c][slot] = same ? 8.0 * static_cast<double>(diff) / dt_s : kNone;
        }
        s.id = p.id;
        s.last = p.bytes;
        s.seen = seq_;
    }
}

std::string RateHistory::json_after(uint64_t after) const {
    uint64_t first = seq_ >= kSamples ? seq_ - kSamples + 1 : 1;
    if (after + 1 > first)
        first = after + 1;
    std::string out;
    auto o = std::back_inserter(out);
    fmt::format_to(o, "{{\"seq\":{},\"interval_ms\":1000,\"t\":[", seq_);
    for (uint64_t s = first; s <= seq_; ++s)
        fmt::format_to(o, "{}{}", s == first ? "" : ",", t_ms_[s % kSamples]);
    out += "],\"bps\":{";
    bool first_series = true;
    for (const auto &[name, series] : series_) {
        if (series.seen < first)
            continue;
        // Names are JSON-escaped: a policy name is [A-Za-z0-9._-] (policy.cpp), but the page
        // must not depend on it.
        out += first_series ? "\"" : ",\"";
        first_series = false;
        for (char ch : name) {
            if (ch == '"' || ch == '\\')
                out += '\\';
            if (static_cast<unsigned char>(ch) < 0x20)
                fmt::format_to(o, "\\u{:04x}", static_cast<unsigned char>(ch));
            else
                out += ch;
        }
        out += "\":[";
        for (int c = 0; c < 3; ++c) {
            out += c ? ",[" : "[";
            for (uint64_t s = first; s <= seq_; ++s) {
                double v = series.bps[c][s % kSamples];
                if (s != first)
                    out += ',';
                if (std::isnan(v))
                    out += "null";
                else
                    fmt::format_to(o, "{}", static_cast<uint64_t>(std::llround(v)));
            }
            out += ']';
        }
        out += ']';
    }
    out += "}}";
    return out;
}

} // namespace tricolor
