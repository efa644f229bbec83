// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// control.cpp: the client side of the control protocol.
#include "tricolor/control.hpp"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
    if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0)
        return fail("cannot reach tricolord at");
    std::string line = request.dump() + "\n";
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

} // namespace tricolor
