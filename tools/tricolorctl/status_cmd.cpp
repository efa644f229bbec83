// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// status_cmd.cpp: `tricolorctl status`: attachments as the kernel has them, table fill, and where
// the daemon keeps its metrics, maps, config and state.
#include "context.hpp"
#include "format.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <iostream>
#include <string>

namespace tricolor::cli {

using nlohmann::json;

void add_status(CLI::App &) {}

int run_status(Context &ctx) {
    int rc = 0;
    auto r = ctx.call({{"cmd", "status"}}, rc);
    if (!r)
        return rc;
    if (ctx.json_reply(*r))
        return rc;
    const auto &s = *r;
    std::cout << fmt::format("{:<16} {:<4} {:<9} {:<8} {:>8}  {}\n", "INTERFACE", "HOOK",
                             "DIRECTION", "MODE", "PROG", "STATE");
    for (const auto &a : s["attachments"])
        std::cout << fmt::format(
            "{:<16} {:<4} {:<9} {:<8} {:>8}  {}\n", a["iface"].get<std::string>(),
            a["hook"].get<std::string>(), a["direction"].get<std::string>(),
            a["mode"].get<std::string>(), a["prog_id"].get<uint64_t>(),
            !a["attached"].get<bool>()
                ? "NOT ATTACHED: " + a.value("stale", std::string("not in the kernel"))
            : a.value("managed", true) ? (a.contains("by") ? "attached (--match-ifname '" +
                                                                 a["by"].get<std::string>() + "')"
                                                           : std::string("attached"))
                                       : "attached, NOT MANAGED: " + a.value("stale", ""));
    if (s["attachments"].empty())
        std::cout << "(no attachments)\n";
    // attach --match-ifname: each pattern and what it covers now.
    for (const auto &p : s.value("patterns", json::array())) {
        std::vector<std::string> names;
        for (const auto &n : p["interfaces"])
            names.push_back(n.get<std::string>());
        std::cout << fmt::format("pattern     '{}' {} {}: {}\n",
                                 p["match_ifname"].get<std::string>(), p["hook"].get<std::string>(),
                                 p["direction"].get<std::string>(),
                                 names.empty() ? std::string("no interface yet")
                                               : fmt::format("{}", fmt::join(names, " ")));
    }
    std::cout << fmt::format("policies    {} of {}", s["policies"]["used"].get<uint64_t>(),
                             s["policies"]["capacity"].get<uint64_t>());
    // The tables as loaded (an older daemon does not say).
    if (s["policies"].contains("slots"))
        std::cout << fmt::format(
            " (tables for {} and {} classifier entries now; they grow and shrink)",
            s["policies"]["slots"].get<uint64_t>(), s["policies"].value("rule_slots", uint64_t{0}));
    std::cout << "\n";
    std::cout << fmt::format(
        "flows       {} of {} (as of the last pass; grows to {}), {} idle "
        "flows reclaimed{}\n",
        s["flows"]["used"].get<uint64_t>(), s["flows"]["capacity"].get<uint64_t>(),
        s["flows"].value("max", s["flows"]["capacity"].get<uint64_t>()),
        s["flows"].value("reclaimed", uint64_t{0}),
        s["flows"].value("moving", false) ? ", flows of the table of before still moving" : "");
    // flows --top: from the heavy hitters the data path keeps, or by a walk of the table.
    if (auto t = s["flows"].value("top", json()); t.is_object())
        std::cout << fmt::format(
            "flows --top {}\n",
            t.value("tracking", false)
                ? fmt::format("from the heavy hitters: flows of {} bytes or more ({} at the "
                              "last pass)",
                              t.value("threshold", uint64_t{0}), t.value("candidates", uint64_t{0}))
                : std::string("walks the table (no heavy hitters now)"));
    std::cout << fmt::format("metrics     {}\n", s.value("metrics", std::string("none")));
    if (auto web = s.value("web", std::string("none")); web != "none")
        std::cout << fmt::format("page        http://{}/\n", web);
    std::cout << fmt::format("pin dir     {}\n", s["pin_dir"].get<std::string>());
    std::cout << fmt::format("config      {}\n", s["config"].get<std::string>());
    if (s.contains("state")) {
        // "config" or "state"; "nothing" when the daemon found neither file.
        std::string from = s.value("started_from", std::string("?"));
        std::cout << fmt::format("state       {} ({})\n", s["state"].get<std::string>(),
                                 from == "nothing" ? "started with neither file"
                                                   : "started from the " + from);
    }
    if (auto f = s.value("fleet", json()); f.is_object()) {
        std::cout << fmt::format(
            "fleet {}{} as {}, fallback {}{}: {} exchanges, {} failed, {} fallbacks, {} "
            "returns\n",
            f.value("redis", ""), f.value("redis_cluster", false) ? " (a Redis Cluster)" : "",
            f.value("node", ""), f.value("fallback", ""),
            f.value("in_fallback", false) ? " (IN FALLBACK)" : "", f.value("exchanges", 0),
            f.value("failures", 0), f.value("fallbacks", 0), f.value("recoveries", 0));
        if (auto by = f.value("name_held_by", std::string()); !by.empty())
            std::cout << fmt::format("fleet NAME IN USE: node name '{}' is held by another live "
                                     "daemon (instance {}; this one is {}): this host runs "
                                     "nothing of its fleet policies' leases; give each host a "
                                     "name of its own (--fleet-node)\n",
                                     f.value("node", ""), by, f.value("instance", ""));
        for (const auto &[name, pf] : f["policies"].items())
            std::cout << name << fleet_line(pf) << "\n";
    }
    return rc;
}

} // namespace tricolor::cli
