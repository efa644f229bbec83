// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// replay_cmd.cpp: parses the meter flags with the shared units parser and validation, reads
// the whole trace (a malformed line fails before any output), and replays it.
#include "context.hpp"

#include "tricolor/meter.hpp"
#include "tricolor/hier_replay.hpp"
#include "tricolor/replay.hpp"
#include "tricolor/units.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>

namespace tricolor::cli {

namespace {

struct ReplayOptions {
    MeterSpec meter;
    std::string engine = "model";
    std::string file;
    std::string policy_file; // -f: a config file's policies, trace lines with addresses (§9)
} options;

void add_meter_flags(CLI::App &cmd, MeterSpec &f) {
    cmd.add_option("--algo", f.algo, "Meter algorithm")
        ->required()
        ->check(CLI::IsMember({"srtcm", "trtcm", "rfc4115"}));
    cmd.add_option("--cir", f.cir, "Committed information rate (e.g. 10mbit)")->required();
    cmd.add_option("--cbs", f.cbs, "Committed burst size (e.g. 15k)")->required();
    cmd.add_option("--ebs", f.ebs, "Excess burst size (srtcm, rfc4115)");
    cmd.add_option("--pir", f.pir, "Peak information rate (trtcm)");
    cmd.add_option("--pbs", f.pbs, "Peak burst size (trtcm)");
    cmd.add_option("--eir", f.eir, "Excess information rate (rfc4115)");
    cmd.add_flag("--color-aware", f.color_aware, "Take the incoming colour into account");
    cmd.add_flag("--packet-mode", f.packet_mode,
                 "Meter packets, not bytes: rates in packets/s, sizes in packets");
    cmd.add_flag("--coupling", f.coupling, "rfc4115: what overflows C goes to E (MEF CF=1)");
    cmd.add_option("--start", f.start, "A new flow's buckets start full (default) or empty")
        ->check(CLI::IsMember({"full", "empty"}));
}

} // namespace

void add_replay(CLI::App &cmd) {
    ReplayOptions &o = options;
    add_meter_flags(cmd, o.meter);
    // With -f the meters come from the policy file: the meter flags are then refused, and
    // without it the three that every meter needs are checked in run_replay.
    auto *file = cmd.add_option("-f,--policies", o.policy_file,
                                "Policy file (a config file's policies:): trace lines then carry "
                                "'SRC DST [PROTO [SPORT DPORT]]' and output names the policy");
    for (const char *name : {"--algo", "--cir", "--cbs", "--ebs", "--pir", "--pbs", "--eir",
                             "--color-aware", "--packet-mode", "--coupling", "--start"}) {
        auto *opt = cmd.get_option(name);
        opt->required(false);
        file->excludes(opt);
    }
    cmd.add_option("--engine", o.engine, "model: the C meter in user space; bpf: the BPF program")
        ->check(CLI::IsMember({"model", "bpf"}))
        ->capture_default_str();
    cmd.add_option("FILE", o.file, "Trace, one 'time_ns bytes [colour]' a line; - for stdin")
        ->required();
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
    for (auto [name, value] : {std::pair{"--algo", &o.meter.algo}, std::pair{"--cir", &o.meter.cir},
                               std::pair{"--cbs", &o.meter.cbs}})
        if (value->empty()) {
            std::cerr << fmt::format("{} is required (or -f POLICIES)\n", name);
            return kExitUsage;
        }
    auto meter = parse_meter_spec(o.meter);
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
    std::unique_ptr<ReplayEngine> engine;
    if (o.engine == "bpf") {
        quiet_libbpf_logging();
        engine = std::make_unique<BpfEngine>(config);
    } else {
        engine = std::make_unique<ModelEngine>(config);
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
