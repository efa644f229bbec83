// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// commands.cpp: every tricolorctl command, one row each. A new command is a file NAME_cmd.cpp
// defining its add_/run_ pair (the build takes every *_cmd.cpp) and a row here; its man page
// entry and its completion come from both (a marker line in docs/man/tricolorctl.8.in gives
// the entry a place and a paragraph of prose).
#include "commands.hpp"
#include "value_doc.hpp"

namespace tricolor::cli {

// Each command's pair, defined in its own file.
void add_attach(CLI::App &cmd); // attach_cmd.cpp
int run_attach(Context &ctx);
void add_detach(CLI::App &cmd);
int run_detach(Context &ctx);
void add_policy_add(CLI::App &cmd); // policy_cmd.cpp
int run_policy_add(Context &ctx);
void add_policy_set(CLI::App &cmd);
int run_policy_set(Context &ctx);
void add_policy_del(CLI::App &cmd);
int run_policy_del(Context &ctx);
void add_policy_list(CLI::App &cmd);
int run_policy_list(Context &ctx);
void add_policy_show(CLI::App &cmd);
int run_policy_show(Context &ctx);
void add_apply(CLI::App &cmd); // apply_cmd.cpp
int run_apply(Context &ctx);
void add_stats(CLI::App &cmd); // stats_cmd.cpp
int run_stats(Context &ctx);
void add_flows(CLI::App &cmd); // flows_cmd.cpp
int run_flows(Context &ctx);
void add_status(CLI::App &cmd); // status_cmd.cpp
int run_status(Context &ctx);
void add_replay(CLI::App &cmd); // replay_cmd.cpp
int run_replay(Context &ctx);
void add_whatif(CLI::App &cmd); // whatif_cmd.cpp
int run_whatif(Context &ctx);

namespace {

const Command kCommands[] = {
    {"attach", "Attach the data path to an interface", add_attach, run_attach},
    {"detach", "Take the data path off an interface", add_detach, run_detach},
    {"policy", "Add, change, delete and show policies", nullptr, nullptr},
    {"policy add",
     "Add a policy; --parent NAME also meters it in NAME's buckets (chains of up to 4 levels, all "
     "or nothing), --only-parent, --coupling, --start full|empty",
     add_policy_add, run_policy_add},
    {"policy set", "Change a live policy (flows keep their tokens)", add_policy_set,
     run_policy_set},
    {"policy del", "Delete a policy", add_policy_del, run_policy_del},
    {"policy list", "List the policies", add_policy_list, run_policy_list},
    {"policy show", "Show one policy", add_policy_show, run_policy_show},
    {"apply", "Replace the whole policy set from a file, all or nothing", add_apply, run_apply},
    {"stats", "Packets and bytes per colour per policy", add_stats, run_stats},
    {"flows", "The busiest flows with their colour counters", add_flows, run_flows},
    {"status", "Attachments, programs and map fill levels", add_status, run_status},
    {"replay", "Meter a packet trace offline (no daemon needed)", add_replay, run_replay},
    {"whatif", "Run a capture (pcap, pcapng) through policies: colours, plot, a suggested CBS/CIR",
     add_whatif, run_whatif},
};

} // namespace

std::span<const Command> commands() {
    return kCommands;
}

std::unique_ptr<CLI::App> make_app(Context &ctx, const Command *&chosen) {
    auto app = std::make_unique<CLI::App>("tricolor: exact three-colour traffic policing on eBPF",
                                          "tricolorctl");
    app->require_subcommand(1);
    app->set_help_all_flag("--help-all", "Show help for every command");
    app->set_version_flag("--version", "tricolorctl " TRICOLOR_VERSION);
    app->add_flag("-j,--json", ctx.as_json, "JSON output (errors as {\"error\": ...})");
    describe(app->add_option("--socket", ctx.socket,
                             "tricolord's control socket (default $TRICOLOR_SOCKET, then "
                             "/run/tricolor/tricolor.sock)"),
             {.name = "PATH", .complete = Complete::files});
    for (const Command &c : kCommands) {
        // "policy add": add under the group policy, which an earlier row made.
        CLI::App *parent = app.get();
        std::string_view name = c.name;
        for (auto space = name.find(' '); space != name.npos; space = name.find(' ')) {
            parent = parent->get_subcommand(std::string(name.substr(0, space)));
            name.remove_prefix(space + 1);
        }
        CLI::App *cmd = parent->add_subcommand(std::string(name), std::string(c.help));
        if (!c.add) {
            cmd->require_subcommand(1);
            continue;
        }
        c.add(*cmd);
        cmd->callback([&chosen, &c] { chosen = &c; });
    }
    return app;
}

} // namespace tricolor::cli
