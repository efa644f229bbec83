// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// whatif_cmd.cpp: `tricolorctl whatif CAPTURE -f POLICIES` (docs/spec.md §12): a capture through
// the real data path, as a table (or -j, or --packets lines), a plot, or a suggested CBS or CIR.
// A capture that fails part way prints nothing but the error: no result is shown as if whole.
#include "context.hpp"
#include "value_doc.hpp"

#include "tricolor/bpf_load.hpp"
#include "tricolor/hier_replay.hpp"
#include "tricolor/units.hpp"
#include "tricolor/whatif.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <unistd.h>

namespace tricolor::cli {

using nlohmann::json;

namespace {

struct WhatIfCmdOptions {
    std::string capture, policy_file, plot, suggest, policy, red_at_most;
    size_t flows = 0;
    bool packets = false;
} options;

constexpr const char *kTcpNote =
    "a replay sends every packet as it was captured: TCP senders would have slowed down at the "
    "first drop, so their red is an upper bound";

// "1%", "0.5%", or "1" (a percentage too): 0 to 1.
std::optional<double> parse_share(const std::string &text) {
    std::string t = text;
    if (!t.empty() && t.back() == '%')
        t.pop_back();
    try {
        size_t used = 0;
        double v = std::stod(t, &used);
        if (used != t.size())
            return std::nullopt;
        v /= 100;
        if (!(v >= 0 && v <= 1))
            return std::nullopt;
        return v;
    } catch (const std::exception &) {
        return std::nullopt;
    }
}

std::string address(const FlowTracePacket &p, bool src) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(p.ipv6 ? AF_INET6 : AF_INET, (src ? p.src : p.dst).data(), buf, sizeof(buf));
    return buf;
}

std::string endpoint(const FlowTracePacket &p, bool src) {
    std::string a = address(p, src);
    if (!p.ports)
        return a;
    return p.ipv6 ? fmt::format("[{}]:{}", a, src ? p.sport : p.dport)
                  : fmt::format("{}:{}", a, src ? p.sport : p.dport);
}

std::string upper(std::string s) {
    for (char &c : s)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

double share(uint64_t part, uint64_t whole) {
    return whole ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

json counts_json(const ColorCounts &c) {
    json j;
    for (Color col : {Color::green, Color::yellow, Color::red})
        j[std::string(to_string(col))] = {{"packets", c.packets[static_cast<size_t>(col)]},
                                          {"bytes", c.bytes[static_cast<size_t>(col)]}};
    return j;
}

json result_json(const WhatIfResult &r, const std::vector<Policy> &policies) {
    json j = {{"capture", options.capture},
              {"link_type", r.link_type},
              {"packets", r.packets},
              {"duration_ns", r.duration_ns},
              {"policies", json::array()},
              {"unclassified",
               {{"packets", r.unclassified.packets[0]}, {"bytes", r.unclassified.bytes[0]}}},
              {"not_ip", {{"packets", r.not_ip_packets}, {"bytes", r.not_ip_bytes}}},
              {"timestamps_backwards", r.backwards},
              {"note", kTcpNote}};
    for (size_t i = 0; i < r.policies.size(); ++i) {
        const WhatIfPolicy &w = r.policies[i];
        json p = counts_json(w.counts);
        p["name"] = w.name;
        p["red_share"] = share(w.counts.bytes[2], w.counts.total_bytes());
        p["peak_red_second"] = w.peak_red_second;
        p["peak_red_bytes"] = w.peak_red_bytes;
        json actions;
        for (Color col : {Color::green, Color::yellow, Color::red})
            actions[std::string(to_string(col))] =
                to_string(policies[i].actions[static_cast<size_t>(col)]);
        p["actions"] = actions;
        j["policies"].push_back(p);
    }
    if (!r.first_backwards.empty())
        j["first_backwards"] = r.first_backwards;
    if (options.flows) {
        j["flows"] = json::array();
        for (const WhatIfFlow &f : r.flows) {
            json fj = counts_json(f.counts);
            fj["policy"] = f.policy;
            fj["src"] = address(f.key, true);
            fj["dst"] = address(f.key, false);
            fj["proto"] = f.key.proto;
            if (f.key.ports) {
                fj["sport"] = f.key.sport;
                fj["dport"] = f.key.dport;
            }
            j["flows"].push_back(fj);
        }
    }
    return j;
}

void print_table(std::ostream &out, const WhatIfResult &r, const std::vector<Policy> &policies) {
    out << fmt::format("{} ({}): {} packets over {:.3f} s\n", options.capture, r.link_type,
                       r.packets, static_cast<double>(r.duration_ns) / 1e9);
    out << fmt::format("{:<16} {:<6} {:>12} {:>16} {:>7}  {}\n", "POLICY", "COLOUR", "PACKETS",
                       "BYTES", "SHARE", "ACTION");
    for (size_t i = 0; i < r.policies.size(); ++i) {
        const WhatIfPolicy &w = r.policies[i];
        for (Color col : {Color::green, Color::yellow, Color::red}) {
            auto c = static_cast<size_t>(col);
            std::string action = to_string(policies[i].actions[c]);
            if (col == Color::red && w.peak_red_bytes)
                action += fmt::format("   (peak: {} bytes red in second {})", w.peak_red_bytes,
                                      w.peak_red_second);
            out << fmt::format("{:<16} {:<6} {:>12} {:>16} {:>6.2f}%  {}\n",
                               col == Color::green ? w.name : "", to_string(col),
                               w.counts.packets[c], w.counts.bytes[c],
                               100 * share(w.counts.bytes[c], w.counts.total_bytes()), action);
        }
    }
    out << fmt::format("{:<23} {:>12} {:>16}\n", "unclassified (passed)", r.unclassified.packets[0],
                       r.unclassified.bytes[0]);
    if (r.not_ip_packets)
        out << fmt::format("{:<23} {:>12} {:>16}\n", "not IP or malformed", r.not_ip_packets,
                           r.not_ip_bytes);
    if (options.flows && !r.flows.empty()) {
        out << fmt::format("\n{:<16} {:<46} {:>6} {:>14} {:>14} {:>14}\n", "POLICY", "FLOW",
                           "PROTO", "GREEN_BYTES", "YELLOW_BYTES", "RED_BYTES");
        for (const WhatIfFlow &f : r.flows)
            out << fmt::format("{:<16} {:<46} {:>6} {:>14} {:>14} {:>14}\n", f.policy,
                               endpoint(f.key, true) + " > " + endpoint(f.key, false), f.key.proto,
                               f.counts.bytes[0], f.counts.bytes[1], f.counts.bytes[2]);
    }
    if (r.backwards)
        out << fmt::format("note: {} packets were stamped before the one ahead of them (first: "
                           "{}): metered as no time passing\n",
                           r.backwards, r.first_backwards);
    out << "note: " << kTcpNote << "\n";
}

// A progress line on a terminal, once a run has taken 2 s.
class Progress {
  public:
    Progress() : tty_(isatty(STDERR_FILENO)), start_(std::chrono::steady_clock::now()) {}
    void operator()(double done, uint64_t packets) {
        if (!tty_ || std::chrono::steady_clock::now() - start_ < std::chrono::seconds(2))
            return;
        shown_ = true;
        int width = 30, filled = static_cast<int>(done * width);
        std::cerr << fmt::format("\rwhatif [{}{}] {:5.1f}%  {} packets", std::string(filled, '#'),
                                 std::string(width - filled, ' '), done * 100, packets)
                  << std::flush;
    }
    ~Progress() {
        if (shown_)
            std::cerr << "\r\033[K" << std::flush;
    }

  private:
    bool tty_, shown_ = false;
    std::chrono::steady_clock::time_point start_;
};

} // namespace

void add_whatif(CLI::App &cmd) {
    WhatIfCmdOptions &o = options;
    describe(cmd.add_option("CAPTURE", o.capture,
                            "A pcap or pcapng capture (Ethernet, Linux cooked or raw IP); - for "
                            "stdin")
                 ->required(),
             {.complete = Complete::files});
    describe(cmd.add_option("-f,--policies", o.policy_file,
                            "Policy file (a config file's policies:), as replay -f takes")
                 ->required(),
             {.name = "POLICIES", .complete = Complete::files});
    describe(cmd.add_option("--flows", o.flows, "Also the N flows with the most bytes"),
             {.name = "N"});
    cmd.add_flag("--packets", o.packets,
                 "One 'time_ns,bytes,color,POLICY' line a packet on stdout (as replay -f; time "
                 "from the first packet), the table on stderr");
    describe(cmd.add_option("--plot", o.plot,
                            "Write an SVG: offered rate by colour and bucket levels over time"),
             {.name = "FILE.svg", .complete = Complete::files});
    one_of(cmd.add_option("--suggest", o.suggest,
                          "Search the smallest CBS or CIR (trTCM: PBS or PIR) that keeps red at "
                          "most --red-at-most"),
           {"cbs", "cir", "pbs", "pir"});
    describe(cmd.add_option("--red-at-most", o.red_at_most,
                            "With --suggest: the red share of the policy's bytes allowed (1%)"),
             {.name = "PERCENT"});
    describe(cmd.add_option("--policy", o.policy,
                            "With --suggest: the policy (needed when the file has several)"),
             {.name = "NAME"});
    cmd.footer("Every packet goes through the data path's own program (BPF_PROG_TEST_RUN) at "
               "the capture's timestamps. Bytes are IP lengths; a packet counts at its policy and "
               "at each parent above it.");
}

int run_whatif(Context &ctx) {
    const WhatIfCmdOptions &o = options;
    auto usage = [&](const std::string &m) {
        ctx.fail(m);
        return kExitUsage;
    };
    if (o.packets && ctx.json_out())
        return usage("--packets and -j each take stdout: choose one");
    if (o.suggest.empty() && (!o.red_at_most.empty() || !o.policy.empty()))
        return usage("--red-at-most and --policy go with --suggest cbs|cir");
    auto policies = load_policy_file(o.policy_file);
    if (!policies)
        return usage(policies.error());
    if (policies->empty())
        return usage(fmt::format("{}: no policies", o.policy_file));
    quiet_libbpf_logging();

    if (!o.suggest.empty()) {
        if (o.red_at_most.empty())
            return usage("--suggest needs --red-at-most PERCENT (e.g. 1%)");
        auto p = parse_share(o.red_at_most);
        if (!p)
            return usage(
                fmt::format("--red-at-most '{}' is not a share from 0% to 100%", o.red_at_most));
        if (o.capture == "-")
            return usage("--suggest reads the capture once per try: give a file, not stdin");
        std::string name = o.policy;
        if (name.empty()) {
            if (policies->size() != 1)
                return usage(fmt::format("{} has {} policies: name one with --policy",
                                         o.policy_file, policies->size()));
            name = policies->front().name;
        }
        Result<WhatIfSuggestion> s;
        try {
            s = suggest_whatif(*policies, o.capture, name, o.suggest, *p);
        } catch (const std::exception &e) {
            ctx.fail(e.what());
            return kExitRefused;
        }
        if (!s)
            return usage(s.error());
        if (ctx.json_out()) {
            std::cout << json{{"policy", name},    {"suggest", s->what},
                              {"value", s->value}, {"red_share", s->red_share},
                              {"red_at_most", *p}, {"runs", s->runs},
                              {"note", kTcpNote}}
                             .dump()
                      << "\n";
        } else {
            std::cout << fmt::format(
                "{}: the smallest {} that keeps red at most {:.4g}% of its bytes is {} ({}); red "
                "there: {:.4g}% ({} runs over the capture)\nnote: {}\n",
                name, upper(s->what), *p * 100, s->value,
                s->what.ends_with("bs")
                    ? fmt::format("{:.1f} KiB", static_cast<double>(s->value) / 1024)
                    : fmt::format("{:.3f} Mbit/s", static_cast<double>(s->value) / 1e6),
                s->red_share * 100, s->runs, kTcpNote);
        }
        return kExitOk;
    }

    WhatIfOptions wo;
    wo.flows = o.flows;
    wo.plot = !o.plot.empty();
    std::ios::sync_with_stdio(false);
    if (o.packets)
        wo.packets = &std::cout;
    Result<WhatIfResult> r;
    {
        Progress progress;
        wo.progress = [&](double done, uint64_t n) { progress(done, n); };
        try {
            r = tricolor::run_whatif(*policies, o.capture, wo);
        } catch (const std::exception &e) {
            ctx.fail(e.what());
            return kExitRefused;
        }
    }
    if (!r) {
        std::cout.flush();
        return usage(r.error());
    }
    if (!o.plot.empty()) {
        std::ofstream svg(o.plot);
        svg << whatif_svg(*r, *policies);
        if (!svg.flush()) {
            ctx.fail(fmt::format("cannot write {}: {}", o.plot, std::strerror(errno)));
            return kExitRefused;
        }
    }
    if (ctx.json_out())
        std::cout << result_json(*r, *policies).dump() << "\n";
    else
        print_table(o.packets ? std::cerr : std::cout, *r, *policies);
    std::cout.flush();
    return std::cout ? kExitOk : kExitRefused;
}

} // namespace tricolor::cli
