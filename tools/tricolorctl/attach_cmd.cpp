// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// attach_cmd.cpp: `tricolorctl attach` and `detach`: the data path on and off an interface.
#include "context.hpp"
#include "value_doc.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <string>

namespace tricolor::cli {

using nlohmann::json;

namespace {

struct HookFlags {
    std::string iface, match_ifname, hook = "xdp", direction = "ingress", xdp_mode = "auto";
} flags;

void add_hook_flags(CLI::App &cmd) {
    auto *iface = describe(cmd.add_option("IF", flags.iface, "Interface"),
                           {.complete = Complete::interfaces});
    auto *pattern = cmd.add_option("--match-ifname", flags.match_ifname,
                                   "Every interface whose name matches this glob, now and as "
                                   "they come (instead of IF)");
    iface->excludes(pattern);
    pattern->excludes(iface);
    one_of(cmd.add_option("--hook", flags.hook, "xdp or tc"), {"xdp", "tc"})->capture_default_str();
    one_of(cmd.add_option("--direction", flags.direction, "ingress or egress (tc)"),
           {"ingress", "egress"})
        ->capture_default_str();
}

int run(Context &ctx, bool attach) {
    int rc = 0;
    if (flags.hook == "xdp" && flags.direction == "egress") {
        ctx.fail("XDP only sees ingress traffic: use --hook tc for egress");
        return kExitUsage;
    }
    if (flags.iface.empty() == flags.match_ifname.empty()) {
        ctx.fail("name an interface (IF) or a pattern (--match-ifname GLOB)");
        return kExitUsage;
    }
    json req = {{"cmd", attach ? "attach" : "detach"},
                {"hook", flags.hook},
                {"direction", flags.direction}};
    if (flags.match_ifname.empty())
        req["iface"] = flags.iface;
    else
        req["match_ifname"] = flags.match_ifname;
    if (attach)
        req["xdp_mode"] = flags.xdp_mode;
    auto r = ctx.call(req, rc);
    if (!r)
        return rc;
    if (ctx.json_reply(*r))
        return rc;
    if (!flags.match_ifname.empty()) {
        std::vector<std::string> names;
        for (const auto &n : r->value("interfaces", json::array()))
            names.push_back(n.get<std::string>());
        if (!attach)
            std::cout << fmt::format("pattern '{}' removed, detached from its interfaces\n",
                                     flags.match_ifname);
        else
            std::cout << fmt::format(
                "pattern '{}' ({} {}): {}\n", flags.match_ifname, flags.hook, flags.direction,
                names.empty() ? std::string("no interface matches yet")
                              : "attached to " + fmt::format("{}", fmt::join(names, " ")));
    } else if (attach)
        std::cout << fmt::format("attached to {} ({} {})\n", flags.iface, r->value("mode", "?"),
                                 flags.direction);
    else if (r->contains("note"))
        std::cout << fmt::format("{}\n", (*r)["note"].get<std::string>());
    else
        std::cout << fmt::format("detached from {}\n", flags.iface);
    return rc;
}

} // namespace

void add_attach(CLI::App &cmd) {
    add_hook_flags(cmd);
    one_of(cmd.add_option("--xdp-mode", flags.xdp_mode, "native, generic or auto"),
           {"native", "generic", "auto"})
        ->capture_default_str();
}

int run_attach(Context &ctx) {
    return run(ctx, true);
}

void add_detach(CLI::App &cmd) {
    add_hook_flags(cmd);
}

int run_detach(Context &ctx) {
    return run(ctx, false);
}

} // namespace tricolor::cli
