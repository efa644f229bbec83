// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// flows_cmd.cpp: `tricolorctl flows [--policy NAME] [--top N]`: the busiest flows with their
// colour counters and how full their buckets are.
#include "context.hpp"
#include "format.hpp"
#include "value_doc.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>

namespace tricolor::cli {

using nlohmann::json;

namespace {

struct FlowFlags {
    std::string policy;
    int64_t top = 0;
} flags;

} // namespace

void add_flows(CLI::App &cmd) {
    describe(cmd.add_option("--policy", flags.policy, "Only this policy's flows"),
             {.name = "NAME", .complete = Complete::policies});
    describe(cmd.add_option("--top", flags.top, "Only the N busiest (by bytes)"), {.name = "N"})
        ->check(CLI::NonNegativeNumber);
}

int run_flows(Context &ctx) {
    json req = {{"cmd", "flows"}};
    if (!flags.policy.empty())
        req["policy"] = flags.policy;
    if (flags.top)
        req["top"] = flags.top;
    int rc = 0;
    auto r = ctx.call(req, rc);
    if (!r)
        return rc;
    if (ctx.json_reply(*r))
        return rc;
    // A child's flows name their chain, "link>user": every packet there passed both.
    auto chain = [](const json &f) {
        return (f.contains("parent") && f["parent"].is_string()
                    ? f["parent"].get<std::string>() + ">"
                    : std::string()) +
               f["policy"].get<std::string>() +
               (f.contains("owner") ? " (" + f["owner"].get<std::string>() + ")" : "");
    };
    size_t width = 16;
    for (const auto &f : (*r)["flows"])
        width = std::max(width, chain(f).size());
    std::cout << fmt::format("{:<{}} {:<44} {:>10} {:>10} {:>10} {:>5} {:>5}\n", "POLICY", width,
                             "KEY", "GREEN", "YELLOW", "RED", "C%", "E/P%");
    for (const auto &f : (*r)["flows"]) {
        std::string c = "-", e = "-";
        if (f.contains("buckets"))
            for (const auto &[k, v] : f["buckets"].items()) {
                if (k == "c")
                    c = fmt::format("{:.0f}", v["percent"].get<double>());
                else if (k != "unit")
                    e = fmt::format("{:.0f}", v["percent"].get<double>());
            }
        std::cout << fmt::format(
            "{:<{}} {:<44} {:>10} {:>10} {:>10} {:>5} {:>5}\n", chain(f), width,
            f["key"].get<std::string>(), human_bytes(f["green"]["bytes"]),
            human_bytes(f["yellow"]["bytes"]), human_bytes(f["red"]["bytes"]), c, e);
        if (f.contains("quota"))
            std::cout << quota_line(f["quota"]) << "\n";
    }
    return rc;
}

} // namespace tricolor::cli
