// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolorctl's usage errors, and its docs against its tables: the bash completion and the man
// page the build generates (tools/tricolorctl/gen.cpp) offer every command and option of the
// command line tricolorctl builds from its command table and the policy flag table, and the man
// page's hand-written template (docs/man/tricolorctl.8.in) gives each of them its place.
#include "commands.hpp"
#include "test_util.hpp"
#include "tricolor/policy_fields.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>

using namespace tricolor;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const std::string kCtl = TRICOLORCTL_PATH;
const std::string kCompletion = std::string(TRICOLOR_BINARY_DIR) + "/completion/tricolorctl.bash";
const std::string kManPage = std::string(TRICOLOR_BINARY_DIR) + "/man/tricolorctl.8";
const std::string kManTemplate = std::string(TRICOLOR_SOURCE_DIR) + "/docs/man/tricolorctl.8.in";

// What the completion offers for the words of @line (the last one is the one completed).
std::string complete(const std::string &line) {
    return test::run_command({"/bin/bash", "-c",
                              "source " + kCompletion + "; COMP_WORDS=(" + line +
                                  "); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _tricolorctl; echo "
                                  "\"${COMPREPLY[*]}\""})
        .out;
}

std::vector<std::string> words(const std::string &text) {
    std::istringstream in(text);
    std::vector<std::string> out;
    for (std::string w; in >> w;)
        out.push_back(w);
    return out;
}

// -f --file; a positional has none.
std::vector<std::string> option_names(const CLI::Option &opt) {
    std::vector<std::string> names;
    for (const auto &s : opt.get_snames())
        names.push_back("-" + s);
    for (const auto &l : opt.get_lnames())
        names.push_back("--" + l);
    return names;
}

// The name as roff writes it: each dash as \-.
std::string roff(const std::string &name) {
    std::string out;
    for (char c : name)
        out += c == '-' ? std::string("\\-") : std::string(1, c);
    return out;
}

// tricolorctl's command line, as tricolorctl builds it.
struct App {
    cli::Context ctx;
    const cli::Command *chosen = nullptr;
    std::unique_ptr<CLI::App> app = cli::make_app(ctx, chosen);
};

// Every command under @app with the words that name it ("policy add"), @app itself first ("").
void walk(const CLI::App &app, const std::string &path,
          std::vector<std::pair<std::string, const CLI::App *>> &out) {
    out.emplace_back(path, &app);
    for (const CLI::App *sub : app.get_subcommands([](const CLI::App *) { return true; }))
        walk(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
}

// The options a user gives @app (a command's own --help and --help-all left out).
std::vector<const CLI::Option *> given_options(const CLI::App &app) {
    return app.get_options([&](const CLI::Option *o) {
        return o->nonpositional() &&
               (!app.get_parent() || (o != app.get_help_ptr() && o != app.get_help_all_ptr()));
    });
}

TEST(Completion, CompletesCommandsFlagsAndValues) {
    std::string algos; // the table of algorithms' names, in its order
    for (const AlgoInfo &a : algorithms())
        algos += std::string(algos.empty() ? "" : " ") + std::string(a.name);
    ASSERT_THAT(algos, HasSubstr("srtcm trtcm rfc4115"));
    EXPECT_THAT(complete("tricolorctl ''"), HasSubstr("attach detach policy apply stats"));
    EXPECT_EQ(complete("tricolorctl policy s"), "set show\n");
    EXPECT_EQ(complete("tricolorctl policy add x --algo ''"), algos + "\n");
    EXPECT_THAT(complete("tricolorctl attach ''"), HasSubstr("lo"));
    // A global option's value is not taken for the command.
    EXPECT_EQ(complete("tricolorctl --socket /tmp/x.sock policy s"), "set show\n");
    EXPECT_THAT(complete("tricolorctl --socket /tmp/x.sock ''"), HasSubstr("attach detach policy"));
    EXPECT_EQ(complete("tricolorctl -j --socket /tmp/x.sock stats --"),
              "--watch --interval --count\n");
    EXPECT_EQ(complete("tricolorctl policy add x --match proto udp --algo ''"), algos + "\n");
    // Every option of the policy flag table, --no-* included.
    std::string set = " " + complete("tricolorctl policy set x --");
    std::ranges::replace(set, '\n', ' ');
    for (const auto &flag : policy_flags())
        if (flag.kind != PolicyFlagKind::Name) {
            EXPECT_THAT(set, HasSubstr(" " + policy_flag_option(flag) + " "));
        }
}

// The generated completion offers each command's commands and each of its options, and an
// option's choices as its value.
TEST(Completion, OffersEveryCommandAndOptionOfTheTables) {
    App a;
    std::vector<std::pair<std::string, const CLI::App *>> all;
    walk(*a.app, "", all);
    ASSERT_GE(all.size(), 14u); // the top, 8 commands, policy's 5
    for (const auto &[path, app] : all) {
        SCOPED_TRACE(path);
        std::string line = "tricolorctl " + (path.empty() ? "" : path + " ");
        std::vector<std::string> commands, options;
        for (const CLI::App *sub : app->get_subcommands([](const CLI::App *) { return true; }))
            commands.push_back(sub->get_name());
        for (const CLI::Option *o : given_options(*app))
            for (const auto &name : option_names(*o))
                options.push_back(name);
        if (!commands.empty()) {
            EXPECT_THAT(words(complete(line + "''")), ::testing::IsSupersetOf(commands));
        }
        EXPECT_THAT(words(complete(line + "-")), ::testing::UnorderedElementsAreArray(options));
    }
    EXPECT_EQ(complete("tricolorctl attach lo --xdp-mode ''"), "native generic auto\n");
    EXPECT_EQ(complete("tricolorctl replay --start ''"), "full empty\n");
    EXPECT_EQ(complete("tricolorctl replay --engine ''"), "model bpf\n");
}

// Usage errors exit 2, and under -j they are JSON on stderr, CLI11's own included.
TEST(UsageErrors, ExitTwoAndAreJsonUnderJ) {
    struct Case {
        std::vector<std::string> args;
        const char *message;
    };
    const std::vector<Case> cases = {
        {{"-j", "policy", "add", "p", "--cir", "1mbit", "--cbs", "1k"}, "--algo is required"},
        {{"-j", "flows", "--top", "-1"}, "--top"},
        {{"-j", "stats", "--watch", "--count", "-1"}, "--count"},
        {{"-j", "stats", "--count", "3"}, "--count requires --watch"},
        {{"-j", "policy", "add", "p", "--algo", "srtcm", "--cir", "10mbits", "--cbs", "1k"},
         "invalid rate '10mbits'"},
        {{"-j", "policy", "add", "p", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "1k", "--match",
          "src", "198.18.0.1/15"},
         "198.18.0.1/15"},
        {{"-j", "apply", "-f", "/tmp"}, "/tmp is a directory"},
        {{"-j", "attach", "lo", "--direction", "egress"}, "XDP only sees ingress"},
    };
    for (const auto &c : cases) {
        std::vector<std::string> argv = {kCtl, "--socket", "/nonexistent/tricolor.sock"};
        argv.insert(argv.end(), c.args.begin(), c.args.end());
        auto r = test::run_command(argv);
        SCOPED_TRACE(c.message);
        EXPECT_EQ(r.exit_code, 2) << r.err;
        auto j = nlohmann::json::parse(r.err, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << r.err;
        EXPECT_THAT(j["error"].get<std::string>(), HasSubstr(c.message));
    }
}

TEST(ManPages, HaveTheirSections) {
    for (const char *page : {"tricolorctl.8", "tricolord.8"}) {
        SCOPED_TRACE(page);
        std::string text = test::read_file(std::string(TRICOLOR_BINARY_DIR) + "/man/" + page);
        EXPECT_THAT(text, HasSubstr(".TH"));
        EXPECT_THAT(text, HasSubstr(TRICOLOR_VERSION));
    }
    std::string ctl = test::read_file(kManPage);
    for (const char *section : {".SH \"GLOBAL OPTIONS\"", ".SH COMMANDS", ".SH \"POLICY OPTIONS\"",
                                ".SH UNITS", ".SH \"EXIT STATUS\"", ".SH EXAMPLES"})
        EXPECT_THAT(ctl, HasSubstr(section));
    EXPECT_THAT(ctl, Not(HasSubstr("Positionals:")));
    EXPECT_THAT(ctl, Not(HasSubstr(".\\\" @"))) << "a marker the generator left";
    std::string d = test::read_file(std::string(TRICOLOR_BINARY_DIR) + "/man/tricolord.8");
    for (const char *section : {".SH SIGNALS", ".SH FILES", ".SH \"EXIT STATUS\"", "\\-\\-state"})
        EXPECT_THAT(d, HasSubstr(section));
}

// The generated page has an entry for every command (its synopsis starts with the command in
// bold) and names every option of every command.
TEST(ManPages, NameEveryCommandAndOptionOfTheTables) {
    std::string page = test::read_file(kManPage);
    App a;
    std::vector<std::pair<std::string, const CLI::App *>> all;
    walk(*a.app, "", all);
    for (const auto &[path, app] : all) {
        SCOPED_TRACE(path);
        if (!path.empty() && app->get_subcommands([](const CLI::App *) { return true; }).empty()) {
            EXPECT_NE(page.find("\n\\fB" + path + "\\fR"), page.npos) << "no entry for " << path;
        }
        for (const CLI::Option *o : given_options(*app))
            for (const auto &name : option_names(*o))
                EXPECT_NE(page.find("\\fB" + roff(name) + "\\fR"), page.npos) << name;
    }
}

// Every global option and policy option has its marker in the template, the place its entry and
// paragraph take in the page (the generator would put an unmarked one at its section's end,
// where no paragraph explains it). A command needs none: its entry is its synopsis, its line of
// help and its options, all from the table and its own file (a marker adds a paragraph of prose
// and a place), so a new command is its file, its row and its test (docs/hacking.md).
TEST(ManPages, TheTemplatePlacesEveryGlobalAndPolicyOption) {
    std::string tmpl = test::read_file(kManTemplate);
    auto marked = [&](const std::string &marker) {
        return tmpl.find("\n" + marker + "\n") != std::string::npos;
    };
    App a;
    for (const CLI::Option *o : given_options(*a.app))
        EXPECT_TRUE(marked(".\\\" @option " + option_names(*o).back())) << option_names(*o).back();
    for (const auto &flag : policy_flags())
        if (flag.kind != PolicyFlagKind::Name) {
            EXPECT_TRUE(marked(".\\\" @option " + policy_flag_option(flag)))
                << policy_flag_option(flag);
        }
}

TEST(ManPages, RenderWithoutWarnings) {
    if (!std::filesystem::exists("/usr/bin/man"))
        GTEST_SKIP() << "no man here";
    for (const char *page : {"tricolorctl.8", "tricolord.8"}) {
        SCOPED_TRACE(page);
        auto r = test::run_command({"/usr/bin/man", "-l", "--warnings",
                                    std::string(TRICOLOR_BINARY_DIR) + "/man/" + page});
        EXPECT_EQ(r.exit_code, 0);
        EXPECT_EQ(r.err, "");
        EXPECT_THAT(r.out, HasSubstr("tricolor"));
    }
}

} // namespace
