// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// control_socket.cpp: tricolord's control socket: listening, who a client is (SO_PEERCRED and
// CAP_NET_ADMIN), and one request a connection, each client on a thread of its own.
#include "tricolord.hpp"

#include "tricolor/control.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace tricolor::tricolord {

namespace {

sockaddr_un socket_address(const std::string &path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path))
        throw std::runtime_error(fmt::format("socket path '{}' is too long", path));
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    return addr;
}

// A socket file that no daemon answers is stale; one that answers belongs to a live daemon.
bool answers(const sockaddr_un &addr) {
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = connect(probe, reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0;
    close(probe);
    return live;
}

// Whether process pid, which the kernel says connected as uid, holds CAP_NET_ADMIN. Its
// capabilities are read from /proc, and believed only while that process still has the
// effective uid the kernel gave: a pid reused by another user's process lends nothing.
bool has_net_admin(pid_t pid, uid_t uid) {
    constexpr int kCapNetAdmin = 12; // linux/capability.h
    std::ifstream f(fmt::format("/proc/{}/status", pid));
    std::string line;
    bool same_uid = false;
    uint64_t effective = 0;
    while (std::getline(f, line)) {
        unsigned long real = 0, euid = 0;
        if (std::sscanf(line.c_str(), "Uid: %lu %lu", &real, &euid) == 2)
            same_uid = euid == uid;
        else if (line.starts_with("CapEff:"))
            effective = std::strtoull(line.c_str() + 7, nullptr, 16);
    }
    return same_uid && ((effective >> kCapNetAdmin) & 1);
}

// The request's sender as the kernel saw it at connect (SO_PEERCRED). Unknown: may not change.
Peer peer_of(int client) {
    ucred c{};
    socklen_t len = sizeof(c);
    if (getsockopt(client, SOL_SOCKET, SO_PEERCRED, &c, &len) < 0)
        return Peer{.uid = ~0u, .pid = 0, .may_change = false};
    return Peer{
        .uid = c.uid, .pid = c.pid, .may_change = c.uid == 0 || has_net_admin(c.pid, c.uid)};
}

// One request a connection: read a line (bounded in size and time), answer a line.
void serve_one(int client, Daemon &d) {
    timeval tv{2, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    std::string line;
    char buf[4096];
    while (line.find('\n') == std::string::npos && line.size() < (16u << 20)) {
        ssize_t n = read(client, buf, sizeof(buf));
        if (n <= 0)
            break;
        line.append(buf, static_cast<size_t>(n));
    }
    nlohmann::json reply;
    if (line.size() >= (16u << 20)) {
        reply = {{"ok", false}, {"error", "request larger than 16 MiB"}};
    } else {
        auto req = parse_control_request(std::string_view(line).substr(0, line.find('\n')));
        reply = req ? d.handle(*req, peer_of(client))
                    : nlohmann::json{{"ok", false}, {"error", req.error()}};
    }
    std::string out = reply.dump() + "\n";
    for (size_t off = 0; off < out.size();) {
        ssize_t n = write(client, out.data() + off, out.size() - off);
        if (n <= 0)
            break;
        off += static_cast<size_t>(n);
    }
}

} // namespace

gid_t socket_group_id(const std::string &name) {
    if (name.empty())
        return static_cast<gid_t>(-1);
    group g{}, *found = nullptr;
    std::vector<char> buf(16384);
    if (getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found) != 0 || !found)
        throw std::runtime_error(
            fmt::format("--socket-group '{}': no such group (getent group lists them)", name));
    return g.gr_gid;
}

void probe_socket(const std::string &path) {
    sockaddr_un addr = socket_address(path);
    struct stat st {};
    if (lstat(path.c_str(), &st) < 0)
        return;
    if (!S_ISSOCK(st.st_mode))
        throw std::runtime_error(fmt::format(
            "{} exists and is not a socket: remove it or choose another --socket", path));
    if (answers(addr))
        throw std::runtime_error(fmt::format("another tricolord answers on {}", path));
}

int listen_on(const std::string &path, gid_t gid) {
    namespace fs = std::filesystem;
    sockaddr_un addr = socket_address(path);
    std::error_code ec;
    if (fs::path(path).has_parent_path())
        fs::create_directories(fs::path(path).parent_path(), ec);
    if (fs::exists(path)) {
        if (answers(addr))
            throw std::runtime_error(fmt::format("another tricolord answers on {}", path));
        unlink(path.c_str());
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    mode_t old = umask(0177); // the socket is created 0600: root's only
    int rc = bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr));
    umask(old);
    if (rc < 0 || listen(fd, 16) < 0)
        throw std::runtime_error(
            fmt::format("cannot listen on {}: {}", path, std::strerror(errno)));
    // Group ownership first, then the group's bits: there is never a moment when the socket
    // is open to a group other than the one asked for. The owner stays the daemon's user (root,
    // or the user of its own it runs as under systemd, which may give a socket to a group it is
    // a member of: Group= in a drop-in, docs/daemon.md).
    auto refuse = [&](const char *what) {
        int err = errno;
        close(fd);
        unlink(path.c_str());
        throw std::runtime_error(fmt::format(
            "cannot {} {}: {}{}", what, path, std::strerror(err),
            err == EPERM && geteuid() != 0
                ? fmt::format(" (tricolord runs as uid {}: it must be a member of the group, "
                              "e.g. Group= in its unit: docs/daemon.md, \"Least privilege\")",
                              geteuid())
                : ""));
    };
    if (gid != static_cast<gid_t>(-1) && chown(path.c_str(), static_cast<uid_t>(-1), gid) < 0)
        refuse(fmt::format("give to group {}", gid).c_str());
    if (chmod(path.c_str(), gid != static_cast<gid_t>(-1) ? 0660 : 0600) < 0)
        refuse("set the mode of");
    return fd;
}

void ClientPool::serve(int client, Daemon &d) {
    {
        std::lock_guard lock(mu_);
        if (active_ >= kMaxClients) {
            static const char busy[] =
                "{\"ok\":false,\"error\":\"tricolord is serving 256 clients: try again\"}\n";
            (void)!write(client, busy, sizeof(busy) - 1);
            close(client);
            return;
        }
        ++active_;
    }
    std::thread([this, client, &d] {
        serve_one(client, d);
        close(client);
        std::lock_guard lock(mu_);
        if (--active_ == 0)
            idle_.notify_all();
    }).detach();
}

void ClientPool::drain() {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [this] { return active_ == 0; });
}

} // namespace tricolor::tricolord
