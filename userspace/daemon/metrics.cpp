// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// metrics.cpp: the Prometheus families main.cpp's endpoint serves, each from one consistent read
// of the counters.
#include "daemon.hpp"
#include "daemon_internal.hpp"

#include <utility>

namespace tricolor {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

// A family of one metric without labels.
MetricFamily single(std::string name, std::string help, MetricType type, double v) {
    ClientMetric m;
    if (type == MetricType::Counter)
        m.counter.value = v;
    else
        m.gauge.value = v;
    return MetricFamily{std::move(name), std::move(help), type, {m}};
}

} // namespace

void Daemon::set_metrics_address(std::string address) {
    std::lock_guard lock(mu_);
    metrics_address_ = std::move(address);
}

std::vector<MetricFamily> Daemon::metrics() const {
    std::lock_guard lock(mu_);
    auto counters = dp_->policy_counters();
    auto g = dp_->global_counters();
    MetricFamily packets{
        "tricolor_packets_total", "Packets metered, by policy and colour", MetricType::Counter, {}};
    MetricFamily bytes{
        "tricolor_bytes_total", "Bytes metered, by policy and colour", MetricType::Counter, {}};
    const char *colors[] = {"green", "yellow", "red"};
    auto tcp = dp_->shape_counters();
    MetricFamily sockets{"tricolor_shape_sockets",
                         "TCP sockets of this host paced by the policy (--shape sockets)",
                         MetricType::Gauge,
                         {}};
    MetricFamily tcp_packets{"tricolor_tcp_signal_packets_total",
                             "Packets that would have passed, by what the policy's --aqm or "
                             "--shape did instead (aqm_marked, aqm_dropped, shape_delayed, "
                             "shape_dropped)",
                             MetricType::Counter,
                             {}};
    for (const auto &e : policies_) {
        const auto &t = tcp[e.id];
        std::string name = e.spec.value("name", "");
        std::string parent = e.spec.value("parent", "");
        ClientMetric m;
        m.label = {{"parent", parent}, {"policy", name}};
        m.gauge.value = t.sockets;
        sockets.metric.push_back(m);
        std::pair<const char *, uint64_t> what[] = {{"aqm_marked", t.tcp.aqm_marked_packets},
                                                    {"aqm_dropped", t.tcp.aqm_dropped_packets},
                                                    {"shape_delayed", t.tcp.shape_delayed_packets},
                                                    {"shape_dropped", t.tcp.shape_dropped_packets}};
        for (auto [action, v] : what) {
            ClientMetric c;
            c.label = {{"action", action}, {"parent", parent}, {"policy", name}};
            c.counter.value = static_cast<double>(v);
            tcp_packets.metric.push_back(c);
        }
    }
    // --per cgroup: each cgroup's bucket, named by its path.
    MetricFamily cg_packets{"tricolor_cgroup_packets_total",
                            "Packets metered in a --per cgroup policy's bucket of one cgroup, by "
                            "policy, cgroup path and colour (the bucket's: it restarts from 0 "
                            "after the idle reclaim let it go)",
                            MetricType::Counter,
                            {}};
    MetricFamily cg_bytes{"tricolor_cgroup_bytes_total",
                          "Bytes metered in a --per cgroup policy's bucket of one cgroup",
                          MetricType::Counter,
                          {}};
    for (const auto &e : policies_) {
        if (e.spec.value("per", "") != "cgroup")
            continue;
        std::string name = e.spec.value("name", "");
        for (const auto &b : dp_->cgroup_buckets(e.id))
            for (int i = 0; i < TCM_NR_COLORS; ++i) {
                ClientMetric m;
                m.label = {{"cgroup", b.path}, {"color", colors[i]}, {"policy", name}};
                m.counter.value = static_cast<double>(b.counters.packets[i]);
                cg_packets.metric.push_back(m);
                m.counter.value = static_cast<double>(b.counters.bytes[i]);
                cg_bytes.metric.push_back(m);
            }
    }
    // Who a policy is for (a pod, a container: its "owner"), as an info series to join on
    // `policy`: the counters' label sets stay what they were.
    MetricFamily info{"tricolor_policy_info",
                      "1 for each policy that names its owner (a pod or container by name)",
                      MetricType::Gauge,
                      {}};
    for (const auto &e : policies_)
        if (auto o = e.spec.value("owner", std::string()); !o.empty()) {
            ClientMetric m;
            m.label = {{"owner", o}, {"policy", e.spec.value("name", "")}};
            m.gauge.value = 1;
            info.metric.push_back(m);
        }
    for (const auto &e : policies_) {
        const auto &c = counters[e.id];
        std::string name = e.spec.value("name", "");
        std::string parent = e.spec.value("parent", "");
        for (int i = 0; i < TCM_NR_COLORS; ++i) {
            ClientMetric m;
            // parent: a chain's levels can be summed or told apart in PromQL (empty at a top).
            m.label = {{"color", colors[i]}, {"parent", parent}, {"policy", name}};
            m.counter.value = static_cast<double>(c.packets[i]);
            packets.metric.push_back(m);
            m.counter.value = static_cast<double>(c.bytes[i]);
            bytes.metric.push_back(m);
        }
    }
    // --quota (docs/spec.md §14): an aggregate quota's use of this period; a per-key quota's
    // flows are too many for series (flows shows them).
    MetricFamily q_used{"tricolor_quota_used_bytes",
                        "Green and yellow bytes of the period, of an aggregate --quota",
                        MetricType::Gauge,
                        {}};
    MetricFamily q_limit{"tricolor_quota_bytes",
                         "The --quota of a period, of an aggregate quota",
                         MetricType::Gauge,
                         {}};
    MetricFamily q_reset{"tricolor_quota_reset_timestamp_seconds",
                         "When the period of an aggregate --quota ends (Unix time)",
                         MetricType::Gauge,
                         {}};
    for (const auto &e : policies_)
        if (auto q = daemon_internal::aggregate(e.spec) ? dp_->quota_use(e.id) : std::nullopt) {
            ClientMetric m;
            m.label = {{"policy", e.spec.value("name", "")}};
            m.gauge.value = static_cast<double>(q->used);
            q_used.metric.push_back(m);
            m.gauge.value = static_cast<double>(q->quota);
            q_limit.metric.push_back(m);
            m.gauge.value = static_cast<double>(q->reset_ns / 1000000000);
            q_reset.metric.push_back(m);
        }
    return {packets,
            bytes,
            info,
            q_used,
            q_limit,
            q_reset,
            cg_packets,
            cg_bytes,
            sockets,
            tcp_packets,
            single("tricolor_unclassified_packets_total", "IP packets no policy matched",
                   MetricType::Counter, static_cast<double>(g.unclassified_packets)),
            single("tricolor_unclassified_bytes_total", "Bytes of IP packets no policy matched",
                   MetricType::Counter, static_cast<double>(g.unclassified_bytes)),
            single("tricolor_non_ip_packets_total", "Frames that are not IPv4 or IPv6",
                   MetricType::Counter, static_cast<double>(g.non_ip_packets)),
            single("tricolor_malformed_packets_total", "Packets with truncated or invalid headers",
                   MetricType::Counter, static_cast<double>(g.malformed_packets)),
            single("tricolor_table_full_total",
                   "Packets of new flows metered in the aggregate bucket: flow table full",
                   MetricType::Counter, static_cast<double>(g.table_full)),
            single("tricolor_lock_timeouts_total",
                   "Packets coloured red because a flow lock stayed taken", MetricType::Counter,
                   static_cast<double>(g.lock_timeouts)),
            single("tricolor_flows",
                   "Flows in the flow table, as of the daemon's last pass over it (every "
                   "--reclaim-interval seconds, or 10)",
                   MetricType::Gauge, static_cast<double>(dp_->counted_flows())),
            single("tricolor_flows_reclaimed_total",
                   "Idle flows deleted because their buckets were full again", MetricType::Counter,
                   static_cast<double>(reclaimed_total_)),
            single("tricolor_flow_capacity", "Capacity of the flow table now", MetricType::Gauge,
                   static_cast<double>(dp_->flow_capacity())),
            single("tricolor_flow_capacity_max", "The most flows the table grows to (--max-flows)",
                   MetricType::Gauge, static_cast<double>(options_.max_flows)),
            single("tricolor_policies", "Active policies", MetricType::Gauge,
                   static_cast<double>(policies_.size()))};
}

// Fleet metrics (docs/spec.md §10), apart from metrics() so each scrape adds them after it.
std::vector<MetricFamily> Daemon::fleet_metrics() const {
    std::lock_guard lock(mu_);
    if (!fleet_)
        return {};
    auto t = fleet_->totals();
    std::vector<MetricFamily> fleet_families = {
        single("tricolor_fleet_exchanges_total", "Exchanges with the fleet's Redis",
               MetricType::Counter, static_cast<double>(t.exchanges)),
        single("tricolor_fleet_failures_total", "Exchanges Redis did not answer in time",
               MetricType::Counter, static_cast<double>(t.failures)),
        single("tricolor_fleet_fallbacks_total",
               "Switches of a fleet policy to its fallback (Redis lost)", MetricType::Counter,
               static_cast<double>(t.fallbacks)),
        single("tricolor_fleet_recoveries_total", "Returns of a fleet policy from its fallback",
               MetricType::Counter, static_cast<double>(t.recoveries)),
        single("tricolor_fleet_in_fallback", "1 while any fleet policy runs on its fallback",
               MetricType::Gauge, t.fallback ? 1.0 : 0.0),
        single("tricolor_fleet_name_held",
               "1 while another live daemon holds this one's fleet node name (it runs nothing "
               "of the lease)",
               MetricType::Gauge, t.held_by.empty() ? 0.0 : 1.0),
        single("tricolor_fleet_name_collisions_total",
               "Times a fleet policy found its node name held by another live daemon",
               MetricType::Counter, static_cast<double>(t.collisions))};
    MetricFamily hosts{
        "tricolor_fleet_hosts_seen", "Hosts in the fleet of a policy", MetricType::Gauge, {}};
    MetricFamily held{"tricolor_fleet_local_held_bits",
                      "Fleet tokens this host holds for a policy (bits or packets)",
                      MetricType::Gauge,
                      {}};
    MetricFamily rate{"tricolor_fleet_lease_rate",
                      "The rate this host leases for a policy from the fleet (bit/s or packet/s)",
                      MetricType::Gauge,
                      {}};
    for (const auto &e : policies_) {
        std::string name = e.spec.value("name", "");
        auto f = fleet_->policy_status(name);
        if (f.is_null())
            continue;
        ClientMetric m;
        m.label = {{"parent", e.spec.value("parent", "")}, {"policy", name}};
        m.gauge.value = f.value("hosts_seen", 0.0);
        hosts.metric.push_back(m);
        m.gauge.value = f.value("local_held", 0.0);
        held.metric.push_back(m);
        m.gauge.value = f.value("lease_rate", 0.0);
        rate.metric.push_back(m);
    }
    fleet_families.push_back(hosts);
    fleet_families.push_back(held);
    fleet_families.push_back(rate);
    return fleet_families;
}

} // namespace tricolor
