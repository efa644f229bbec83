// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolord: loads the data path (adopting what an earlier daemon pinned), applies the config,
// and serves the control socket until SIGTERM. The data path stays attached and policing when
// the daemon exits for any reason, unless --detach-on-exit. main.cpp: the command line, the
// start in its steps, the main loop and the exit.
#include "tricolord.hpp"
#include "web.hpp"

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
#include <condition_variable>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace tricolor;
using namespace tricolor::tricolord;
namespace fs = std::filesystem;

void tricolor::tricolord::log(const std::string &msg) {
    std::cerr << "tricolord: " << msg << std::endl;
}

namespace {

// ---- the command line ----

struct CommandLine {
    DaemonOptions daemon;
    std::string socket_group;
    std::string fleet_fallback = "share";
    std::string web;         // --web as given ("" none), then as ADDR:PORT (a port alone: loopback)
    std::string prepare_for; // --prepare-pin-dir USER: only that, then exit
    uint32_t max_flows = 0;  // --max-flows as given (0: not)
};

// Parses the command line into @cl; returns the exit status when the program ends here (help,
// version, bad usage).
std::optional<int> parse_command_line(int argc, char **argv, CommandLine &cl) {
    DaemonOptions &o = cl.daemon;
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
    app.add_option("--socket-group", cl.socket_group,
                   "Open the control socket to this group (mode 0660) for the read-only "
                   "commands: policy list and show, stats, flows, status. Changes still need "
                   "root or CAP_NET_ADMIN");
    app.add_option("--pin-dir", o.pin_dir, "bpffs directory for the pinned maps")
        ->capture_default_str();
    app.add_option("--flows", o.flow_capacity,
                   "Flow table capacity at the start, and the least it shrinks to; it grows "
                   "when 39/40 full, for what it holds and what comes while it loads, up to "
                   "--max-flows, and shrinks when flows are gone (its slots under two thirds "
                   "full), its flows moved with their tokens and counters")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 26));
    app.add_option("--max-flows", cl.max_flows,
                   "The most flows the table grows to (default: the config's max_flows, else "
                   "1048576 or --flows if more); past it a new flow is metered in its policy's "
                   "bucket (table_full)")
        ->check(CLI::Range(1u, 1u << 26));
    app.add_option("--metrics", o.metrics,
                   "Prometheus endpoint ADDR:PORT (port 0: any free port), or none")
        ->capture_default_str();
    app.add_option("--web", cl.web,
                   "Serve the live page (read-only) on PORT (loopback) or ADDR:PORT; port 0: "
                   "any free port (default: none)")
        ->type_name("[ADDR:]PORT");
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
                   "Join a fleet through Redis (redis://HOST:PORT), or a Redis Cluster "
                   "(redis://HOST:PORT,HOST:PORT,...: any of its nodes): policies with --fleet "
                   "share their committed bucket with every host of it");
    app.add_option("--fleet-node", o.fleet_node,
                   "This host's name in the fleet, one per host (default: hostname); a name "
                   "another live daemon holds runs nothing until it is free");
    app.add_option("--fleet-fallback", cl.fleet_fallback,
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
    app.add_option("--containers", o.containers,
                   "Follow a container engine's containers (docker[=SOCKET], podman[=SOCKET]; "
                   "repeatable): those labelled tricolor.egress / tricolor.ingress get their "
                   "limits")
        ->type_name("ENGINE");
    app.add_option("--prepare-pin-dir", cl.prepare_for,
                   "Make the pin directory, give it and what is in it to USER, and exit (run as "
                   "root before a daemon that runs as USER: the unit's ExecStartPre)")
        ->type_name("USER");
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
    return std::nullopt;
}

// The defaults that depend on other options, and the checks across options: what is wrong
// (bad usage), or nullopt.
std::optional<std::string> complete_options(CommandLine &cl) {
    DaemonOptions &o = cl.daemon;
    if (o.state.empty())
        o.state = default_state_path(o.pin_dir);
    o.fleet_fallback = *fleet::parse_fallback(cl.fleet_fallback);
    if (cl.max_flows && cl.max_flows < o.flow_capacity)
        return fmt::format("--flows {} is more than --max-flows {}: the table starts at --flows "
                           "and grows to --max-flows",
                           o.flow_capacity, cl.max_flows);
    o.max_flows = cl.max_flows ? cl.max_flows : std::max(o.flow_capacity, o.max_flows);
    o.max_flows_given = cl.max_flows != 0;
    if (auto no = http_address_problem(o.metrics, "--metrics"); !no.empty())
        return no;
    for (const auto &c : o.containers)
        if (!parse_engine(c))
            return fmt::format("--containers '{}': docker, docker=SOCKET, podman or "
                               "podman=SOCKET (SOCKET an absolute path)",
                               c);
    if (!cl.web.empty()) {
        auto w = page_listen_address(cl.web);
        if (!w)
            return w.error();
        cl.web = *w;
    }
    if (o.fleet.empty())
        return std::nullopt;
    if (auto u = fleet::parse_redis_url(o.fleet); !u)
        return "--fleet " + u.error();
    if (o.fleet_lease_ms < 4 * o.fleet_period_ms)
        return "--fleet-lease must be at least 4 times --fleet-period";
    if (o.fleet_node.empty()) {
        char host[256] = {};
        gethostname(host, sizeof(host) - 1);
        o.fleet_node = host;
    }
    return std::nullopt;
}

// ---- the metrics endpoint ----

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

// Binds ADDR:PORT once to say exactly why @what (the metrics, the page) cannot be served there
// (the HTTP server only says "null context"); @option is what chooses another address.
void probe_listen_address(const std::string &a, const char *what, const char *option) {
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
            fmt::format("cannot serve {} on {}: {}", what, a, gai_strerror(rc)));
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc = bind(fd, res->ai_addr, res->ai_addrlen);
    int err = errno;
    close(fd);
    freeaddrinfo(res);
    if (rc < 0)
        throw std::runtime_error(fmt::format(
            "cannot serve {} on {}: {}{}", what, a, std::strerror(err),
            err == EADDRINUSE
                ? fmt::format(" (another process listens there: choose another port with {} "
                              "ADDR:PORT, port 0 for any free one{})",
                              option,
                              std::string_view(option) == "--metrics" ? ", or --metrics none" : "")
                : ""));
}

// ---- the start ----

// Everything that can refuse the start, checked before anything is created. Returns
// --socket-group's gid (-1: none); throws what refuses the start.
gid_t check_before_start(const CommandLine &cl) {
    const DaemonOptions &o = cl.daemon;
    check_metrics_address(o.metrics);
    gid_t socket_gid = socket_group_id(cl.socket_group);
    probe_socket(o.socket);
    if (o.metrics != "none")
        probe_listen_address(o.metrics, "metrics", "--metrics");
    if (!cl.web.empty())
        probe_listen_address(cl.web, "the page", "--web");
    check_pin_dir(o.pin_dir);
    return socket_gid;
}

// What existed before this start, so that a start that fails removes only what it created.
struct Before {
    std::string abi_dir; // <pin dir>/abi<N>: this ABI's pins
    bool pin_dir_existed = false, abi_dir_existed = false, state_existed = false;
};

// One daemon per pin directory: creates it and holds its lock until the process ends, and
// moves an older ABI's pins. False (logged) when another daemon holds it.
bool lock_pin_dir(const DaemonOptions &o, Before &before) {
    std::error_code ec;
    before.pin_dir_existed = fs::exists(o.pin_dir, ec);
    fs::create_directories(o.pin_dir, ec);
    int lock_fd = open(o.pin_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int err = errno;
        log(fmt::format(
            "cannot lock {}: {}{}", o.pin_dir,
            err == EWOULDBLOCK ? "another tricolord uses it" : std::strerror(err),
            err == EACCES && geteuid() != 0
                ? fmt::format(" (tricolord runs as uid {}: the pin directory must be its own, "
                              "and the directories above it open to it; /sys/fs/bpf is root's "
                              "alone, mode 0700, where systemd mounts it)",
                              geteuid())
                : ""));
        return false; // never remove anything here: the directory may be the other daemon's
    }
    before.abi_dir = fmt::format("{}/abi{}", o.pin_dir, TCM_ABI_VERSION);
    if (auto note = migrate_abi1(o.pin_dir, before.abi_dir); !note.empty())
        log(note);
    before.abi_dir_existed = fs::exists(before.abi_dir, ec);
    before.state_existed = fs::exists(o.state, ec);
    return true;
}

// SIGTERM, SIGINT and SIGHUP arrive on the returned signalfd, for the main loop.
int signals_to_fd() {
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGTERM, SIGINT, SIGHUP})
        sigaddset(&mask, s);
    sigprocmask(SIG_BLOCK, &mask, nullptr);
    signal(SIGPIPE, SIG_IGN);
    return signalfd(-1, &mask, SFD_CLOEXEC);
}

// What a start creates, in the order it creates it.
struct Running {
    int listen_fd = -1;
    std::unique_ptr<prometheus::Exposer> exposer;
    std::unique_ptr<Daemon> daemon;
    std::shared_ptr<Metrics> metrics; // the exposer keeps only a weak_ptr
    std::string metrics_at = "none";
    std::unique_ptr<PageServer> page; // --web; stopped before the daemon it reads
};

// Listens, starts the metrics endpoint, the daemon (which applies the config or state) and the
// page: throws what refuses the start, leaving in @run what it created.
void start(const CommandLine &cl, gid_t socket_gid, Running &run) {
    const DaemonOptions &o = cl.daemon;
    // Clients that connect now wait until the main loop answers them.
    run.listen_fd = listen_on(o.socket, socket_gid);
    if (o.metrics != "none") {
        try {
            run.exposer = std::make_unique<prometheus::Exposer>(o.metrics);
        } catch (const std::exception &e) {
            throw std::runtime_error(
                fmt::format("cannot serve metrics on {}: {}", o.metrics, e.what()));
        }
    }
    run.daemon = std::make_unique<Daemon>(o);
    for (const auto &n : run.daemon->startup_notes)
        log(n);
    for (const auto &w : run.daemon->startup_warnings)
        log("warning: " + w);
    if (run.exposer) {
        run.metrics = std::make_shared<Metrics>(*run.daemon);
        run.exposer->RegisterCollectable(run.metrics);
        auto ports = run.exposer->GetListeningPorts();
        std::string host = o.metrics.substr(0, o.metrics.rfind(':'));
        run.metrics_at = fmt::format("{}:{}", host, ports.empty() ? 0 : ports.front());
        run.daemon->set_metrics_address(run.metrics_at);
    }
    if (!cl.web.empty()) {
        run.page = std::make_unique<PageServer>(*run.daemon, cl.web);
        run.daemon->set_page_address(run.page->address());
    }
}

// A failed start leaves nothing behind that it created.
void undo_start(const DaemonOptions &o, const Before &before, Running &run) {
    std::error_code ec;
    run.page.reset();
    run.exposer.reset();
    if (run.listen_fd >= 0) {
        close(run.listen_fd);
        unlink(o.socket.c_str());
    }
    run.daemon.reset();
    if (!before.abi_dir_existed)
        fs::remove_all(before.abi_dir, ec);
    if (!before.pin_dir_existed)
        fs::remove(o.pin_dir, ec);
    if (!before.state_existed)
        fs::remove(o.state, ec);
    fs::remove(o.state + ".tmp", ec);
}

void log_ready(const CommandLine &cl, const Running &run) {
    const std::string &metrics_at = run.metrics_at;
    const DaemonOptions &o = cl.daemon;
    log(fmt::format(
        "ready: socket {} ({}), pin dir {}, config {}, state {}, metrics {}{}", o.socket,
        cl.socket_group.empty()
            ? "root's alone"
            : fmt::format("read-only commands for group {} too", cl.socket_group),
        o.pin_dir, o.config, o.state, metrics_at,
        is_loopback(metrics_at) ? " (loopback only: --metrics ADDR:PORT opens it)" : ""));
    if (run.page)
        log(fmt::format(
            "the live page: http://{}/{}", run.page->address(),
            is_loopback(run.page->address()) ? " (loopback only: --web ADDR:PORT opens it)" : ""));
}

// ---- running ----

// Runs @work every @interval on a thread of its own until stop(), which lets a run under way
// end first.
class Periodic {
  public:
    Periodic(std::chrono::duration<double> interval, std::function<void()> work)
        : interval_(interval), work_(std::move(work)), thread_([this] {
              std::unique_lock lock(mu_);
              while (!cv_.wait_for(lock, interval_, [&] { return stop_; })) {
                  lock.unlock();
                  work_();
                  lock.lock();
              }
          }) {}
    ~Periodic() { stop(); }
    Periodic(const Periodic &) = delete;
    Periodic &operator=(const Periodic &) = delete;
    void stop() {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable())
            thread_.join();
    }

  private:
    const std::chrono::duration<double> interval_;
    const std::function<void()> work_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_; // last: it starts once the members it uses exist
};

// SIGHUP reloads the config; SIGTERM and SIGINT end the main loop (false).
bool on_signal(int sig_fd, Daemon &daemon, const DaemonOptions &o) {
    signalfd_siginfo si{};
    if (read(sig_fd, &si, sizeof(si)) != sizeof(si))
        return true;
    if (si.ssi_signo != SIGHUP)
        return false;
    sd_notify(0, "RELOADING=1");
    auto r = daemon.reload();
    if (r)
        daemon.follow_engines();
    sd_notify(0, "READY=1");
    if (r)
        for (const auto &w : daemon.reload_warnings)
            log("warning: " + w);
    log(r ? fmt::format("reloaded {} (it is now the state, {})", o.config, daemon.options().state)
          : fmt::format("reload refused, nothing changed: {}", r.error()));
    return true;
}

// Serves the control socket and the signals until SIGTERM or SIGINT.
void main_loop(const DaemonOptions &o, int listen_fd, int sig_fd, Daemon &daemon,
               ClientPool &clients) {
    for (bool running = true; running;) {
        pollfd fds[2] = {{listen_fd, POLLIN, 0}, {sig_fd, POLLIN, 0}};
        // A quarter second at most, so the state journal is folded soon after changes pause.
        int ready = poll(fds, 2, 250);
        daemon.compact_state();
        if (auto failed = daemon.follow_cgroups(); !failed.empty())
            log("cgroup rules not updated: " + failed);
        for (const auto &said : daemon.follow_interfaces())
            log(said);
        if (ready == 0)
            continue;
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            log(fmt::format("poll: {}", std::strerror(errno)));
            break;
        }
        if (fds[1].revents & POLLIN)
            running = on_signal(sig_fd, daemon, o);
        if (fds[0].revents & POLLIN) {
            int client = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (client >= 0)
                clients.serve(client, daemon);
        }
    }
}

void shut_down(const DaemonOptions &o, Running &run) {
    run.daemon->save_quota_uses(); // what the last pass did not see
    run.page.reset();
    run.exposer.reset();
    close(run.listen_fd);
    unlink(o.socket.c_str());
    if (o.detach_on_exit) {
        run.daemon->detach_all();
        log("detached and unpinned");
    } else {
        log("exiting; the data path stays attached and policing");
    }
}

} // namespace

int main(int argc, char **argv) {
    CommandLine cl;
    if (auto exit_status = parse_command_line(argc, argv, cl))
        return *exit_status;
    quiet_libbpf_logging();
    if (auto bad = complete_options(cl)) {
        log(*bad);
        return 2;
    }
    const DaemonOptions &o = cl.daemon;
    if (!cl.prepare_for.empty()) {
        try {
            log(prepare_pin_dir(o.pin_dir, cl.prepare_for));
            return 0;
        } catch (const std::exception &e) {
            log(e.what());
            return 1;
        }
    }
    gid_t socket_gid = static_cast<gid_t>(-1);
    try {
        socket_gid = check_before_start(cl);
    } catch (const std::exception &e) {
        log(e.what());
        return 1;
    }
    Before before;
    if (!lock_pin_dir(o, before))
        return 1;
    int sig_fd = signals_to_fd();
    Running run;
    try {
        start(cl, socket_gid, run);
    } catch (const std::exception &e) {
        undo_start(o, before, run);
        log(e.what());
        return 1;
    }
    log_ready(cl, run);
    sd_notify(0, "READY=1"); // systemd Type=notify: the config is applied, the socket answers

    ClientPool clients;
    run.daemon->count_flows(); // adopted flows, before the first pass
    // The periodic pass over the flow table: reclaims idle flows (unless --reclaim-interval
    // 0) and counts what is left for the tricolor_flows gauge, so that no scrape walks the
    // table; it also keeps the heavy hitters flows --top answers from. On a thread of its own:
    // its walk (0.5 s at 2^20 flows) must not keep the main loop from accepting clients. A flow
    // whose buckets are full again is indistinguishable from a new one: deleting it changes no
    // colour and keeps room in the table for flows that need it.
    Periodic passes(std::chrono::duration<double>(o.reclaim_interval > 0 ? o.reclaim_interval : 10),
                    [&d = *run.daemon, interval = o.reclaim_interval] {
                        if (interval > 0)
                            d.reclaim_idle_flows();
                        else
                            d.count_flows();
                    });
    // The flow table grows when half full (Daemon::grow_flow_table_if_needed): a look every
    // 10 ms, one counter read, so that a growth starts before the other half is gone.
    Periodic growth(std::chrono::milliseconds(10),
                    [&d = *run.daemon] { d.grow_flow_table_if_needed(); });
    main_loop(o, run.listen_fd, sig_fd, *run.daemon, clients);
    sd_notify(0, "STOPPING=1");
    growth.stop();
    passes.stop();
    clients.drain(); // no client thread may outlive the daemon it uses
    shut_down(o, run);
    return 0;
}
