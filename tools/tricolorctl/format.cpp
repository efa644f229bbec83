// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// format.cpp: the numbers and fields of tricolorctl's tables.
#include "format.hpp"

#include <fmt/format.h>

namespace tricolor::cli {

using nlohmann::json;

std::string human_bytes(uint64_t b) {
    const char *units[] = {"B", "KB", "MB", "GB", "TB"};
    double v = static_cast<double>(b);
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        ++u;
    }
    return u == 0 ? fmt::format("{}B", b) : fmt::format("{:.1f}{}", v, units[u]);
}

std::string human_rate(double bits) {
    const char *units[] = {"bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"};
    int u = 0;
    while (bits >= 1000 && u < 4) {
        bits /= 1000;
        ++u;
    }
    return u == 0 ? fmt::format("{:.0f} {}", bits, units[u])
                  : fmt::format("{:.1f} {}", bits, units[u]);
}

std::string quota_line(const json &q) {
    return fmt::format("  quota: used {} of {}, {} left; resets {}",
                       human_bytes(q.value("used", uint64_t{0})),
                       human_bytes(q.value("quota", uint64_t{0})),
                       human_bytes(q.value("left", uint64_t{0})), q.value("reset", "?"));
}

std::string fleet_line(const json &f) {
    return fmt::format(
        "  fleet: {}{}, {} hosts, demand here {}, lease {} ({:.0f}% of the fleet's CIR "
        "{}; fair share {}) up to {} bytes, holds {:.0f} bits; the fleet's leases "
        "sum to {}{}{}{}",
        f.value("mode", "?"),
        f.value("redis_node", "").empty() ? "" : " through " + f.value("redis_node", ""),
        f.value("hosts_seen", 0), human_rate(f.value("local_demand", 0.0)),
        human_rate(f.value("lease_rate", 0.0)), 100 * f.value("local_share", 0.0),
        human_rate(f.value("fleet_cir", 0.0)), human_rate(f.value("fair_share", 0.0)),
        f.value("lease_cap", 0), f.value("local_held", 0.0),
        human_rate(f.value("fleet_leased", 0.0)),
        f.value("parameters_differ", false) ? " (this host's CIR/CBS differ: the "
                                              "fleet's stand)"
                                            : "",
        f.value("older_version_hosts", false) ? " (hosts of an older tricolor run it too: "
                                                "upgrade them)"
                                              : "",
        f.value("name_held_by", std::string()).empty()
            ? ""
            : " (this host's node name is held by " + f.value("name_held_by", std::string()) +
                  ": nothing leased)");
}

std::string match_text(const json &m) {
    if (!m.is_object() || m.empty())
        return "any";
    std::string out;
    for (const auto &[k, v] : m.items())
        out +=
            (out.empty() ? "" : " ") + k + " " + (v.is_string() ? v.get<std::string>() : v.dump());
    return out;
}

std::string field(const json &p, const char *key, const char *fallback) {
    if (!p.contains(key))
        return fallback;
    const auto &v = p[key];
    return v.is_string() ? v.get<std::string>() : v.dump();
}

} // namespace tricolor::cli
