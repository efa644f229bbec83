// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// replay_cmd.cpp: `tricolorctl replay`: takes a meter's flags from the policy flag table (or the
// policies of a file), parses them with the shared units parser and validation, reads the whole
// trace (a malformed line fails before any output), and replays it.
#include "context.hpp"
#include "policy_flags.hpp"
#include "value_doc.hpp"

#include "tricolor/meter.hpp"
#include "tricolor/hier_replay.hpp"
#include "tricolor/policy_fields.hpp"
#include "tricolor/replay.hpp"
#include "tricolor/units.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

namespace tricolor::cli {

using nlohmann::json;

namespace {

struct ReplayOptions {
    PolicyFlags meter; // the policy flag table's meter rows
    std::string engine = "model";
    std::string file;
    std::string policy_file; // -f: a config file's policies, trace lines with addresses (§9)
} options;

} // namespace

void add_replay(CLI::App &cmd) {
    ReplayOptions &o = options;
    auto meter = add_policy_flags(cmd, o.meter, PolicyFlagsFor::replay);
    // With -f the meters come from the policy file: the meter flags are then refused, and
    // without it the ones that every meter needs are checked in run_replay.
    auto *file =
        describe(cmd.add_option("-f,--policies", o.policy_file,
                                "Policy file (a config file's policies:): trace lines then carry "
                                "'SRC DST [PROTO [SPORT DPORT]]' and output names the policy"),
                 {.name = "POLICIES", .complete = Complete::files});
    for (CLI::Option *opt : meter)
        file->excludes(opt);
    one_of(cmd.add_option("--engine", o.engine,
                          "model: the C meter in user space; bpf: the BPF program"),
           {"model", "bpf"})
        ->capture_default_str();
    describe(
        cmd.add_option("FILE", o.file, "Trace, one 'time_ns bytes [colour]' a line; - for stdin")
            ->required(),
        {.complete = Complete::files});
    cmd.footer("Output: one 'time_ns,bytes,color' line a packet on stdout (with -f: "
               "'time_ns,bytes,color,POLICY', '-' when unclassified); totals on stderr.");
}

namespace {

std::istream *open_trace(const std::string &name, std::ifstream &file) {
    if (name == "-")
        return &std::cin;
    file.open(name);
    if (!file) {
        std::cerr << fmt::format("cannot open trace '{}': {}\n", name, std::strerror(errno));
        return nullptr;
    }
    return &file;
}

int run_policy_replay(const ReplayOptions &o) {
    auto policies = load_policy_file(o.policy_file);
    if (!policies) {
        std::cerr << policies.error() << "\n";
        return kExitUsage;
    }
    std::ifstream file;
    std::istream *in = open_trace(o.file, file);
    if (!in)
        return kExitUsage;
    auto trace = parse_flow_trace(*in);
    if (!trace) {
        std::cerr << fmt::format("{}: {}\n", o.file == "-" ? "stdin" : o.file, trace.error());
        return kExitUsage;
    }
    std::unique_ptr<HierEngine> engine;
    if (o.engine == "bpf") {
        quiet_libbpf_logging();
        try {
            engine = std::make_unique<HierBpfEngine>(*policies);
        } catch (const std::exception &e) {
            std::cerr << e.what() << "\n";
            return kExitRefused;
        }
    } else {
        engine = std::make_unique<HierModelEngine>(*policies);
    }
    std::ios::sync_with_stdio(false);
    HierTotals t = run_hier_replay(*engine, *policies, *trace, std::cout);
    std::cout.flush();
    for (Color c : {Color::green, Color::yellow, Color::red}) {
        auto i = static_cast<size_t>(c);
        std::cerr << fmt::format("{:<6} {:>12} packets {:>16} bytes\n", to_string(c), t.packets[i],
                                 t.bytes[i]);
    }
    std::cerr << fmt::format("{:<6} {:>12} packets {:>16} bytes (unclassified)\n", "-",
                             t.unclassified_packets, t.unclassified_bytes);
    return std::cout ? kExitOk : kExitRefused;
}

} // namespace

int run_replay(Context &) {
    const ReplayOptions &o = options;
    if (!o.policy_file.empty())
        return run_policy_replay(o);
    json spec = policy_json(o.meter, false);
    for (const PolicyFlag &row : policy_flags())
        if (row.meter && row.required_on_add &&
            spec.value(std::string(row.key), std::string()).empty()) {
            std::cerr << fmt::format("{} is required (or -f POLICIES)\n", policy_flag_option(row));
            return kExitUsage;
        }
    auto meter = to_meter(spec);
    if (!meter) {
        std::cerr << meter.error() << "\n";
        return kExitUsage;
    }
    for (const auto &w : meter->warnings)
        std::cerr << "warning: " << w << "\n";

    std::ifstream file;
    std::istream *in = &std::cin;
    if (o.file != "-") {
        file.open(o.file);
        if (!file) {
            std::cerr << fmt::format("cannot open trace '{}': {}\n", o.file, std::strerror(errno));
            return kExitUsage;
        }
        in = &file;
    }
    auto trace = parse_trace(*in);
    if (!trace) {
        std::cerr << fmt::format("{}: {}\n", o.file == "-" ? "stdin" : o.file, trace.error());
        return kExitUsage;
    }

    auto config = make_meter_config(meter->params);
    auto warm = make_warm_config(meter->params);
    auto quota = make_quota_config(meter->params);
    std::unique_ptr<ReplayEngine> engine;
    if (o.engine == "bpf") {
        quiet_libbpf_logging();
        engine = std::make_unique<BpfEngine>(config, warm, quota);
    } else {
        engine = std::make_unique<ModelEngine>(config, warm, quota);
    }
    std::ios::sync_with_stdio(false);
    ColorTotals t = run_replay(*engine, *trace, std::cout);
    std::cout.flush();
    for (Color c : {Color::green, Color::yellow, Color::red}) {
        auto i = static_cast<size_t>(c);
        std::cerr << fmt::format("{:<6} {:>12} packets {:>16} bytes\n", to_string(c), t.packets[i],
                                 t.bytes[i]);
    }
    return std::cout ? kExitOk : kExitRefused;
}

} // namespace tricolor::cli
