// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// policy_flags.cpp: a row of policy_flags() is an option, and what was given for it a field.
#include "policy_flags.hpp"
#include "value_doc.hpp"

namespace tricolor::cli {

using nlohmann::json;

namespace {

// Whether @row makes an option of the command @use is for.
bool takes(const PolicyFlag &row, PolicyFlagsFor use) {
    bool way_back = row.kind == PolicyFlagKind::Off || row.kind == PolicyFlagKind::Clear;
    switch (use) {
    case PolicyFlagsFor::add:
        return !way_back;
    case PolicyFlagsFor::set:
        return true;
    case PolicyFlagsFor::replay:
        return row.meter && !way_back;
    }
    return false;
}

} // namespace

std::vector<CLI::Option *> add_policy_flags(CLI::App &cmd, PolicyFlags &f, PolicyFlagsFor use) {
    std::vector<CLI::Option *> added;
    const auto &rows = policy_flags();
    for (size_t i = 0; i < rows.size(); ++i) {
        const PolicyFlag &row = rows[i];
        if (!takes(row, use))
            continue;
        PolicyFlags::Given &g = f.given[i];
        std::string option = policy_flag_option(row), help(row.help);
        CLI::Option *opt = nullptr;
        switch (row.kind) {
        case PolicyFlagKind::Name:
            opt = cmd.add_option(option, f.name, help)->required();
            break;
        case PolicyFlagKind::Text:
            opt = cmd.add_option(option, g.text, help);
            break;
        case PolicyFlagKind::Match:
            opt = cmd.add_option(option, g.match, help);
            break;
        case PolicyFlagKind::On:
        case PolicyFlagKind::Off:
        case PolicyFlagKind::Clear:
            opt = cmd.add_flag(option, g.set, help);
            break;
        }
        if (!row.choices.empty())
            one_of(opt, row.choices);
        else if (!row.suggest.empty())
            describe(opt, {.name = std::string(row.value),
                           .complete = Complete::words,
                           .words = row.suggest});
        else if (row.value == "NAME" ||
                 (row.kind == PolicyFlagKind::Name && use != PolicyFlagsFor::add))
            // A policy's name (add's NAME is a new one).
            describe(opt, {.name = std::string(row.value), .complete = Complete::policies});
        else if (!row.value.empty())
            describe(opt, {.name = std::string(row.value)});
        if (use == PolicyFlagsFor::add && row.required_on_add)
            opt->required();
        added.push_back(opt);
    }
    return added;
}

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

} // namespace tricolor::cli
