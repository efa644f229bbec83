// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolorctl-gen: run by the build, writes tricolorctl's bash completion and man page from the
// command line tricolorctl itself builds (make_app: the command table, the policy flag table and
// each command's options), so that neither can leave out a command or an option.
//   tricolorctl-gen completion TEMPLATE OUT   the template's "# @tables" line becomes the tables
//   tricolorctl-gen man TEMPLATE OUT          its markers become the entries (gen_man.cpp)
#include "commands.hpp"
#include "gen.hpp"
#include "value_doc.hpp"

#include "tricolor/policy_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace tricolor::cli::gen {

std::vector<const CLI::App *> subcommands_of(const CLI::App &app) {
    return app.get_subcommands([](const CLI::App *) { return true; });
}

std::vector<const CLI::Option *> options_of(const CLI::App &app) {
    return app.get_options([&](const CLI::Option *opt) {
        return !app.get_parent() || (opt != app.get_help_ptr() && opt != app.get_help_all_ptr());
    });
}

std::string path_of(const CLI::App &app) {
    if (!app.get_parent())
        return "";
    std::string up = path_of(*app.get_parent());
    return up.empty() ? app.get_name() : up + " " + app.get_name();
}

std::vector<std::string> names_of(const CLI::Option &opt) {
    if (!opt.nonpositional())
        return {opt.get_name(true)};
    std::vector<std::string> names;
    for (const auto &s : opt.get_snames())
        names.push_back("-" + s);
    for (const auto &l : opt.get_lnames())
        names.push_back("--" + l);
    return names;
}

int values_of(const CLI::Option &opt) {
    return opt.get_expected_min() == 0 ? 0 : opt.get_type_size_min();
}

bool is_policy_option(const CLI::Option &opt) {
    auto names = names_of(opt);
    return std::ranges::any_of(policy_flags(), [&](const PolicyFlag &row) {
        return row.kind != PolicyFlagKind::Name &&
               std::ranges::find(names, policy_flag_option(row)) != names.end();
    });
}

namespace {

std::string single_quoted(const std::string &s) {
    if (s.find('\'') != std::string::npos)
        throw std::runtime_error("a quote in '" + s + "'");
    return "'" + s + "'";
}

std::string joined(const std::vector<std::string> &words) {
    std::string out;
    for (const auto &w : words)
        out += (out.empty() ? "" : " ") + w;
    return out;
}

// How the completion's _tricolorctl_complete is told what completes a value.
std::string completion_of(const CLI::Option &opt) {
    const ValueDoc *doc = value_doc(&opt);
    switch (doc ? doc->complete : Complete::none) {
    case Complete::none:
        return "";
    case Complete::words:
        return "words " + joined(doc->words);
    case Complete::files:
        return "files";
    case Complete::interfaces:
        return "interfaces";
    case Complete::policies:
        return "policies";
    }
    return "";
}

// The tables of the completion script for @app and the commands under it, keyed by the command's
// path ("tricolorctl policy add") and "PATH OPTION".
void completion_tables(const CLI::App &app, std::vector<std::string> &lines) {
    std::string path = path_of(app).empty() ? "tricolorctl" : "tricolorctl " + path_of(app);
    std::vector<std::string> commands, options;
    for (const CLI::App *sub : subcommands_of(app))
        commands.push_back(sub->get_name());
    bool positional = false;
    for (const CLI::Option *opt : options_of(app)) {
        if (!opt->nonpositional()) {
            if (!positional) // the first positional's completion stands for them all
                lines.push_back(fmt::format("completion[{}]={}", single_quoted(path),
                                            single_quoted(completion_of(*opt))));
            positional = true;
            continue;
        }
        for (const auto &name : names_of(*opt)) {
            options.push_back(name);
            if (int n = values_of(*opt); n > 0) {
                lines.push_back(fmt::format("nvalues[{}]={}", single_quoted(path + " " + name), n));
                if (auto c = completion_of(*opt); !c.empty())
                    lines.push_back(fmt::format(
                        "completion[{}]={}", single_quoted(path + " " + name), single_quoted(c)));
            }
        }
    }
    if (!commands.empty())
        lines.push_back(fmt::format("subcommands[{}]={}", single_quoted(path),
                                    single_quoted(joined(commands))));
    if (!options.empty())
        lines.push_back(
            fmt::format("options[{}]={}", single_quoted(path), single_quoted(joined(options))));
    for (const CLI::App *sub : subcommands_of(app))
        completion_tables(*sub, lines);
}

void write_completion(const CLI::App &app, std::istream &tmpl, std::ostream &out) {
    bool done = false;
    for (std::string line; std::getline(tmpl, line);) {
        auto at = line.find("# @tables");
        if (at == std::string::npos || line.find_first_not_of(' ') != at) {
            out << line << "\n";
            continue;
        }
        std::vector<std::string> lines;
        completion_tables(app, lines);
        for (const auto &l : lines)
            out << line.substr(0, at) << l << "\n";
        done = true;
    }
    if (!done)
        throw std::runtime_error("no '# @tables' line");
}

} // namespace

} // namespace tricolor::cli::gen

int main(int argc, char **argv) {
    using namespace tricolor::cli;
    if (argc != 4 || (std::string(argv[1]) != "completion" && std::string(argv[1]) != "man")) {
        std::cerr << "usage: tricolorctl-gen completion|man TEMPLATE OUT\n";
        return 2;
    }
    Context ctx;
    const Command *chosen = nullptr;
    auto app = make_app(ctx, chosen);
    std::ifstream tmpl(argv[2]);
    if (!tmpl) {
        std::cerr << "tricolorctl-gen: cannot read " << argv[2] << "\n";
        return 1;
    }
    std::ostringstream out;
    try {
        if (std::string(argv[1]) == "completion")
            gen::write_completion(*app, tmpl, out);
        else
            gen::write_man(*app, tmpl, out);
    } catch (const std::exception &e) {
        std::cerr << "tricolorctl-gen: " << argv[2] << ": " << e.what() << "\n";
        return 1;
    }
    std::ofstream file(argv[3]);
    file << out.str();
    if (!file.flush()) {
        std::cerr << "tricolorctl-gen: cannot write " << argv[3] << "\n";
        return 1;
    }
    return 0;
}
