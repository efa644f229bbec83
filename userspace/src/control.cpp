// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// control.cpp: the client side of the control protocol.
#include "tricolor/control.hpp"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace tricolor {

Result<nlohmann::json> control_request(const std::string &path, const nlohmann::json &request) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path))
        return std::unexpected(fmt::format("socket path '{}' is too long", path));
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return std::unexpected(fmt::format("socket: {}", std::strerror(errno)));
    auto fail = [&](const std::string &what) {
        int err = errno;
        close(fd);
        return std::unexpected(fmt::format("{} {}: {}", what, path, std::strerror(err)));
    };
    if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0) {
        if (errno == EACCES) {
            close(fd);
            return std::unexpected(fmt::format(
                "cannot reach tricolord at {}: permission denied (the socket is root's, and "
                "its group's when tricolord runs with --socket-group: run as root, or join "
                "that group for the read-only commands)",
                path));
        }
        return fail("cannot reach tricolord at");
    }
    nlohmann::json versioned = request;
    if (versioned.is_object() && !versioned.contains("version"))
        versioned["version"] = kControlProtocolVersion;
    std::string line = versioned.dump() + "\n";
    for (size_t off = 0; off < line.size();) {
        ssize_t n = write(fd, line.data() + off, line.size() - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fail("cannot send to");
        off += static_cast<size_t>(n);
    }
    std::string reply;
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fail("cannot read from");
        if (n == 0)
            break;
        reply.append(buf, static_cast<size_t>(n));
        if (!reply.empty() && reply.back() == '\n')
            break;
    }
    close(fd);
    auto parsed = nlohmann::json::parse(reply, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object())
        return std::unexpected(fmt::format("tricolord at {} answered something that is not a "
                                           "JSON object",
                                           path));
    return parsed;
}

Result<nlohmann::json> parse_control_request(std::string_view line) {
    using nlohmann::json;
    std::vector<std::set<std::string>> open; // names seen in each object being read
    std::string duplicate;
    json::parser_callback_t note = [&](int, json::parse_event_t event, json &parsed) {
        switch (event) {
        case json::parse_event_t::object_start:
            open.emplace_back();
            break;
        case json::parse_event_t::object_end:
            if (!open.empty())
                open.pop_back();
            break;
        case json::parse_event_t::key:
            if (!open.empty() && parsed.is_string() && !open.back().insert(parsed).second &&
                duplicate.empty())
                duplicate = parsed.get<std::string>();
            break;
        default:
            break;
        }
        return true;
    };
    json r = json::parse(line, note, false);
    if (r.is_discarded())
        return std::unexpected("the request is not valid JSON");
    if (!duplicate.empty())
        return std::unexpected(
            fmt::format("the request names \"{}\" twice in one object", duplicate));
    if (!r.is_object())
        return std::unexpected("a request must be a JSON object");
    return r;
}

} // namespace tricolor
