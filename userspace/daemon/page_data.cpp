// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// page_data.cpp: what the live page (--web, web.cpp) reads of the daemon: the policies' byte
// counters each second for its rate history, and a view of everything else it shows, made of
// the control protocol's own replies so that the page and tricolorctl never disagree.
#include "daemon_internal.hpp"
#include "tricolor/policy_spec.hpp"

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

nlohmann::json Daemon::page_view(std::optional<size_t> top_flows) {
    std::lock_guard lock(mu_);
    json stats = cmd_stats(json::object());
    json status = cmd_status(json::object());
    json flows = top_flows ? cmd_flows(json{{"top", *top_flows}}) : json(nullptr);
    // Each policy's spec as the user wrote it, and, for an aggregate policy, its buckets now:
    // stats has the counters, flows only the busiest flows.
    uint64_t now = dp_->now_ns();
    json specs = json::object();
    for (const auto &e : policies_) {
        json j = {{"spec", e.spec}};
        if (auto p = to_policy(e.spec, e.id); p && p->per == TCM_PER_AGGREGATE)
            j["buckets"] = buckets_json(*p, dp_->policy_state(e.id), now);
        specs[e.name] = std::move(j);
    }
    json view = {
        {"stats", std::move(stats)}, {"status", std::move(status)}, {"policies", std::move(specs)}};
    if (top_flows)
        view["flows"] = std::move(flows);
    return view;
}

} // namespace tricolor
