// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// page_data.cpp: what the live page (--web, web.cpp) reads of the daemon: the policies' byte
// counters each second for its rate history, and a view of everything else it shows, made of
// the control protocol's own replies so that the page and tricolorctl never disagree.
#include "daemon_internal.hpp"

namespace tricolor {

using namespace daemon_internal;

void Daemon::set_page_address(std::string address) {
    std::lock_guard lock(mu_);
    page_address_ = std::move(address);
}

std::vector<PolicyTotal> Daemon::policy_totals() const {
    std::lock_guard lock(mu_);
    auto counters = dp_->policy_counters();
    std::vector<PolicyTotal> out;
    out.reserve(policies_.size());
    for (const auto &e : policies_) {
        const tcm_counters &c = counters[e.id];
        out.push_back({e.name, e.id, {c.bytes[0], c.bytes[1], c.bytes[2]}});
    }
    return out;
}

nlohmann::json Daemon::page_view(std::optional<size_t> top_flows, bool with_specs) {
    std::lock_guard lock(mu_);
    json stats = cmd_stats(json::object());
    // The page reads the colours: --aqm's and --shape's counters (tricolorctl stats has them)
    // would be half of what it is sent each second.
    for (auto &p : stats["policies"]) {
        p.erase("aqm");
        p.erase("shape");
    }
    json status = cmd_status(json::object());
    json flows = top_flows ? cmd_flows(json{{"top", *top_flows}}) : json(nullptr);
    // Each aggregate policy's buckets now (stats has the counters, flows only the busiest
    // flows), and, when asked, each policy's spec as the user wrote it.
    uint64_t now = dp_->now_ns();
    std::map<uint32_t, const Policy *> by_id;
    auto active = dp_->policies();
    for (const auto &p : active)
        by_id[p.id] = &p;
    json buckets = json::object(), specs = json::object();
    for (const auto &e : policies_) {
        if (auto p = by_id.find(e.id); p != by_id.end() && p->second->per == TCM_PER_AGGREGATE)
            buckets[e.name] = buckets_json(*p->second, dp_->policy_state(e.id), now);
        if (with_specs)
            specs[e.name] = e.spec;
    }
    json view = {{"stats", std::move(stats)},
                 {"status", std::move(status)},
                 {"buckets", std::move(buckets)}};
    if (with_specs)
        view["specs"] = std::move(specs);
    if (top_flows)
        view["flows"] = std::move(flows);
    return view;
}

} // namespace tricolor
