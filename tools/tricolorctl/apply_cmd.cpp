// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// apply_cmd.cpp: `tricolorctl apply -f FILE`: the whole policy set from a file, all or nothing.
// The file is read and every policy checked here, so a bad one is bad usage (exit 2) and nothing
// is sent.
#include "context.hpp"
#include "value_doc.hpp"

#include "tricolor/policy_fields.hpp"
#include "tricolor/yaml.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace tricolor::cli {

using nlohmann::json;

namespace {

struct ApplyFlags {
    std::string file;
    bool dry_run = false;
} flags;

} // namespace

void add_apply(CLI::App &cmd) {
    describe(cmd.add_option("-f,--file", flags.file, "YAML (or JSON) file with a 'policies:' list")
                 ->required(),
             {.name = "FILE", .complete = Complete::files});
    cmd.add_flag("--dry-run", flags.dry_run, "Check only; change nothing");
}

int run_apply(Context &ctx) {
    std::error_code ec;
    if (std::filesystem::is_directory(flags.file, ec)) {
        ctx.fail(fmt::format("{} is a directory: give a YAML or JSON file", flags.file));
        return kExitUsage;
    }
    std::ifstream in(flags.file);
    if (!in) {
        ctx.fail(fmt::format("cannot read {}: {}", flags.file, std::strerror(errno)));
        return kExitUsage;
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto parsed = yaml_to_json(text);
    if (!parsed) {
        ctx.fail(fmt::format("{}: {}", flags.file, parsed.error()));
        return kExitUsage;
    }
    json doc = *parsed;
    if (!doc.is_object() || !doc.contains("policies") || !doc["policies"].is_array()) {
        ctx.fail(fmt::format("{}: expected a 'policies:' list", flags.file));
        return kExitUsage;
    }
    if (doc.contains("attachments") && !ctx.json_out())
        std::cerr << "warning: " << flags.file
                  << ": attachments are not changed by apply (use attach and detach)\n";
    std::vector<std::string> problems;
    for (const auto &spec : doc["policies"])
        if (auto p = to_policy(spec, 0); !p)
            problems.push_back(p.error());
    if (!problems.empty()) {
        std::string all;
        for (const auto &e : problems)
            all += (all.empty() ? "" : "\n") + e;
        ctx.fail(fmt::format("{}: {}", flags.file, all));
        return kExitUsage;
    }
    int rc = 0;
    auto r =
        ctx.call({{"cmd", "apply"}, {"policies", doc["policies"]}, {"dry_run", flags.dry_run}}, rc);
    if (!r)
        return rc;
    if (!ctx.json_reply(*r)) {
        std::cout << fmt::format("{} {} policies\n", flags.dry_run ? "checked" : "applied",
                                 (*r)["policies"].get<uint64_t>());
        for (const char *what : {"added", "changed", "deleted"}) {
            if (!r->contains(what) || (*r)[what].empty())
                continue;
            std::string names;
            for (const auto &n : (*r)[what])
                names += " " + n.get<std::string>();
            std::cout << fmt::format(
                "{} {}:{}\n", flags.dry_run ? fmt::format("would be {}", what) : std::string(what),
                (*r)[what].size(), names);
        }
    }
    return rc;
}

} // namespace tricolor::cli
