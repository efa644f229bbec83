// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// daemon_cmds.cpp: each command builds one request, sends it to tricolord and prints the answer:
// a table for people, or the daemon's JSON with -j. Refusals print the daemon's message and
// exit 1; usage errors exit 2 before anything is sent.
#include "daemon_cmds.hpp"

#include "replay_cmd.hpp"
#include "tricolor/attach.hpp"
#include "tricolor/control.hpp"
#include "tricolor/policy_spec.hpp"
#include "tricolor/units.hpp"
#include "tricolor/yaml.hpp"

#include <fmt/format.h>

#include <functional>
#include <set>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include <unistd.h>

namespace tricolor::cli {

using nlohmann::json;

namespace {

// What the user gave for each row of policy_flags() (the table that makes the options).
struct PolicyFlags {
    struct Given {
        std::optional<std::string> text;                        // Text
        std::vector<std::pair<std::string, std::string>> match; // Match
        bool set = false;                                       // On, Off, Clear
    };
    std::string name;
    std::vector<Given> given = std::vector<Given>(policy_flags().size());
};

// The options of `policy add` (@add) or `policy set`, one per row of policy_flags().
void add_policy_flags(CLI::App *cmd, PolicyFlags &f, bool add) {
    const auto &rows = policy_flags();
    for (size_t i = 0; i < rows.size(); ++i) {
        const PolicyFlag &row = rows[i];
        PolicyFlags::Given &g = f.given[i];
        std::string option = policy_flag_option(row), help(row.help);
        CLI::Option *opt = nullptr;
        switch (row.kind) {
        case PolicyFlagKind::Name:
            opt = cmd->add_option(option, f.name, help)->required();
            break;
        case PolicyFlagKind::Text:
            opt = cmd->add_option(option, g.text, help);
            break;
        case PolicyFlagKind::Match:
            opt = cmd->add_option(option, g.match, help);
            break;
        case PolicyFlagKind::On:
            opt = cmd->add_flag(option, g.set, help);
            break;
        case PolicyFlagKind::Off:
        case PolicyFlagKind::Clear:
            if (!add)
                opt = cmd->add_flag(option, g.set, help);
            break;
        }
        if (!opt)
            continue;
        if (!row.choices.empty())
            opt->check(CLI::IsMember(row.choices));
        if (add && row.required_on_add)
            opt->required();
    }
}

// The fields the user gave, as a policy object (@full, for add) or a patch of one (for set).
// Later rows win: --no-parent after --parent leaves no parent.
json policy_json(const PolicyFlags &f, bool full) {
    json j = json::object();
    const auto &rows = policy_flags();
    for (size_t i = 0; i < rows.size(); ++i) {
        const PolicyFlags::Given &g = f.given[i];
        std::string key(rows[i].key);
        switch (rows[i].kind) {
        case PolicyFlagKind::Name:
            if (full)
                j[key] = f.name;
            break;
        case PolicyFlagKind::Text:
            if (g.text)
                j[key] = *g.text;
            break;
        case PolicyFlagKind::Match:
            if (!g.match.empty()) {
                json m = json::object();
                for (const auto &[k, v] : g.match)
                    m[k] = v;
                j[key] = m;
            }
            break;
        case PolicyFlagKind::On:
            if (g.set)
                j[key] = true;
            break;
        case PolicyFlagKind::Off:
            if (g.set)
                j[key] = false;
            break;
        case PolicyFlagKind::Clear:
            if (g.set)
                j[key] = nullptr; // merge_policy removes a null field
            break;
        }
    }
    return j;
}

class Runner {
  public:
    explicit Runner(GlobalOptions &g) : g_(g) {}

    std::string socket() const {
        if (!g_.socket.empty())
            return g_.socket;
        if (const char *env = std::getenv("TRICOLOR_SOCKET"); env && *env)
            return env;
        return kDefaultSocket;
    }

    // Sends @req; on refusal prints the message (as {"error":…} under -j) and returns nullopt.
    std::optional<json> call(json req, int &exit_code) {
        auto res = control_request(socket(), req);
        if (!res) {
            fail(res.error());
            exit_code = kExitRefused;
            return std::nullopt;
        }
        if (!res->value("ok", false)) {
            fail(res->value("error", std::string("refused")));
            // The daemon found the request's values bad (not refused a good change): usage.
            exit_code = res->value("usage", false) ? kExitUsage : kExitRefused;
            return std::nullopt;
        }
        res->erase("ok");
        if (res->contains("warnings") && !g_.json)
            for (const auto &w : (*res)["warnings"])
                std::cerr << "warning: " << w.get<std::string>() << "\n";
        if (res->contains("warning") && !g_.json)
            std::cerr << "warning: " << (*res)["warning"].get<std::string>() << "\n";
        exit_code = kExitOk;
        return *res;
    }

    void fail(const std::string &message) const {
        if (g_.json)
            std::cerr << json{{"error", message}}.dump() << "\n";
        else
            std::cerr << "tricolorctl: " << message << "\n";
    }

    bool json_out() const { return g_.json; }

  private:
    GlobalOptions &g_;
};

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

// One fleet policy's line (docs/spec.md §10): its mode, the hosts seen, this host's share.
std::string fleet_line(const json &f) {
    return fmt::format("  fleet: {}, {} hosts, demand here {} ({:.0f}% of the fleet's CIR {}), "
                       "holds {} bits, the fleet's hosts hold {}{}",
                       f.value("mode", "?"), f.value("hosts_seen", 0),
                       human_rate(f.value("local_demand", 0.0)), 100 * f.value("local_share", 0.0),
                       human_rate(f.value("fleet_cir", 0.0)), f.value("local_held", 0.0),
                       f.value("fleet_held", 0.0),
                       f.value("parameters_differ", false) ? " (this host's CIR/CBS differ: the "
                                                             "fleet's stand)"
                                                           : "");
}

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

std::string match_text(const json &m) {
    if (!m.is_object() || m.empty())
        return "any";
    std::string out;
    for (const auto &[k, v] : m.items())
        out +=
            (out.empty() ? "" : " ") + k + " " + (v.is_string() ? v.get<std::string>() : v.dump());
    return out;
}

std::string field(const json &p, const char *key, const char *fallback = "-") {
    if (!p.contains(key))
        return fallback;
    const auto &v = p[key];
    return v.is_string() ? v.get<std::string>() : v.dump();
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
    if (m.algo == Algo::trtcm) {
        both("pir", m.pir.value_or(0), rate);
        both("pbs", m.pbs.value_or(0), size);
    } else {
        both("ebs", m.ebs.value_or(0), size);
        if (m.algo == Algo::rfc4115)
            both("eir", m.eir.value_or(0), rate);
    }
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

std::function<int()> add_daemon_commands(CLI::App &app, GlobalOptions &g) {
    auto runner = std::make_shared<Runner>(g);
    auto selected = std::make_shared<std::function<int()>>();
    auto on = [selected](CLI::App *cmd, std::function<int()> run) {
        cmd->callback([selected, run] { *selected = run; });
    };

    // attach / detach
    struct HookFlags {
        std::string iface, hook = "xdp", direction = "ingress", xdp_mode = "auto";
    };
    auto hf = std::make_shared<HookFlags>();
    for (const char *name : {"attach", "detach"}) {
        bool attach = std::string(name) == "attach";
        auto *cmd = app.add_subcommand(name, attach ? "Attach the data path to an interface"
                                                    : "Take the data path off an interface");
        cmd->add_option("IF", hf->iface, "Interface")->required();
        cmd->add_option("--hook", hf->hook, "xdp or tc")
            ->check(CLI::IsMember({"xdp", "tc"}))
            ->capture_default_str();
        cmd->add_option("--direction", hf->direction, "ingress or egress (tc)")
            ->check(CLI::IsMember({"ingress", "egress"}))
            ->capture_default_str();
        if (attach)
            cmd->add_option("--xdp-mode", hf->xdp_mode, "native, generic or auto")
                ->check(CLI::IsMember({"native", "generic", "auto"}))
                ->capture_default_str();
        on(cmd, [runner, hf, attach] {
            int rc = 0;
            if (hf->hook == "xdp" && hf->direction == "egress") {
                runner->fail("XDP only sees ingress traffic: use --hook tc for egress");
                return kExitUsage;
            }
            json req = {{"cmd", attach ? "attach" : "detach"},
                        {"iface", hf->iface},
                        {"hook", hf->hook},
                        {"direction", hf->direction}};
            if (attach)
                req["xdp_mode"] = hf->xdp_mode;
            auto r = runner->call(req, rc);
            if (!r)
                return rc;
            if (runner->json_out())
                std::cout << r->dump() << "\n";
            else if (attach)
                std::cout << fmt::format("attached to {} ({} {})\n", hf->iface,
                                         r->value("mode", "?"), hf->direction);
            else if (r->contains("note"))
                std::cout << fmt::format("{}\n", (*r)["note"].get<std::string>());
            else
                std::cout << fmt::format("detached from {}\n", hf->iface);
            return rc;
        });
    }

    // policy add|set|del|list|show
    auto *policy = app.add_subcommand("policy", "Add, change, delete and show policies");
    policy->require_subcommand(1);
    auto add_f = std::make_shared<PolicyFlags>();
    // The man page (help2man --help-all) lists subcommands, not their flags: name the
    // hierarchy flags here so that it mentions them.
    auto *add = policy->add_subcommand(
        "add", "Add a policy; --parent NAME also meters it in NAME's buckets (chains of up to 4 "
               "levels, all or nothing), --only-parent, --coupling, --start full|empty");
    add_policy_flags(add, *add_f, true);
    on(add, [runner, add_f] {
        int rc = 0;
        json spec = policy_json(*add_f, true);
        // Bad values (units, prefixes, ports, meter rules) are bad usage: exit 2, nothing sent.
        if (auto p = to_policy(spec, 0); !p) {
            runner->fail(p.error());
            return kExitUsage;
        }
        auto r = runner->call({{"cmd", "policy_add"}, {"policy", spec}}, rc);
        if (r && runner->json_out())
            std::cout << r->dump() << "\n";
        return rc;
    });
    auto set_f = std::make_shared<PolicyFlags>();
    auto *set = policy->add_subcommand("set", "Change a live policy (flows keep their tokens)");
    add_policy_flags(set, *set_f, false);
    on(set, [runner, set_f] {
        int rc = 0;
        json patch = policy_json(*set_f, false);
        if (patch.empty()) {
            runner->fail("policy set: give at least one field to change");
            return kExitUsage;
        }
        // One round trip: the daemon merges the patch over the policy as it is, and answers
        // bad values of the result as bad usage (exit 2), changing nothing.
        auto r = runner->call({{"cmd", "policy_set"}, {"name", set_f->name}, {"patch", patch}}, rc);
        if (r && runner->json_out())
            std::cout << r->dump() << "\n";
        return rc;
    });
    auto name = std::make_shared<std::string>();
    auto *del = policy->add_subcommand("del", "Delete a policy");
    del->add_option("NAME", *name, "Policy name")->required();
    on(del, [runner, name] {
        int rc = 0;
        auto r = runner->call({{"cmd", "policy_del"}, {"name", *name}}, rc);
        if (r && runner->json_out())
            std::cout << r->dump() << "\n";
        return rc;
    });
    auto *list = policy->add_subcommand("list", "List the policies");
    on(list, [runner] {
        int rc = 0;
        auto r = runner->call({{"cmd", "policy_list"}}, rc);
        if (!r)
            return rc;
        if (runner->json_out()) {
            std::cout << r->dump() << "\n";
            return rc;
        }
        std::cout << fmt::format("{:<20} {:<8} {:>10} {:>8} {:>10} {:>8} {:<10} {:>5}  {}\n",
                                 "NAME", "ALGO", "CIR", "CBS", "PIR/EIR", "PBS/EBS", "PER", "PRIO",
                                 "MATCH");
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
    });
    auto *show = policy->add_subcommand("show", "Show one policy");
    show->add_option("NAME", *name, "Policy name")->required();
    on(show, [runner, name] {
        int rc = 0;
        auto r = runner->call({{"cmd", "policy_show"}, {"name", *name}}, rc);
        if (!r)
            return rc;
        if (runner->json_out()) {
            std::cout << r->dump() << "\n";
            return rc;
        }
        print_policy((*r)["policy"]);
        if (r->contains("buckets"))
            print_buckets((*r)["buckets"]);
        return rc;
    });

    // apply -f FILE [--dry-run]
    struct ApplyFlags {
        std::string file;
        bool dry_run = false;
    };
    auto af = std::make_shared<ApplyFlags>();
    auto *apply =
        app.add_subcommand("apply", "Replace the whole policy set from a file, all or nothing");
    apply->add_option("-f,--file", af->file, "YAML (or JSON) file with a 'policies:' list")
        ->required();
    apply->add_flag("--dry-run", af->dry_run, "Check only; change nothing");
    on(apply, [runner, af] {
        std::error_code ec;
        if (std::filesystem::is_directory(af->file, ec)) {
            runner->fail(fmt::format("{} is a directory: give a YAML or JSON file", af->file));
            return kExitUsage;
        }
        std::ifstream in(af->file);
        if (!in) {
            runner->fail(fmt::format("cannot read {}: {}", af->file, std::strerror(errno)));
            return kExitUsage;
        }
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        auto parsed = yaml_to_json(text);
        if (!parsed) {
            runner->fail(fmt::format("{}: {}", af->file, parsed.error()));
            return kExitUsage;
        }
        json doc = *parsed;
        if (!doc.is_object() || !doc.contains("policies") || !doc["policies"].is_array()) {
            runner->fail(fmt::format("{}: expected a 'policies:' list", af->file));
            return kExitUsage;
        }
        if (doc.contains("attachments") && !runner->json_out())
            std::cerr << "warning: " << af->file
                      << ": attachments are not changed by apply (use attach and detach)\n";
        std::vector<std::string> problems;
        for (const auto &spec : doc["policies"])
            if (auto p = to_policy(spec, 0); !p)
                problems.push_back(p.error());
        if (!problems.empty()) {
            std::string all;
            for (const auto &e : problems)
                all += (all.empty() ? "" : "\n") + e;
            runner->fail(fmt::format("{}: {}", af->file, all));
            return kExitUsage;
        }
        int rc = 0;
        auto r = runner->call(
            {{"cmd", "apply"}, {"policies", doc["policies"]}, {"dry_run", af->dry_run}}, rc);
        if (!r)
            return rc;
        if (runner->json_out())
            std::cout << r->dump() << "\n";
        else {
            std::cout << fmt::format("{} {} policies\n", af->dry_run ? "checked" : "applied",
                                     (*r)["policies"].get<uint64_t>());
            for (const char *what : {"added", "changed", "deleted"}) {
                if (!r->contains(what) || (*r)[what].empty())
                    continue;
                std::string names;
                for (const auto &n : (*r)[what])
                    names += " " + n.get<std::string>();
                std::cout << fmt::format("{} {}:{}\n",
                                         af->dry_run ? fmt::format("would be {}", what)
                                                     : std::string(what),
                                         (*r)[what].size(), names);
            }
        }
        return rc;
    });

    // stats [NAME] [--watch]
    struct StatsFlags {
        std::string name;
        bool watch = false;
        double interval = 1.0;
        int count = 0;
    };
    auto sf = std::make_shared<StatsFlags>();
    auto *stats = app.add_subcommand("stats", "Packets and bytes per colour per policy");
    stats->add_option("NAME", sf->name, "Only this policy");
    stats->add_flag("--watch", sf->watch, "Refresh in place with rates per colour");
    stats->add_option("--interval", sf->interval, "Seconds between refreshes")
        ->check(CLI::Range(0.1, 3600.0));
    auto *watch = stats->get_option("--watch");
    stats->add_option("--count", sf->count, "Stop after this many refreshes (0: until Ctrl-C)")
        ->check(CLI::NonNegativeNumber)
        ->needs(watch);
    on(stats, [runner, sf] {
        bool tty = isatty(STDOUT_FILENO);
        json req = {{"cmd", "stats"}};
        if (!sf->name.empty())
            req["name"] = sf->name;
        int rc = 0;
        std::optional<json> prev;
        auto last = std::chrono::steady_clock::now();
        for (int i = 0;; ++i) {
            auto r = runner->call(req, rc);
            if (!r)
                return rc;
            auto now = std::chrono::steady_clock::now();
            double secs = std::chrono::duration<double>(now - last).count();
            if (runner->json_out()) {
                std::cout << r->dump() << std::endl;
            } else {
                if (sf->watch && tty)
                    std::cout << "\033[H\033[2J"; // home and clear: refresh in place
                else if (sf->watch && i > 0)
                    std::cout << "\n"; // not a terminal: one table after another
                print_stats_table(*r, prev ? &*prev : nullptr, secs);
                std::cout.flush();
            }
            if (!sf->watch || (sf->count && i + 1 >= sf->count))
                return rc;
            prev = *r;
            last = now;
            std::this_thread::sleep_for(std::chrono::duration<double>(sf->interval));
        }
    });

    // flows [--policy NAME] [--top N]
    struct FlowFlags {
        std::string policy;
        int64_t top = 0;
    };
    auto ff = std::make_shared<FlowFlags>();
    auto *flows = app.add_subcommand("flows", "The busiest flows with their colour counters");
    flows->add_option("--policy", ff->policy, "Only this policy's flows");
    flows->add_option("--top", ff->top, "Only the N busiest (by bytes)")
        ->check(CLI::NonNegativeNumber);
    on(flows, [runner, ff] {
        json req = {{"cmd", "flows"}};
        if (!ff->policy.empty())
            req["policy"] = ff->policy;
        if (ff->top)
            req["top"] = ff->top;
        int rc = 0;
        auto r = runner->call(req, rc);
        if (!r)
            return rc;
        if (runner->json_out()) {
            std::cout << r->dump() << "\n";
            return rc;
        }
        // A child's flows name their chain, "link>user": every packet there passed both.
        auto chain = [](const json &f) {
            return (f.contains("parent") && f["parent"].is_string()
                        ? f["parent"].get<std::string>() + ">"
                        : std::string()) +
                   f["policy"].get<std::string>();
        };
        size_t width = 16;
        for (const auto &f : (*r)["flows"])
            width = std::max(width, chain(f).size());
        std::cout << fmt::format("{:<{}} {:<44} {:>10} {:>10} {:>10} {:>5} {:>5}\n", "POLICY",
                                 width, "KEY", "GREEN", "YELLOW", "RED", "C%", "E/P%");
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
        }
        return rc;
    });

    auto *status = app.add_subcommand("status", "Attachments, programs and map fill levels");
    on(status, [runner] {
        int rc = 0;
        auto r = runner->call({{"cmd", "status"}}, rc);
        if (!r)
            return rc;
        if (runner->json_out()) {
            std::cout << r->dump() << "\n";
            return rc;
        }
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
                : a.value("managed", true) ? std::string("attached")
                                           : "attached, NOT MANAGED: " + a.value("stale", ""));
        if (s["attachments"].empty())
            std::cout << "(no attachments)\n";
        std::cout << fmt::format("policies    {} of {}\n", s["policies"]["used"].get<uint64_t>(),
                                 s["policies"]["capacity"].get<uint64_t>());
        std::cout << fmt::format("flows       {} of {} (as of the last pass), {} idle flows "
                                 "reclaimed\n",
                                 s["flows"]["used"].get<uint64_t>(),
                                 s["flows"]["capacity"].get<uint64_t>(),
                                 s["flows"].value("reclaimed", uint64_t{0}));
        // flows --top: from the heavy hitters the data path keeps, or by a walk of the table.
        if (auto t = s["flows"].value("top", json()); t.is_object())
            std::cout << fmt::format(
                "flows --top {}\n",
                t.value("tracking", false)
                    ? fmt::format("from the heavy hitters: flows of {} bytes or more ({} at the "
                                  "last pass)",
                                  t.value("threshold", uint64_t{0}),
                                  t.value("candidates", uint64_t{0}))
                    : std::string("walks the table (no heavy hitters now)"));
        std::cout << fmt::format("metrics     {}\n", s.value("metrics", std::string("none")));
        std::cout << fmt::format("pin dir     {}\n", s["pin_dir"].get<std::string>());
        std::cout << fmt::format("config      {}\n", s["config"].get<std::string>());
        if (s.contains("state"))
            std::cout << fmt::format("state       {} (started from the {})\n",
                                     s["state"].get<std::string>(),
                                     s.value("started_from", std::string("?")));
        if (auto f = s.value("fleet", json()); f.is_object()) {
            std::cout << fmt::format(
                "fleet {} as {}, fallback {}{}: {} exchanges, {} failed, {} fallbacks, {} "
                "returns\n",
                f.value("redis", ""), f.value("node", ""), f.value("fallback", ""),
                f.value("in_fallback", false) ? " (IN FALLBACK)" : "", f.value("exchanges", 0),
                f.value("failures", 0), f.value("fallbacks", 0), f.value("recoveries", 0));
            for (const auto &[name, pf] : f["policies"].items())
                std::cout << name << fleet_line(pf) << "\n";
        }
        return rc;
    });

    return [selected]() { return *selected ? (*selected)() : -1; };
}

} // namespace tricolor::cli
