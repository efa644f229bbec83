// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// flow_passes.cpp: the periodic pass over the flow table (main.cpp runs it on a thread of its
// own): it reclaims idle flows, counts the rest for the metrics and status, and keeps flows
// --top's heavy hitters.
#include "daemon.hpp"

#include <fmt/format.h>

namespace tricolor {

size_t Daemon::reclaim_idle_flows() {
    return flow_pass(true);
}

void Daemon::count_flows() {
    flow_pass(false);
}

// The lock is held only to begin and end the pass and for each chunk of deletions, not for the
// walk (0.5 s at 2^20 flows): requests, flows --top among them, and scrapes go on meanwhile.
void Daemon::move_flows_of_before(bool at_start) {
    if (!dp_->moving_flows_of_before())
        return;
    auto r = dp_->move_flows_of_before();
    moved_total_ += r.moved;
    if (at_start)
        startup_notes.push_back(
            fmt::format("the flow table holds {} flows now, not as many as its table of before: "
                        "{} flows moved into it with their tokens and counters{}",
                        options_.flow_capacity, r.moved,
                        r.dropped ? ", the table of before dropped"
                                  : fmt::format(", {} left for the next passes", r.left)));
}

size_t Daemon::flow_pass(bool reclaim) {
    FlowPass pass;
    {
        std::lock_guard lock(mu_);
        move_flows_of_before(false);
        // Under pressure (the table 90% full) the idle timeout does not hold a full flow back.
        pass =
            dp_->begin_flow_pass(reclaim, static_cast<uint64_t>(options_.flow_idle_timeout * 1e9),
                                 static_cast<size_t>(options_.flow_capacity) / 10 * 9);
    }
    dp_->walk_flow_pass(pass); // reads the flow table only
    for (bool more = true; more;) {
        std::lock_guard lock(mu_);
        more = dp_->reclaim_some(pass, 4096);
    }
    std::lock_guard lock(mu_);
    dp_->end_flow_pass(pass);
    reclaimed_total_ += pass.reclaimed;
    return pass.reclaimed;
}

} // namespace tricolor
