// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolorctl: the command-line tool. Exit codes (docs/spec.md §7): 0 done, 1 refused, 2 bad usage.
#include "daemon_cmds.hpp"
#include "replay_cmd.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

int main(int argc, char **argv) {
    CLI::App app{"tricolor: exact three-colour traffic policing on eBPF", "tricolorctl"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Show help for every command");
    app.set_version_flag("--version", "tricolorctl " TRICOLOR_VERSION);

    tricolor::cli::GlobalOptions global;
    app.add_flag("-j,--json", global.json, "JSON output (errors as {\"error\": ...})");
    app.add_option("--socket", global.socket,
                   "tricolord's control socket (default $TRICOLOR_SOCKET, then "
                   "/run/tricolor/tricolor.sock)");
    auto run_daemon_command = tricolor::cli::add_daemon_commands(app, global);
    tricolor::cli::ReplayOptions replay;
    tricolor::cli::add_replay_command(app, replay);

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion &e) {
        return app.exit(e);
    } catch (const CLI::ParseError &e) {
        // -j may not have been parsed when the error struck: look for it among the words.
        bool json = global.json;
        for (int i = 1; i < argc && !json; ++i)
            json = std::string_view(argv[i]) == "-j" || std::string_view(argv[i]) == "--json";
        if (json) {
            std::cerr << nlohmann::json{{"error", e.what()}}.dump() << "\n";
            return tricolor::cli::kExitUsage;
        }
        app.exit(e);
        return tricolor::cli::kExitUsage;
    }
    try {
        if (app.got_subcommand("replay"))
            return tricolor::cli::run_replay_command(replay);
        if (int rc = run_daemon_command(); rc >= 0)
            return rc;
    } catch (const std::exception &e) {
        std::cerr << "tricolorctl: " << e.what() << "\n";
        return tricolor::cli::kExitRefused;
    }
    return tricolor::cli::kExitUsage;
}
