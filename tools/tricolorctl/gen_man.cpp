// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// gen_man.cpp: tricolorctl.8 from its template (docs/man/tricolorctl.8.in), which holds the prose.
// Two kinds of line in it become entries made from the tables:
//   .\" @command NAME   the command's synopsis and its line of help; the lines after the marker
//                       (up to the next marker or .SH) are its paragraph, and a list of its own
//                       options follows them
//   .\" @option --NAME  one of tricolorctl's global options, or an option of the policy flag
//                       table; the lines after it are its paragraph (a policy option's then
//                       names the commands that take it)
// A command or option without a marker gets its entry at the end of the section that holds the
// others of its kind, so the page leaves none out; the tests ask for every option's marker
// (tests/cli/cli_docs_test.cpp), a command's is optional prose. A marker that names nothing, or
// a name marked twice, is an error.
#include "commands.hpp"
#include "gen.hpp"
#include "value_doc.hpp"

#include "tricolor/policy_fields.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <istream>
#include <map>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string_view>

namespace tricolor::cli::gen {

namespace {

// @text for a roff text line: backslashes as \e, and the dashes of an option (or a dash that
// stands alone) as \- so that they print as minus signs.
std::string roff(std::string_view text) {
    std::string out;
    char prev = ' ';
    bool option = false; // in a word that starts with a dash
    for (char c : text) {
        if (std::isspace(static_cast<unsigned char>(prev)))
            option = c == '-';
        if (c == '\\')
            out += "\\e";
        else if (c == '-' && (option || !std::isalnum(static_cast<unsigned char>(prev))))
            out += "\\-";
        else
            out += c;
        prev = c;
    }
    return out;
}

// A whole text line: one that starts with . or ' would be a request.
std::string text_line(std::string line) {
    if (!line.empty() && (line[0] == '.' || line[0] == '\''))
        line = "\\&" + line;
    return line;
}

std::string font(char f, std::string_view text) {
    return std::string("\\f") + f + roff(text) + "\\fR";
}

std::string joined(const std::vector<std::string> &parts, std::string_view sep) {
    std::string out;
    for (const auto &p : parts)
        out += (out.empty() ? "" : std::string(sep)) + p;
    return out;
}

// A help line as a sentence.
std::string sentence(std::string_view help) {
    std::string s = roff(help);
    if (!s.empty() && s.back() != '.')
        s += '.';
    return s;
}

// RATE, srtcm|trtcm|rfc4115, or a positional's name.
std::string value_text(const CLI::Option &opt) {
    if (!opt.nonpositional())
        return font('I', opt.get_name(true));
    const ValueDoc *doc = value_doc(&opt);
    if (doc && !doc->name.empty())
        return font('I', doc->name);
    if (doc && !doc->words.empty()) {
        std::vector<std::string> words;
        for (const auto &w : doc->words)
            words.push_back(font('B', w));
        return joined(words, "|");
    }
    return font('I', "VALUE");
}

// "--hook xdp|tc"; with @all its every name: "-f, --file FILE".
std::string option_text(const CLI::Option &opt, bool all) {
    if (!opt.nonpositional())
        return value_text(opt);
    auto names = names_of(opt);
    std::string out;
    if (all) {
        std::vector<std::string> bold;
        for (const auto &n : names)
            bold.push_back(font('B', n));
        out = joined(bold, ", ");
    } else {
        out = font('B', names.front());
    }
    if (values_of(opt) > 0)
        out += " " + value_text(opt);
    return out;
}

// The long names of @opts, sorted (CLI11 keeps them in a set of pointers).
std::vector<std::string> long_names(const std::set<CLI::Option *> &opts, bool policy) {
    std::vector<std::string> names;
    for (const CLI::Option *o : opts)
        if (is_policy_option(*o) == policy)
            names.push_back(names_of(*o).back());
    std::ranges::sort(names);
    return names;
}

std::string synopsis(const CLI::App &cmd) {
    std::string s = font('B', path_of(cmd));
    auto opts = options_of(cmd);
    for (const CLI::Option *o : opts)
        if (!o->nonpositional())
            s += o->get_required() ? " " + value_text(*o) : " [" + value_text(*o) + "]";
    bool policy = false;
    for (const CLI::Option *o : opts) {
        if (!o->nonpositional())
            continue;
        bool from_table = is_policy_option(*o);
        policy = policy || from_table;
        if (o->get_required())
            s += " " + option_text(*o, false);
        else if (!from_table)
            s += " [" + option_text(*o, false) + "]";
    }
    if (policy)
        s += " [\\fIpolicy options\\fR]";
    return s;
}

// The list under a command's paragraph: its arguments and its options apart from the policy
// options (which have their own section).
std::vector<std::string> option_list(const CLI::App &cmd) {
    std::vector<std::string> lines;
    for (const CLI::Option *o : options_of(cmd)) {
        if (is_policy_option(*o))
            continue;
        std::string text = sentence(o->get_description());
        if (!o->get_default_str().empty())
            text += " Default: " + font('B', o->get_default_str()) + ".";
        std::vector<std::string> needs;
        for (const auto &n : long_names(o->get_needs(), false))
            needs.push_back(font('B', n));
        if (!needs.empty())
            text += " Only with " + joined(needs, ", ") + ".";
        std::vector<std::string> excludes;
        for (const auto &n : long_names(o->get_excludes(), false))
            excludes.push_back(font('B', n));
        if (!long_names(o->get_excludes(), true).empty())
            excludes.push_back("the policy options");
        if (!excludes.empty())
            text += " Not with " + joined(excludes, ", ") + ".";
        lines.insert(lines.end(), {".TP", option_text(*o, true), text_line(text)});
    }
    if (lines.empty())
        return lines;
    lines.insert(lines.begin(), ".RS");
    lines.push_back(".RE");
    return lines;
}

const CLI::App *command_at(const CLI::App &app, std::string_view path) {
    const CLI::App *at = &app;
    for (auto space = path.find(' ');; space = path.find(' ')) {
        at = at->get_subcommand(std::string(path.substr(0, space)));
        if (space == path.npos)
            return at;
        path.remove_prefix(space + 1);
    }
}

enum Kind : uint8_t { kCommand, kGlobal, kPolicy, kKinds };

struct Entry {
    Kind kind;
    std::vector<std::string> head;   // where the marker stands
    std::vector<std::string> tail{}; // after the paragraph
};

// Every entry the tables make, by the name its marker gives; @order: each kind's in the tables'
// order.
std::map<std::string, Entry> entries(const CLI::App &app,
                                     std::array<std::vector<std::string>, kKinds> &order) {
    std::map<std::string, Entry> out;
    auto add = [&](const std::string &key, Entry e) {
        order[e.kind].push_back(key);
        out.emplace(key, std::move(e));
    };
    std::vector<const CLI::App *> leaves;
    for (const Command &c : commands()) {
        if (!c.run)
            continue;
        const CLI::App *cmd = command_at(app, c.name);
        leaves.push_back(cmd);
        add(std::string(c.name),
            {kCommand, {".TP", synopsis(*cmd), text_line(sentence(c.help))}, option_list(*cmd)});
    }
    for (const CLI::Option *o : options_of(app))
        add(names_of(*o).back(),
            {kGlobal, {".TP", option_text(*o, true), text_line(sentence(o->get_description()))}});
    for (const PolicyFlag &row : policy_flags()) {
        if (row.kind == PolicyFlagKind::Name)
            continue;
        std::string name = policy_flag_option(row);
        const CLI::Option *first = nullptr;
        std::vector<std::string> takers;
        for (const CLI::App *cmd : leaves)
            if (const CLI::Option *o = cmd->get_option_no_throw(name)) {
                first = first ? first : o;
                takers.push_back(font('B', path_of(*cmd)) +
                                 (o->get_required() ? " (required)" : ""));
            }
        if (!first)
            throw std::runtime_error(name + ": in the policy flag table, but no command takes it");
        add(name, {kPolicy,
                   {".TP", option_text(*first, false), text_line(sentence(row.help))},
                   {"Commands: " + joined(takers, ", ") + "."}});
    }
    return out;
}

// The name a marker line gives, or "".
std::string marker(const std::string &line) {
    for (std::string_view prefix : {".\\\" @command ", ".\\\" @option "})
        if (line.starts_with(prefix))
            return line.substr(prefix.size());
    return "";
}

} // namespace

void write_man(const CLI::App &app, std::istream &tmpl, std::ostream &out) {
    std::array<std::vector<std::string>, kKinds> order;
    auto all = entries(app, order);
    std::vector<std::string> lines;
    std::set<std::string> placed;
    for (std::string line; std::getline(tmpl, line);) {
        lines.push_back(line);
        if (auto name = marker(line); !name.empty()) {
            if (!all.contains(name))
                throw std::runtime_error("'" + line + "': no such command or option in the tables");
            if (!placed.insert(name).second)
                throw std::runtime_error("'" + line + "': given twice");
        }
    }

    out << ".\\\" Made by tricolorctl-gen from docs/man/tricolorctl.8.in and tricolorctl's "
           "tables\n";
    std::vector<std::string> tail;
    std::set<Kind> in_section;
    auto emit = [&](const std::vector<std::string> &part) {
        for (const auto &l : part)
            out << l << "\n";
    };
    auto end_section = [&] {
        emit(tail);
        tail.clear();
        for (Kind k : in_section)
            for (const auto &name : order[k])
                if (placed.insert(name).second) {
                    emit(all.at(name).head);
                    emit(all.at(name).tail);
                }
        in_section.clear();
    };
    for (const auto &line : lines) {
        if (auto name = marker(line); !name.empty()) {
            const Entry &e = all.at(name);
            emit(tail);
            emit(e.head);
            tail = e.tail;
            in_section.insert(e.kind);
            continue;
        }
        if (line.starts_with(".SH"))
            end_section();
        out << line << "\n";
    }
    end_section();
}

} // namespace tricolor::cli::gen
