// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// rate_history.hpp: the live page's rates (web.cpp): each policy's bit rate per colour over
// the last kSamples samples, one a second, made from successive reads of its byte counters.
#pragma once

#include "daemon.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tricolor {

class RateHistory {
  public:
    static constexpr size_t kSamples = 300; // 5 minutes at one a second

    // A read of every policy's counters at @t_ms (Unix time, ms), @dt_s seconds after the one
    // before. A policy's rate is its bytes since its last read over @dt_s; none for its first
    // read, nor for a policy removed and added again under its name (another id). Counters
    // never go back: a smaller count than the last is a new policy's.
    void add(const std::vector<PolicyTotal> &totals, int64_t t_ms, double dt_s);
    uint64_t seq() const { return seq_; } // of the newest sample; 0: none yet
    // The samples after @after (all kept when 0 or older than those), as JSON:
    //   {"seq": S, "interval_ms": 1000, "t": [ms...],
    //    "bps": {"POLICY": [[green...], [yellow...], [red...]]}}
    // bit/s, null where the policy had no rate; a policy appears while it has a sample kept.
    std::string json_after(uint64_t after) const;

  private:
    struct Series {
        uint32_t id = 0;
        std::array<uint64_t, 3> last{};
        uint64_t seen = 0; // the seq of its last read
        std::array<std::array<double, kSamples>, 3> bps{};
    };
    std::map<std::string, Series> series_;
    std::array<int64_t, kSamples> t_ms_{};
    uint64_t seq_ = 0; // sample s is at s % kSamples
};

} // namespace tricolor
