// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolord: loads the data path (adopting what an earlier daemon pinned), applies the config,
// and serves the control socket until SIGTERM. The data path stays attached and policing when
// the daemon exits for any reason, unless --detach-on-exit.
#include "daemon.hpp"

#include "tricolor/control.hpp"
#include "tricolor/replay.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <systemd/sd-daemon.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

using namespace tricolor;

namespace {

void log(const std::string &msg) {
    std::cerr << "tricolord: " << msg << std::endl;
}

// A socket file that no daemon answers is stale; one that answers belongs to a live daemon.
// gid: --socket-group's (the socket is root:gid 0660 then), or -1 (root's alone, 0600).
int listen_on(const std::string &path, gid_t gid) {
    namespace fs = std::filesystem;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path))
        throw std::runtime_error(fmt::format("socket path '{}' is too long", path));
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    std::error_code ec;
    if (fs::path(path).has_parent_path())
        fs::create_directories(fs::path(path).parent_path(), ec);
    if (fs::exists(path)) {
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        bool live = connect(probe, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0;
        close(probe);
        if (live)
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
    // is open to a group other than the one asked for.
    if (gid != static_cast<gid_t>(-1) && chown(path.c_str(), 0, gid) < 0)
        throw std::runtime_error(
            fmt::format("cannot give {} to group {}: {}", path, gid, std::strerror(errno)));
    chmod(path.c_str(), gid != static_cast<gid_t>(-1) ? 0660 : 0600);
    return fd;
}

// --socket-group's gid, or -1 for none; an unknown group refuses the start.
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

// The control socket's clients, each on a thread of its own: a client that connects and sends
// nothing, or sends a megabyte without a newline, holds only its own thread (for the 2 s read
// timeout), never the others. Requests still run one at a time inside Daemon::handle (its
// mutex), so policy changes stay serialized. At most kMaxClients at once; the next is told so.
class ClientPool {
  public:
    static constexpr int kMaxClients = 256;
    void serve(int client, Daemon &d) {
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
    // Waits for the clients being served (each ends within its read and write timeouts).
    void drain() {
        std::unique_lock lock(mu_);
        idle_.wait(lock, [this] { return active_ == 0; });
    }

  private:
    std::mutex mu_;
    std::condition_variable idle_;
    int active_ = 0;
};

class Metrics : public prometheus::Collectable {
  public:
    explicit Metrics(const Daemon &d) : d_(d) {}
    std::vector<prometheus::MetricFamily> Collect() const override {
        auto m = d_.metrics();
        auto f = d_.fleet_metrics();
        m.insert(m.end(), f.begin(), f.end());
        return m;
    }

  private:
    const Daemon &d_;
};

// Whether the metrics endpoint (HOST:PORT as served) is reachable from this machine alone.
bool is_loopback(const std::string &host_port) {
    return host_port.starts_with("127.") || host_port.starts_with("[::1]:") ||
           host_port.starts_with("localhost:");
}

// "ADDR:PORT" or "[V6ADDR]:PORT"; the daemon never listens on every address unless told to.
std::string check_metrics_address(const std::string &a) {
    if (a == "none")
        return a;
    auto colon = a.rfind(':');
    if (colon == std::string::npos || colon + 1 == a.size())
        throw std::runtime_error(fmt::format("--metrics '{}': expected ADDR:PORT or none", a));
    return a;
}

// Binds ADDR:PORT once to say exactly why the metrics endpoint cannot be served there (the
// HTTP server only says "null context").
void probe_metrics_address(const std::string &a) {
    auto colon = a.rfind(':');
    std::string host = a.substr(0, colon), port = a.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
        rc != 0)
        throw std::runtime_error(
            fmt::format("cannot serve metrics on {}: {}", a, gai_strerror(rc)));
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc = bind(fd, res->ai_addr, res->ai_addrlen);
    int err = errno;
    close(fd);
    freeaddrinfo(res);
    if (rc < 0)
        throw std::runtime_error(fmt::format(
            "cannot serve metrics on {}: {}{}", a, std::strerror(err),
            err == EADDRINUSE ? " (another process listens there: choose another port with "
                                "--metrics ADDR:PORT, port 0 for any free one, or --metrics none)"
                              : ""));
}

// A socket file that a daemon answers belongs to it: refused before anything is created.
void probe_socket(const std::string &path) {
    sockaddr_un addr{};
    if (path.size() >= sizeof(addr.sun_path))
        throw std::runtime_error(fmt::format("socket path '{}' is too long", path));
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    struct stat st {};
    if (lstat(path.c_str(), &st) < 0)
        return;
    if (!S_ISSOCK(st.st_mode))
        throw std::runtime_error(fmt::format(
            "{} exists and is not a socket: remove it or choose another --socket", path));
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = connect(probe, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0;
    close(probe);
    if (live)
        throw std::runtime_error(fmt::format("another tricolord answers on {}", path));
}

constexpr long kBpfFsMagic = 0xcafe4a11;

bool on_bpffs(const std::string &path) {
    struct statfs fs {};
    return statfs(path.c_str(), &fs) == 0 && static_cast<long>(fs.f_type) == kBpfFsMagic;
}

bool in_host_mount_namespace() {
    struct stat self {
    }, init{};
    return stat("/proc/self/ns/mnt", &self) == 0 && stat("/proc/1/ns/mnt", &init) == 0 &&
           self.st_ino == init.st_ino;
}

// The pin directory must be on bpffs. Where nothing is mounted at /sys/fs/bpf (the case under
// `ip netns exec`, which remounts /sys), one is mounted, as bpftool and Cilium do; anywhere else
// the start is refused with the command that fixes it. Nothing is created before this check.
// ABI 2 renamed the maps (tc_* to tcm_*) and changed no layout: the maps an ABI 1 daemon
// pinned are moved under their new names, so an upgrade keeps every token, counter and link.
// Renames within bpffs are atomic; a map that cannot be moved stays in abi1/ and is named.
std::string migrate_abi1(const std::string &pin_dir, const std::string &abi_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string old_dir = pin_dir + "/abi1";
    if (TCM_ABI_VERSION != 2 || !fs::is_directory(old_dir, ec) || fs::exists(abi_dir, ec))
        return "";
    fs::create_directories(abi_dir, ec);
    std::vector<std::string> failed;
    size_t moved = 0;
    for (const auto &e : fs::directory_iterator(old_dir, ec)) {
        std::string name = e.path().filename();
        std::string to = name.rfind("tc_", 0) == 0 ? "tcm_" + name.substr(3) : name;
        if (rename(e.path().c_str(), (abi_dir + "/" + to).c_str()) == 0)
            ++moved;
        else
            failed.push_back(fmt::format("{} ({})", name, std::strerror(errno)));
    }
    if (failed.empty())
        fs::remove(old_dir, ec);
    std::string note = fmt::format("moved {} pinned objects of tricolor's ABI 1 from {} to {} "
                                   "(same layout, new names): tokens and counters are kept",
                                   moved, old_dir, abi_dir);
    if (!failed.empty())
        note += fmt::format("; left in {}: {}", old_dir, fmt::join(failed, ", "));
    return note;
}

void check_pin_dir(const std::string &pin_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path p = fs::absolute(pin_dir, ec);
    fs::path existing = p;
    while (!fs::exists(existing, ec) && existing.has_parent_path() &&
           existing != existing.parent_path())
        existing = existing.parent_path();
    if (fs::exists(existing, ec) && !fs::is_directory(existing, ec))
        throw std::runtime_error(
            fmt::format("--pin-dir {}: {} is not a directory", pin_dir, existing.string()));
    if (on_bpffs(existing))
        return;
    const fs::path bpf_root = "/sys/fs/bpf";
    auto rel = p.lexically_relative(bpf_root);
    bool under_root = !rel.empty() && *rel.begin() != "..";
    if (under_root && fs::is_directory(bpf_root, ec) && existing == bpf_root) {
        if (mount("bpf", bpf_root.c_str(), "bpf", 0, "mode=0700") == 0) {
            log(fmt::format("mounted a bpf filesystem at {} (nothing was mounted there), as "
                            "bpftool does",
                            bpf_root.string()));
            if (!in_host_mount_namespace())
                log("warning: this is not the host's mount namespace (ip netns exec?): the pins "
                    "last only as long as this namespace; run tricolord in the host's (e.g. "
                    "`nsenter --net=/run/netns/NS tricolord`) to keep them across restarts");
            return;
        }
        throw std::runtime_error(fmt::format(
            "--pin-dir {}: no bpf filesystem is mounted at {} and mounting one failed ({}): "
            "mount -t bpf bpf {}",
            pin_dir, bpf_root.string(), std::strerror(errno), bpf_root.string()));
    }
    throw std::runtime_error(fmt::format(
        "--pin-dir {}: {} is not on a bpf filesystem, so maps cannot be pinned there: choose a "
        "directory under {} (mount one there with `mount -t bpf bpf {}` if it is missing), or "
        "mount one at the pin directory: mkdir -p {} && mount -t bpf bpf {}",
        pin_dir, existing.string(), bpf_root.string(), bpf_root.string(), p.string(), p.string()));
}

} // namespace

int main(int argc, char **argv) {
    CLI::App app{"tricolord: the tricolor daemon (data path, policies, control socket)",
                 "tricolord"};
    app.set_version_flag("--version", "tricolord " TRICOLOR_VERSION);
    app.footer(
        "Where state lives: the config file is yours and is never written. Changes made with\n"
        "tricolorctl (attach, detach, policy add/set/del, apply) go to the state file. At start\n"
        "the newer of the two is applied (the state on a tie), and the log says which; SIGHUP\n"
        "applies the config, all or nothing (attachments included), and it becomes the state.\n"
        "Buckets and counters live in the pinned maps (--pin-dir) and survive restarts.\n"
        "Exit status: 0 after SIGTERM, 1 when the start is refused (nothing is left behind),\n"
        "2 for bad usage.");
    DaemonOptions o;
    o.config = kDefaultConfig;
    o.socket = kDefaultSocket;
    o.pin_dir = kDefaultPinDir;
    app.add_option("--config", o.config,
                   "Your config file (policies and attachments): read at start and on SIGHUP, "
                   "never written")
        ->capture_default_str();
    app.add_option("--state", o.state,
                   "The daemon's own state file, rewritten (temp file, fsync, rename) by every "
                   "change made with tricolorctl (default: /var/lib/tricolor/state.yaml, or "
                   "state-<pin dir>.yaml beside it for another --pin-dir)");
    app.add_option("--socket", o.socket, "Control socket (root's alone: mode 0600)")
        ->capture_default_str();
    std::string socket_group;
    app.add_option("--socket-group", socket_group,
                   "Open the control socket to this group (mode 0660) for the read-only "
                   "commands: policy list and show, stats, flows, status. Changes still need "
                   "root or CAP_NET_ADMIN");
    app.add_option("--pin-dir", o.pin_dir, "bpffs directory for the pinned maps")
        ->capture_default_str();
    app.add_option("--flows", o.flow_capacity, "Flow table capacity (fixed at first start)")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 26));
    app.add_option("--metrics", o.metrics,
                   "Prometheus endpoint ADDR:PORT (port 0: any free port), or none")
        ->capture_default_str();
    app.add_option("--reclaim-interval", o.reclaim_interval,
                   "Seconds between deletions of idle flows (buckets full again); 0: never")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 86400.0));
    app.add_option("--flow-idle-timeout", o.flow_idle_timeout,
                   "Seconds a flow must have seen no packet before it is reclaimed (its buckets "
                   "full again too); ignored while the flow table is over 90% full; 0: no wait")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 31536000.0));
    // Not documented: tests make it small, so that a few flows have heavy hitters.
    app.add_option("--top-keep", o.top_keep,
                   "flows --top: how many of the busiest flows each pass over the table keeps "
                   "as heavy hitters")
        ->check(CLI::Range(1u, 1u << 20))
        ->group("");
    app.add_option("--fleet", o.fleet,
                   "Join a fleet through Redis (redis://HOST:PORT): policies with --fleet share "
                   "their committed bucket with every host of it");
    app.add_option("--fleet-node", o.fleet_node,
                   "This host's name in the fleet (default: hostname)");
    std::string fallback = "share";
    app.add_option("--fleet-fallback", fallback,
                   "While Redis does not answer: share (CIR/N, N the hosts last seen), closed "
                   "(nothing green) or open (the whole CIR on this host)")
        ->capture_default_str()
        ->check(CLI::IsMember({"share", "closed", "open"}));
    app.add_option("--fleet-period", o.fleet_period_ms, "Milliseconds between exchanges")
        ->capture_default_str()
        ->check(CLI::Range(5u, 10000u));
    app.add_option("--fleet-lease", o.fleet_lease_ms,
                   "Milliseconds a host keeps tokens without an answer from Redis")
        ->capture_default_str()
        ->check(CLI::Range(50u, 600000u));
    app.add_flag("--drop-malformed", o.drop_malformed,
                 "Drop packets with truncated or invalid headers (default: pass and count)");
    app.add_flag("--detach-on-exit", o.detach_on_exit,
                 "Detach and unpin on SIGTERM (default: keep policing without the daemon)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion &e) {
        return app.exit(e);
    } catch (const CLI::ParseError &e) {
        app.exit(e);
        return 2;
    }
    quiet_libbpf_logging();
    if (o.state.empty())
        o.state = default_state_path(o.pin_dir);
    o.fleet_fallback = *fleet::parse_fallback(fallback);
    if (!o.fleet.empty()) {
        if (auto u = fleet::parse_redis_url(o.fleet); !u) {
            log("--fleet " + u.error());
            return 2;
        }
        if (o.fleet_lease_ms < 4 * o.fleet_period_ms) {
            log("--fleet-lease must be at least 4 times --fleet-period");
            return 2;
        }
        if (o.fleet_node.empty()) {
            char host[256] = {};
            gethostname(host, sizeof(host) - 1);
            o.fleet_node = host;
        }
    }

    // Everything that can refuse the start is checked before anything is created.
    gid_t socket_gid = static_cast<gid_t>(-1);
    try {
        check_metrics_address(o.metrics);
        socket_gid = socket_group_id(socket_group);
        probe_socket(o.socket);
        if (o.metrics != "none")
            probe_metrics_address(o.metrics);
        check_pin_dir(o.pin_dir);
    } catch (const std::exception &e) {
        log(e.what());
        return 1;
    }

    // One daemon per pin directory.
    namespace fs = std::filesystem;
    std::error_code ec;
    bool pin_dir_existed = fs::exists(o.pin_dir, ec);
    fs::create_directories(o.pin_dir, ec);
    int lock_fd = open(o.pin_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int err = errno;
        log(fmt::format("cannot lock {}: {}", o.pin_dir,
                        err == EWOULDBLOCK ? "another tricolord uses it" : std::strerror(err)));
        return 1; // never remove anything here: the directory may be the other daemon's
    }
    std::string abi_dir = fmt::format("{}/abi{}", o.pin_dir, TCM_ABI_VERSION);
    if (auto note = migrate_abi1(o.pin_dir, abi_dir); !note.empty())
        log(note);
    bool abi_existed = fs::exists(abi_dir, ec);
    bool state_existed = fs::exists(o.state, ec);

    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGTERM, SIGINT, SIGHUP})
        sigaddset(&mask, s);
    sigprocmask(SIG_BLOCK, &mask, nullptr);
    signal(SIGPIPE, SIG_IGN);
    int sig_fd = signalfd(-1, &mask, SFD_CLOEXEC);

    std::unique_ptr<Daemon> daemon;
    std::unique_ptr<prometheus::Exposer> exposer;
    std::shared_ptr<Metrics> metrics; // the exposer keeps only a weak_ptr
    int listen_fd = -1;
    std::string metrics_at = "none";
    try {
        // Clients that connect now wait until the loop below answers them.
        listen_fd = listen_on(o.socket, socket_gid);
        if (o.metrics != "none") {
            try {
                exposer = std::make_unique<prometheus::Exposer>(o.metrics);
            } catch (const std::exception &e) {
                throw std::runtime_error(
                    fmt::format("cannot serve metrics on {}: {}", o.metrics, e.what()));
            }
        }
        daemon = std::make_unique<Daemon>(o);
        for (const auto &n : daemon->startup_notes)
            log(n);
        for (const auto &w : daemon->startup_warnings)
            log("warning: " + w);
        if (exposer) {
            metrics = std::make_shared<Metrics>(*daemon);
            exposer->RegisterCollectable(metrics);
            auto ports = exposer->GetListeningPorts();
            std::string host = o.metrics.substr(0, o.metrics.rfind(':'));
            metrics_at = fmt::format("{}:{}", host, ports.empty() ? 0 : ports.front());
            daemon->set_metrics_address(metrics_at);
        }
    } catch (const std::exception &e) {
        // A failed start leaves nothing behind that it created.
        exposer.reset();
        if (listen_fd >= 0) {
            close(listen_fd);
            unlink(o.socket.c_str());
        }
        daemon.reset();
        if (!abi_existed)
            fs::remove_all(abi_dir, ec);
        if (!pin_dir_existed)
            fs::remove(o.pin_dir, ec);
        if (!state_existed)
            fs::remove(o.state, ec);
        fs::remove(o.state + ".tmp", ec);
        log(e.what());
        return 1;
    }
    log(fmt::format(
        "ready: socket {} ({}), pin dir {}, config {}, state {}, metrics {}{}", o.socket,
        socket_group.empty() ? "root's alone"
                             : fmt::format("read-only commands for group {} too", socket_group),
        o.pin_dir, o.config, o.state, metrics_at,
        is_loopback(metrics_at) ? " (loopback only: --metrics ADDR:PORT opens it)" : ""));
    sd_notify(0, "READY=1"); // systemd Type=notify: the config is applied, the socket answers

    bool running = true;
    ClientPool clients;
    // The periodic pass over the flow table: reclaims idle flows (unless --reclaim-interval 0)
    // and counts what is left for the tricolor_flows gauge, so that no scrape walks the table;
    // it also keeps the heavy hitters flows --top answers from. On a thread of its own: its walk
    // (0.5 s at 2^20 flows) must not keep this loop from accepting clients.
    const auto pass_interval =
        std::chrono::duration<double>(o.reclaim_interval > 0 ? o.reclaim_interval : 10);
    daemon->count_flows(); // adopted flows, before the first pass
    std::mutex pass_mu;
    std::condition_variable pass_cv;
    bool passes_stop = false;
    std::thread passes([&] {
        std::unique_lock lock(pass_mu);
        while (!pass_cv.wait_for(lock, pass_interval, [&] { return passes_stop; })) {
            lock.unlock();
            // A flow whose buckets are full again is indistinguishable from a new one: deleting
            // it changes no colour and keeps room in the table for flows that need it.
            if (o.reclaim_interval > 0)
                daemon->reclaim_idle_flows();
            else
                daemon->count_flows();
            lock.lock();
        }
    });
    auto stop_passes = [&] {
        {
            std::lock_guard lock(pass_mu);
            passes_stop = true;
        }
        pass_cv.notify_all();
        if (passes.joinable())
            passes.join();
    };
    while (running) {
        pollfd fds[2] = {{listen_fd, POLLIN, 0}, {sig_fd, POLLIN, 0}};
        // A quarter second at most, so the state journal is folded soon after changes pause.
        int ready = poll(fds, 2, 250);
        daemon->compact_state();
        if (ready == 0)
            continue;
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            log(fmt::format("poll: {}", std::strerror(errno)));
            break;
        }
        if (fds[1].revents & POLLIN) {
            signalfd_siginfo si{};
            if (read(sig_fd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGHUP) {
                    sd_notify(0, "RELOADING=1");
                    auto r = daemon->reload();
                    sd_notify(0, "READY=1");
                    if (r)
                        for (const auto &w : daemon->reload_warnings)
                            log("warning: " + w);
                    log(r ? fmt::format("reloaded {} (it is now the state, {})", o.config,
                                        daemon->options().state)
                          : fmt::format("reload refused, nothing changed: {}", r.error()));
                } else {
                    running = false;
                }
            }
        }
        if (fds[0].revents & POLLIN) {
            int client = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (client >= 0)
                clients.serve(client, *daemon);
        }
    }
    sd_notify(0, "STOPPING=1");
    stop_passes();   // a pass under way ends first
    clients.drain(); // no client thread may outlive the daemon it uses
    exposer.reset();
    close(listen_fd);
    unlink(o.socket.c_str());
    if (o.detach_on_exit) {
        daemon->detach_all();
        log("detached and unpinned");
    } else {
        log("exiting; the data path stays attached and policing");
    }
    return 0;
}
