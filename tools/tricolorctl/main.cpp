// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolorctl: the command-line tool, the commands of the table in commands.cpp. Exit codes
// (docs/spec.md §7): 0 done, 1 refused, 2 bad usage.
#include "commands.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <exception>
#include <iostream>
#include <string_view>

int main(int argc, char **argv) {
    using namespace tricolor::cli;
    Context ctx;
    const Command *chosen = nullptr;
    auto app = make_app(ctx, chosen);

    try {
        app->parse(argc, argv);
    } catch (const CLI::CallForHelp &e) {
        return app->exit(e);
    } catch (const CLI::CallForAllHelp &e) {
        return app->exit(e);
    } catch (const CLI::CallForVersion &e) {
        return app->exit(e);
    } catch (const CLI::ParseError &e) {
        // -j may not have been parsed when the error struck: look for it among the words.
        bool json = ctx.as_json;
        for (int i = 1; i < argc && !json; ++i)
            json = std::string_view(argv[i]) == "-j" || std::string_view(argv[i]) == "--json";
        if (json) {
            std::cerr << nlohmann::json{{"error", e.what()}}.dump() << "\n";
            return kExitUsage;
        }
        app->exit(e);
        return kExitUsage;
    }
    if (!chosen)
        return kExitUsage;
    try {
        return chosen->run(ctx);
    } catch (const std::exception &e) {
        std::cerr << "tricolorctl: " << e.what() << "\n";
        return kExitRefused;
    }
}
