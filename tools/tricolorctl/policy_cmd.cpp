// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_cmd.cpp: `tricolorctl policy add|set|del|list|show`. add and set take the options of the
// policy flag table (policy_flags.hpp); values add finds bad are bad usage (exit 2, nothing
// sent), set's the daemon finds bad in the merged policy.
#include "context.hpp"
#include "format.hpp"
#include "policy_flags.hpp"
#include "value_doc.hpp"

#include "tricolor/policy_fields.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <string>

namespace tricolor::cli {

using nlohmann::json;

namespace {

PolicyFlags add_flags, set_flags;
std::string name; // del, show

// del's and show's NAME.
void add_name(CLI::App &cmd) {
    describe(cmd.add_option("NAME", name, "Policy name")->required(),
             {.complete = Complete::policies});
}

std::string with_unit(uint64_t v, const char *unit) {
    return fmt::format("{} {}", v, unit);
}

// Every field, the defaults included, and each rate and size also as the number it means.
void print_policy(const json &spec) {
    auto p = to_policy(spec, 0);
    auto given = [&](const char *key, const std::string &fallback) {
        return spec.contains(key) ? field(spec, key) : fallback + " (default)";
    };
    auto line = [](const char *key, const std::string &value) {
        std::cout << fmt::format("{:<12} {}\n", key, value);
    };
    line("name", field(spec, "name"));
    line("algo", field(spec, "algo"));
    if (!p) { // cannot be, for a policy the daemon runs; print it as it was given
        for (const auto &[k, v] : spec.items())
            if (k != "name" && k != "algo")
                line(k.c_str(), k == "match" ? match_text(v) : field(spec, k.c_str()));
        return;
    }
    const auto &m = p->meter;
    const char *rate = m.packet_mode ? "packets/s" : "bit/s",
               *size = m.packet_mode ? "packets" : "bytes";
    auto both = [&](const char *key, uint64_t v, const char *unit) {
        std::string as_given = spec.contains(key) ? field(spec, key) : "";
        std::string norm = with_unit(v, unit);
        line(key, as_given.empty()                ? norm + " (default)"
                  : as_given == std::to_string(v) ? norm
                                                  : fmt::format("{} ({})", as_given, norm));
    };
    both("cir", m.cir, rate);
    both("cbs", m.cbs, size);
    // The second bucket's parameters, as the table of algorithms names them.
    for (const SecondParam &sp : second_params())
        if (takes(m.algo, sp))
            both(std::string(sp.key).c_str(), (m.*sp.field).value_or(0), sp.rate ? rate : size);
    line("match", match_text(spec.value("match", json::object())));
    line("priority", given("priority", "0"));
    line("per", given("per", "aggregate"));
    const char *colors[] = {"green", "yellow", "red"};
    for (int c = 0; c < 3; ++c)
        line(colors[c], spec.contains(colors[c]) ? to_string(p->actions[c])
                                                 : to_string(p->actions[c]) + " (default)");
    line("color_aware", m.color_aware ? "true" : "false (default)");
    if (m.color_aware)
        line("color_map", given("color_map", "af"));
    line("packet_mode", m.packet_mode ? "true" : "false (default)");
    line("length", given("length", "l3"));
    line("overhead",
         spec.contains("overhead") ? with_unit(p->overhead, "bytes") : "0 bytes (default)");
}

// "12000/15360 bytes (78%)" for each bucket, as of the moment of the request.
std::string bucket_text(const json &b, const std::string &unit) {
    return fmt::format("{}/{} {} ({:.0f}%)", b[unit].get<uint64_t>(), b["size"].get<uint64_t>(),
                       unit, b["percent"].get<double>());
}

void print_buckets(const json &b) {
    std::string unit = b.value("unit", std::string("bytes"));
    for (const auto &[k, v] : b.items())
        if (k != "unit")
            std::cout << fmt::format("{:<12} {}\n",
                                     "bucket " + std::string(k == "c"   ? "C"
                                                             : k == "p" ? "P"
                                                                        : "E"),
                                     bucket_text(v, unit));
}

} // namespace

void add_policy_add(CLI::App &cmd) {
    add_policy_flags(cmd, add_flags, PolicyFlagsFor::add);
}

int run_policy_add(Context &ctx) {
    int rc = 0;
    json spec = policy_json(add_flags, true);
    // Bad values (units, prefixes, ports, meter rules) are bad usage: exit 2, nothing sent.
    if (auto p = to_policy(spec, 0); !p) {
        ctx.fail(p.error());
        return kExitUsage;
    }
    auto r = ctx.call({{"cmd", "policy_add"}, {"policy", spec}}, rc);
    if (r)
        ctx.json_reply(*r);
    return rc;
}

void add_policy_set(CLI::App &cmd) {
    add_policy_flags(cmd, set_flags, PolicyFlagsFor::set);
}

int run_policy_set(Context &ctx) {
    int rc = 0;
    json patch = policy_json(set_flags, false);
    if (patch.empty()) {
        ctx.fail("policy set: give at least one field to change");
        return kExitUsage;
    }
    // One round trip: the daemon merges the patch over the policy as it is, and answers bad
    // values of the result as bad usage (exit 2), changing nothing.
    auto r = ctx.call({{"cmd", "policy_set"}, {"name", set_flags.name}, {"patch", patch}}, rc);
    if (r)
        ctx.json_reply(*r);
    return rc;
}

void add_policy_del(CLI::App &cmd) {
    add_name(cmd);
}

int run_policy_del(Context &ctx) {
    int rc = 0;
    auto r = ctx.call({{"cmd", "policy_del"}, {"name", name}}, rc);
    if (r)
        ctx.json_reply(*r);
    return rc;
}

void add_policy_list(CLI::App &) {}

int run_policy_list(Context &ctx) {
    int rc = 0;
    auto r = ctx.call({{"cmd", "policy_list"}}, rc);
    if (!r)
        return rc;
    if (ctx.json_reply(*r))
        return rc;
    std::cout << fmt::format("{:<20} {:<8} {:>10} {:>8} {:>10} {:>8} {:<10} {:>5}  {}\n", "NAME",
                             "ALGO", "CIR", "CBS", "PIR/EIR", "PBS/EBS", "PER", "PRIO", "MATCH");
    for (const auto &p : (*r)["policies"]) {
        std::string second_rate = p.contains("pir") ? field(p, "pir") : field(p, "eir");
        std::string second_size = p.contains("pbs") ? field(p, "pbs") : field(p, "ebs");
        std::cout << fmt::format("{:<20} {:<8} {:>10} {:>8} {:>10} {:>8} {:<10} {:>5}  {}\n",
                                 field(p, "name"), field(p, "algo"), field(p, "cir"),
                                 field(p, "cbs"), second_rate, second_size,
                                 field(p, "per", "aggregate"), field(p, "priority", "0"),
                                 match_text(p.value("match", json::object())));
    }
    return rc;
}

void add_policy_show(CLI::App &cmd) {
    add_name(cmd);
}

int run_policy_show(Context &ctx) {
    int rc = 0;
    auto r = ctx.call({{"cmd", "policy_show"}, {"name", name}}, rc);
    if (!r)
        return rc;
    if (ctx.json_reply(*r))
        return rc;
    print_policy((*r)["policy"]);
    if (r->contains("buckets"))
        print_buckets((*r)["buckets"]);
    return rc;
}

} // namespace tricolor::cli
