// tricolord: loads the data path (adopting what an earlier daemon pinned), applies the config,
// and serves the control socket until SIGTERM. The data path stays attached and policing when
// the daemon exits for any reason, unless --detach-on-exit.
#include "daemon.hpp"

#include "tricolor/control.hpp"
#include "tricolor/replay.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <systemd/sd-daemon.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <fcntl.h>
#include <poll.h>
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
int listen_on(const std::string &path) {
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
    chmod(path.c_str(), 0600);
    return fd;
}

// One request a connection: read a line (bounded in size and time), answer a line.
void serve_one(int client, Daemon &d) {
    timeval tv{2, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
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
        auto req = nlohmann::json::parse(line.substr(0, line.find('\n')), nullptr, false);
        reply = req.is_discarded()
                    ? nlohmann::json{{"ok", false}, {"error", "the request is not valid JSON"}}
                    : d.handle(req);
    }
    std::string out = reply.dump() + "\n";
    for (size_t off = 0; off < out.size();) {
        ssize_t n = write(client, out.data() + off, out.size() - off);
        if (n <= 0)
            break;
        off += static_cast<size_t>(n);
    }
}

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

// "ADDR:PORT" or "[V6ADDR]:PORT"; the daemon never listens on every address unless told to.
std::string check_metrics_address(const std::string &a) {
    if (a == "none")
        return a;
    auto colon = a.rfind(':');
    if (colon == std::string::npos || colon + 1 == a.size())
        throw std::runtime_error(fmt::format("--metrics '{}': expected ADDR:PORT or none", a));
    return a;
}

} // namespace

int main(int argc, char **argv) {
    CLI::App app{"tricolord: the tricolor daemon (data path, policies, control socket)",
                 "tricolord"};
    app.set_version_flag("--version", "tricolord " TRICOLOR_VERSION);
    DaemonOptions o;
    o.config = kDefaultConfig;
    o.socket = kDefaultSocket;
    o.pin_dir = kDefaultPinDir;
    app.add_option("--config", o.config, "Config file (policies and attachments)")
        ->capture_default_str();
    app.add_option("--socket", o.socket, "Control socket")->capture_default_str();
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

    // One daemon per pin directory.
    std::error_code ec;
    std::filesystem::create_directories(o.pin_dir, ec);
    int lock_fd = open(o.pin_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
        log(fmt::format("cannot lock {}: {}", o.pin_dir,
                        errno == EWOULDBLOCK ? "another tricolord uses it" : std::strerror(errno)));
        return 1;
    }

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
        check_metrics_address(o.metrics);
        daemon = std::make_unique<Daemon>(o);
        for (const auto &w : daemon->startup_warnings)
            log("warning: " + w);
        listen_fd = listen_on(o.socket);
        if (o.metrics != "none") {
            try {
                exposer = std::make_unique<prometheus::Exposer>(o.metrics);
            } catch (const std::exception &e) {
                throw std::runtime_error(
                    fmt::format("cannot serve metrics on {}: {}", o.metrics, e.what()));
            }
            metrics = std::make_shared<Metrics>(*daemon);
            exposer->RegisterCollectable(metrics);
            auto ports = exposer->GetListeningPorts();
            std::string host = o.metrics.substr(0, o.metrics.rfind(':'));
            metrics_at = fmt::format("{}:{}", host, ports.empty() ? 0 : ports.front());
            daemon->set_metrics_address(metrics_at);
        }
    } catch (const std::exception &e) {
        log(e.what());
        return 1;
    }
    log(fmt::format("ready: socket {}, pin dir {}, config {}, metrics {}", o.socket, o.pin_dir,
                    o.config, metrics_at));
    sd_notify(0, "READY=1"); // systemd Type=notify: the config is applied, the socket answers

    bool running = true;
    using clock = std::chrono::steady_clock;
    auto next_reclaim = clock::now() + std::chrono::duration<double>(o.reclaim_interval);
    while (running) {
        pollfd fds[2] = {{listen_fd, POLLIN, 0}, {sig_fd, POLLIN, 0}};
        int timeout = -1;
        if (o.reclaim_interval > 0) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(next_reclaim - clock::now());
            timeout = static_cast<int>(std::max<int64_t>(0, left.count()));
        }
        int ready = poll(fds, 2, timeout);
        if (o.reclaim_interval > 0 && clock::now() >= next_reclaim) {
            // A flow whose buckets are full again is indistinguishable from a new one: deleting
            // it changes no colour and keeps room in the table for flows that need it.
            daemon->reclaim_idle_flows();
            next_reclaim = clock::now() + std::chrono::duration<double>(o.reclaim_interval);
        }
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
                    log(r ? fmt::format("reloaded {}", o.config)
                          : fmt::format("reload refused, nothing changed: {}", r.error()));
                } else {
                    running = false;
                }
            }
        }
        if (fds[0].revents & POLLIN) {
            int client = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (client >= 0) {
                serve_one(client, *daemon);
                close(client);
            }
        }
    }
    sd_notify(0, "STOPPING=1");
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
