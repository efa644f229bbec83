// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// context.cpp: one request to tricolord and its answer. A daemon that finds the request's values
// bad (not one that refuses a good change) answers "usage": exit 2, as for a bad flag.
#include "context.hpp"

#include "tricolor/control.hpp"

#include <cstdlib>
#include <iostream>

namespace tricolor::cli {

using nlohmann::json;

std::string Context::socket_path() const {
    if (!socket.empty())
        return socket;
    if (const char *env = std::getenv("TRICOLOR_SOCKET"); env && *env)
        return env;
    return kDefaultSocket;
}

std::optional<json> Context::call(json req, int &exit_code) const {
    auto res = control_request(socket_path(), req);
    if (!res) {
        fail(res.error());
        exit_code = kExitRefused;
        return std::nullopt;
    }
    if (!res->value("ok", false)) {
        fail(res->value("error", std::string("refused")));
        exit_code = res->value("usage", false) ? kExitUsage : kExitRefused;
        return std::nullopt;
    }
    res->erase("ok");
    if (res->contains("warnings") && !as_json)
        for (const auto &w : (*res)["warnings"])
            std::cerr << "warning: " << w.get<std::string>() << "\n";
    if (res->contains("warning") && !as_json)
        std::cerr << "warning: " << (*res)["warning"].get<std::string>() << "\n";
    exit_code = kExitOk;
    return *res;
}

bool Context::json_reply(const nlohmann::json &reply) const {
    if (as_json)
        std::cout << reply.dump() << std::endl; // flushed: --watch prints one a second
    return as_json;
}

void Context::fail(const std::string &message) const {
    if (as_json)
        std::cerr << json{{"error", message}}.dump() << "\n";
    else
        std::cerr << "tricolorctl: " << message << "\n";
}

} // namespace tricolor::cli
