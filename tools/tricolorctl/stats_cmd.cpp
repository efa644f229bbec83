// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// stats_cmd.cpp: `tricolorctl stats [NAME] [--watch]`: packets and bytes per colour per policy,
// the policies in tree order, and with --watch the rates between refreshes.
#include "context.hpp"
#include "format.hpp"
#include "value_doc.hpp"

#include "tricolor/datapath.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

namespace tricolor::cli {

using nlohmann::json;

namespace {

struct StatsFlags {
    std::string name;
    bool watch = false;
    double interval = 1.0;
    int count = 0;
} flags;

// The policies in tree order (docs/spec.md §9): each parent, then its children indented under it;
// a policy whose parent is not in the list (stats NAME) stands at the top.
std::vector<std::pair<const json *, int>> policy_tree(const json &policies) {
    std::vector<std::pair<const json *, int>> out;
    auto parent_of = [](const json &p) {
        auto it = p.find("parent");
        return it != p.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    std::set<std::string> names;
    for (const auto &p : policies)
        names.insert(p.value("name", ""));
    std::function<void(const std::string &, int)> walk = [&](const std::string &parent, int depth) {
        for (const auto &p : policies) {
            std::string up = parent_of(p);
            bool top = up.empty() || !names.contains(up);
            if ((parent.empty() && top) || (!parent.empty() && up == parent)) {
                out.emplace_back(&p, depth);
                if (depth < TCM_MAX_LEVELS)
                    walk(p.value("name", ""), depth + 1);
            }
        }
    };
    walk("", 0);
    return out;
}

void print_stats_table(const json &s, const json *prev, double seconds) {
    std::cout << fmt::format("{:<20} {:>12} {:>10} {:>12} {:>10} {:>12} {:>10}\n", "POLICY",
                             "GREEN pkts", "bytes", "YELLOW pkts", "bytes", "RED pkts", "bytes");
    for (auto [pp, depth] : policy_tree(s["policies"])) {
        const json &p = *pp;
        std::string line =
            fmt::format("{:<20}", std::string(2 * depth, ' ') + p["name"].get<std::string>());
        for (const char *c : {"green", "yellow", "red"})
            line += fmt::format(" {:>12} {:>10}", p[c]["packets"].get<uint64_t>(),
                                human_bytes(p[c]["bytes"].get<uint64_t>()));
        std::cout << line << "\n";
        if (auto o = p.value("owner", std::string()); !o.empty())
            std::cout << fmt::format("{:<20} {}\n", "  for", o);
        // docs/spec.md §8: paced sockets, early signals and EDT, on a line of their own when any.
        if (p.contains("shape") && p.contains("aqm")) {
            const auto &sh = p["shape"];
            const auto &aq = p["aqm"];
            uint64_t n = sh["sockets"].get<uint64_t>(),
                     marked = aq["marked"]["packets"].get<uint64_t>(),
                     dropped = aq["dropped"]["packets"].get<uint64_t>(),
                     delayed = sh["delayed"]["packets"].get<uint64_t>(),
                     late = sh["dropped"]["packets"].get<uint64_t>();
            if (n || marked || dropped || delayed || late)
                std::cout << fmt::format("{:<20} paced sockets {}; aqm marked {} dropped {} pkts; "
                                         "edt delayed {} dropped {} pkts\n",
                                         "  tcp", n, marked, dropped, delayed, late);
        }
        if (p.contains("fleet"))
            std::cout << fleet_line(p["fleet"]) << "\n";
        if (p.contains("quota"))
            std::cout << quota_line(p["quota"]) << "\n";
        if (prev && seconds > 0)
            for (const auto &q : (*prev)["policies"])
                if (q["name"] == p["name"]) {
                    std::string rates = fmt::format("{:<20}", "  rate");
                    for (const char *c : {"green", "yellow", "red"}) {
                        double bits = 8.0 *
                                      static_cast<double>(p[c]["bytes"].get<uint64_t>() -
                                                          q[c]["bytes"].get<uint64_t>()) /
                                      seconds;
                        rates += fmt::format(" {:>23}", human_rate(bits));
                    }
                    std::cout << rates << "\n";
                }
    }
    std::cout << fmt::format("unclassified {} packets {}; non-IP {}; malformed {}; table full {}\n",
                             s["unclassified"]["packets"].get<uint64_t>(),
                             human_bytes(s["unclassified"]["bytes"].get<uint64_t>()),
                             s["non_ip"]["packets"].get<uint64_t>(),
                             s["malformed"]["packets"].get<uint64_t>(),
                             s["table_full"].get<uint64_t>());
}

} // namespace

void add_stats(CLI::App &cmd) {
    describe(cmd.add_option("NAME", flags.name, "Only this policy"),
             {.complete = Complete::policies});
    cmd.add_flag("--watch", flags.watch, "Refresh in place with rates per colour");
    describe(cmd.add_option("--interval", flags.interval, "Seconds between refreshes"),
             {.name = "S"})
        ->check(CLI::Range(0.1, 3600.0));
    auto *watch = cmd.get_option("--watch");
    describe(
        cmd.add_option("--count", flags.count, "Stop after this many refreshes (0: until Ctrl-C)"),
        {.name = "N"})
        ->check(CLI::NonNegativeNumber)
        ->needs(watch);
}

int run_stats(Context &ctx) {
    bool tty = isatty(STDOUT_FILENO);
    json req = {{"cmd", "stats"}};
    if (!flags.name.empty())
        req["name"] = flags.name;
    int rc = 0;
    std::optional<json> prev;
    auto last = std::chrono::steady_clock::now();
    for (int i = 0;; ++i) {
        auto r = ctx.call(req, rc);
        if (!r)
            return rc;
        auto now = std::chrono::steady_clock::now();
        double secs = std::chrono::duration<double>(now - last).count();
        if (!ctx.json_reply(*r)) {
            if (flags.watch && tty)
                std::cout << "\033[H\033[2J"; // home and clear: refresh in place
            else if (flags.watch && i > 0)
                std::cout << "\n"; // not a terminal: one table after another
            print_stats_table(*r, prev ? &*prev : nullptr, secs);
            std::cout.flush();
        }
        if (!flags.watch || (flags.count && i + 1 >= flags.count))
            return rc;
        prev = *r;
        last = now;
        std::this_thread::sleep_for(std::chrono::duration<double>(flags.interval));
    }
}

} // namespace tricolor::cli
