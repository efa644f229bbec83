// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// containers.hpp: tricolord --containers docker[=SOCKET] / podman[=SOCKET] (docs/containers.md,
// spec §13). A thread per engine reads its containers and follows its events through the Engine
// API on its unix socket (Podman through its Docker-compatible one), and for each running
// container labelled tricolor.egress / tricolor.ingress makes its policies and its host-side
// interface's attachments through the daemon's own request handler, as the CNI plugin does; it
// removes them when the container dies or goes. Everything it makes is named after the engine
// and the container id, so that after a restart of either side it is found again from the
// daemon's policies and the engine's list: none made twice, none left of a container gone.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tricolor {

struct EngineSpec {
    std::string kind;   // docker | podman
    std::string socket; // the Engine API's unix socket
    bool operator==(const EngineSpec &) const = default;
};

// "docker", "docker=/path", "podman", "podman=/path"; nullopt when it is none of those.
std::optional<EngineSpec> parse_engine(const std::string &text);

// One direction's label value, "RATE[/BURST]" in iproute2 units ("20mbit/64k"); the burst
// defaults to 10 ms of the rate, at least 64 KiB. Rate in bit/s, burst in bytes.
struct LabelLimit {
    uint64_t rate = 0, burst = 0;
};
std::optional<LabelLimit> parse_label_limit(const std::string &text, std::string *why);

class ContainerWatcher {
  public:
    // @request: the daemon's request handler (Daemon::handle as root).
    using Request = std::function<nlohmann::json(const nlohmann::json &)>;
    ContainerWatcher(EngineSpec engine, Request request);
    ~ContainerWatcher();
    ContainerWatcher(const ContainerWatcher &) = delete;
    ContainerWatcher &operator=(const ContainerWatcher &) = delete;

    nlohmann::json status() const;
    const EngineSpec &engine() const { return engine_; }

  private:
    struct Made {
        std::string name, host_if;
    };
    void run();
    bool reconcile();           // the engine's list against what the daemon holds
    void follow_events(int fd); // until the stream ends or stop_
    void container_up(const std::string &id);
    void container_gone(const std::string &id);
    void log(const std::string &line);
    std::string prefix() const { return engine_.kind + "-"; }

    EngineSpec engine_;
    Request request_;
    mutable std::mutex mu_;
    bool connected_ = false;
    std::string last_error_;
    std::map<std::string, Made> made_; // by container id
    // By container id (12): its name, and why nothing was made (a label that does not parse; no
    // interface or address to limit, the daemon's refusal). Said once each.
    std::map<std::string, std::pair<std::string, std::string>> bad_labels_, skipped_;
    uint64_t made_total_ = 0, removed_total_ = 0;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

} // namespace tricolor
