// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// containers.cpp: containers.hpp. The Engine API spoken here is the little tricolor needs: GET
// /containers/json (the running ones), GET /containers/ID/json (labels, pid, addresses) and the
// stream of GET /events, over HTTP/1.1 on the engine's unix socket. Docker and Podman's
// compatible API answer the same.
#include "containers.hpp"

#include "tricolor/container_limits.hpp"
#include "tricolor/netns.hpp"
#include "tricolor/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <cstring>
#include <fstream>
#include <iostream>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

using nlohmann::json;

namespace tricolor {

std::optional<EngineSpec> parse_engine(const std::string &text) {
    const auto eq = text.find('=');
    EngineSpec e{text.substr(0, eq), ""};
    if (e.kind != "docker" && e.kind != "podman")
        return std::nullopt;
    if (eq != std::string::npos)
        e.socket = text.substr(eq + 1);
    else
        e.socket = e.kind == "docker" ? "/var/run/docker.sock" : "/run/podman/podman.sock";
    if (e.socket.empty() || e.socket[0] != '/')
        return std::nullopt;
    return e;
}

std::optional<LabelLimit> parse_label_limit(const std::string &text, std::string *why) {
    const auto slash = text.find('/');
    auto rate = parse_rate(text.substr(0, slash));
    if (!rate || *rate == 0) {
        *why = fmt::format("'{}': the rate: {}", text, rate ? "must be above 0" : rate.error());
        return std::nullopt;
    }
    LabelLimit l{*rate, default_burst_bytes(*rate)};
    if (slash != std::string::npos) {
        auto burst = parse_size(text.substr(slash + 1));
        if (!burst || *burst == 0) {
            *why =
                fmt::format("'{}': the burst: {}", text, burst ? "must be above 0" : burst.error());
            return std::nullopt;
        }
        l.burst = *burst;
    }
    return l;
}

namespace {

constexpr int kPollMs = 250;

int connect_unix(const std::string &path, std::string *why) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (fd < 0 || path.size() >= sizeof(a.sun_path)) {
        *why = "cannot make a socket";
        if (fd >= 0)
            close(fd);
        return -1;
    }
    memcpy(a.sun_path, path.c_str(), path.size() + 1);
    if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0) {
        *why = fmt::format("cannot connect to {}: {}", path, strerror(errno));
        close(fd);
        return -1;
    }
    timeval tv{5, 0}; // a one-shot request's reads and writes; the event stream polls
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

bool send_get(int fd, const std::string &path) {
    const std::string req =
        fmt::format("GET {} HTTP/1.1\r\nHost: tricolor\r\nUser-Agent: tricolord\r\n\r\n", path);
    return send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
}

// An HTTP/1.1 body as it arrives: chunked, of a length, or until the connection closes.
class Body {
  public:
    // Takes the head (status line and headers) from @raw once whole; false until then.
    bool head(std::string &raw) {
        auto end = raw.find("\r\n\r\n");
        if (end == std::string::npos)
            return false;
        std::string h = raw.substr(0, end);
        raw.erase(0, end + 4);
        status = std::atoi(h.substr(h.find(' ') + 1).c_str());
        std::string lower;
        for (char c : h)
            lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        chunked = lower.find("transfer-encoding: chunked") != std::string::npos;
        if (auto cl = lower.find("content-length:"); cl != std::string::npos)
            left = std::strtoull(lower.c_str() + cl + 15, nullptr, 10);
        return true;
    }
    // Moves what @raw holds of the body into @out; true once the body is complete.
    bool take(std::string &raw, std::string &out) {
        if (!chunked) {
            if (left == UINT64_MAX) {
                out += raw;
                raw.clear();
                return false;
            }
            size_t n = std::min<uint64_t>(left, raw.size());
            out += raw.substr(0, n);
            raw.erase(0, n);
            left -= n;
            return left == 0;
        }
        for (;;) {
            if (chunk_left == 0) {
                auto eol = raw.find("\r\n");
                if (eol == std::string::npos)
                    return false;
                if (eol == 0) { // the CRLF after a chunk's data
                    raw.erase(0, 2);
                    continue;
                }
                chunk_left = std::strtoull(raw.substr(0, eol).c_str(), nullptr, 16);
                raw.erase(0, eol + 2);
                if (chunk_left == 0)
                    return true;
            }
            size_t n = std::min<uint64_t>(chunk_left, raw.size());
            if (n == 0)
                return false;
            out += raw.substr(0, n);
            raw.erase(0, n);
            chunk_left -= n;
        }
    }
    int status = 0;
    bool chunked = false;
    uint64_t left = UINT64_MAX, chunk_left = 0;
};

// One GET: the status and the whole body, or nullopt with @why.
std::optional<std::pair<int, std::string>> get(const std::string &socket, const std::string &path,
                                               std::string *why) {
    int fd = connect_unix(socket, why);
    if (fd < 0)
        return std::nullopt;
    if (!send_get(fd, path)) {
        *why = fmt::format("{}: cannot send GET {}", socket, path);
        close(fd);
        return std::nullopt;
    }
    std::string raw, body;
    Body b;
    bool have_head = false, done = false;
    char buf[16384];
    while (!done) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            done = have_head && !b.chunked && b.left == UINT64_MAX; // until close
            if (!done) {
                *why = fmt::format("{}: GET {}: the reply ended early", socket, path);
                close(fd);
                return std::nullopt;
            }
            break;
        }
        raw.append(buf, static_cast<size_t>(n));
        if (!have_head && !(have_head = b.head(raw)))
            continue;
        done = b.take(raw, body);
    }
    close(fd);
    return std::pair{b.status, body};
}

std::optional<json> get_json(const std::string &socket, const std::string &path, std::string *why) {
    auto r = get(socket, path, why);
    if (!r)
        return std::nullopt;
    if (r->first != 200) {
        *why = fmt::format("{}: GET {}: HTTP {}", socket, path, r->first);
        return std::nullopt;
    }
    json j = json::parse(r->second, nullptr, false);
    if (j.is_discarded()) {
        *why = fmt::format("{}: GET {}: not JSON", socket, path);
        return std::nullopt;
    }
    return j;
}

// A container's policies say who they are for and on which interfaces: "docker NAME on IF" (a
// comma between several; "docker NAME on the host's network": none). The interfaces are read
// back from there after a restart of either side (to detach them).
constexpr const char *kHostNetwork = "the host's network";
std::string owner_of(const std::string &kind, const std::string &name,
                     const std::string &host_ifs) {
    return fmt::format("{} {} on {}", kind, name, host_ifs.empty() ? kHostNetwork : host_ifs);
}
std::string host_if_of(const std::string &owner) {
    auto on = owner.rfind(" on ");
    if (on == std::string::npos || owner.substr(on + 4) == kHostNetwork)
        return "";
    return owner.substr(on + 4);
}
std::vector<std::string> split_ifs(const std::string &host_ifs) {
    std::vector<std::string> out;
    for (size_t at = 0; at < host_ifs.size();) {
        size_t comma = std::min(host_ifs.find(',', at), host_ifs.size());
        if (comma > at)
            out.push_back(host_ifs.substr(at, comma - at));
        at = comma + 1;
    }
    return out;
}

// The cgroup v2 cgroup of process @pid if it is the container @id's own (its path names the id:
// /docker/ID, /system.slice/docker-ID.scope, /libpod_parent/libpod-ID), as a path below the
// cgroup2 mount; "" without one (cgroup v1 alone, or the engine's cgroup shared).
std::string own_cgroup(pid_t pid, const std::string &id) {
    std::ifstream in(fmt::format("/proc/{}/cgroup", pid));
    for (std::string line; std::getline(in, line);)
        if (line.starts_with("0::/")) {
            std::string path = line.substr(4);
            return path.find(id) != std::string::npos ? path : "";
        }
    return "";
}

std::string policy_name(const std::string &kind, const std::string &id, bool ingress) {
    return fmt::format("{}-{}-{}", kind, id.substr(0, 12), ingress ? "in" : "out");
}

// What a container's labels ask for; @why says what does not parse.
struct Want {
    std::optional<LabelLimit> in, out;
    std::string tmpl; // tricolor.policy: a policy of the daemon's whose meter and actions it copies
};
std::optional<Want> want_of(const json &labels, std::string *why) {
    Want w;
    if (!labels.is_object())
        return w;
    for (const auto &[k, v] : labels.items()) {
        if (!k.starts_with("tricolor."))
            continue;
        const std::string val = v.is_string() ? v.get<std::string>() : v.dump();
        std::string bad;
        if (k == "tricolor.egress" || k == "tricolor.ingress") {
            auto l = parse_label_limit(val, &bad);
            if (!l) {
                *why = fmt::format("label {}={}: {}", k, val, bad);
                return std::nullopt;
            }
            (k == "tricolor.egress" ? w.out : w.in) = *l;
        } else if (k == "tricolor.policy") {
            if (val.empty() || val.size() > 63) {
                *why = fmt::format("label {}={}: a policy name (1 to 63 characters)", k, val);
                return std::nullopt;
            }
            w.tmpl = val;
        } else {
            *why = fmt::format("label {}: unknown (tricolor.egress, tricolor.ingress, "
                               "tricolor.policy)",
                               k);
            return std::nullopt;
        }
    }
    return w;
}

} // namespace

ContainerWatcher::ContainerWatcher(EngineSpec engine, Request request)
    : engine_(std::move(engine)), request_(std::move(request)) {
    thread_ = std::thread([this] { run(); });
}

ContainerWatcher::~ContainerWatcher() {
    stop_ = true;
    if (thread_.joinable())
        thread_.join();
}

void ContainerWatcher::log(const std::string &line) {
    std::cerr << "tricolord: " << engine_.kind << ": " << line << std::endl;
}

json ContainerWatcher::status() const {
    std::lock_guard l(mu_);
    json made = json::array();
    for (const auto &[id, m] : made_)
        made.push_back({{"id", id.substr(0, 12)}, {"name", m.name}, {"iface", m.host_if}});
    json bad = json::object(), skipped = json::object();
    for (const auto &[id, v] : bad_labels_)
        bad[v.first] = v.second;
    for (const auto &[id, v] : skipped_)
        skipped[v.first] = v.second;
    return {{"engine", engine_.kind},
            {"socket", engine_.socket},
            {"connected", connected_},
            {"last_error", last_error_},
            {"containers", made},
            {"bad_labels", bad},
            {"skipped", skipped},
            {"made_total", made_total_},
            {"removed_total", removed_total_}};
}

void ContainerWatcher::run() {
    bool said_down = false;
    while (!stop_) {
        std::string why;
        // The event stream first, then the list: an event between the two is not lost (a
        // container seen in both is made once).
        int fd = connect_unix(engine_.socket, &why);
        if (fd >= 0 && !send_get(fd, "/events?filters=%7B%22type%22%3A%5B%22container%22%5D%7D")) {
            why = "cannot send GET /events";
            close(fd);
            fd = -1;
        }
        if (fd >= 0 && reconcile()) {
            {
                std::lock_guard l(mu_);
                connected_ = true;
                last_error_.clear();
            }
            if (said_down)
                log(fmt::format("{} answers again: containers read anew", engine_.socket));
            said_down = false;
            follow_events(fd);
            std::lock_guard l(mu_);
            why = last_error_.empty() ? "the event stream ended" : last_error_;
        }
        if (fd >= 0)
            close(fd);
        {
            std::lock_guard l(mu_);
            connected_ = false;
            if (!why.empty())
                last_error_ = why;
        }
        if (!said_down)
            log(fmt::format("{}; retrying every second (policies of containers are kept)",
                            last_error_));
        said_down = true;
        for (int i = 0; i < 4 && !stop_; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    }
}

bool ContainerWatcher::reconcile() {
    std::string why;
    auto list = get_json(engine_.socket, "/containers/json", &why);
    if (!list || !list->is_array()) {
        std::lock_guard l(mu_);
        last_error_ = list ? "GET /containers/json: not a list" : why;
        return false;
    }
    std::set<std::string> running;
    for (const auto &c : *list)
        if (c.is_object() && c.contains("Id") && c["Id"].is_string())
            running.insert(c["Id"].get<std::string>());
    // What the daemon holds of this engine's (after a restart of either side: from its
    // policies, the interface in their owner) that no running container has now.
    auto pl = request_({{"cmd", "policy_list"}});
    std::map<std::string, std::string> held; // id prefix -> host_if
    if (pl.value("ok", false))
        for (const auto &p : pl["policies"]) {
            const json &spec = p;
            std::string name = spec.value("name", "");
            if (!name.starts_with(prefix()))
                continue;
            std::string rest = name.substr(prefix().size());
            std::string id = rest.substr(0, rest.rfind('-'));
            held[id] = host_if_of(spec.value("owner", ""));
        }
    for (const auto &[id12, host_if] : held) {
        bool alive = std::ranges::any_of(running, [&](auto &id) { return id.starts_with(id12); });
        if (!alive) {
            {
                std::lock_guard l(mu_);
                made_[id12] = {"", host_if};
            }
            container_gone(id12);
        }
    }
    for (const auto &id : running)
        container_up(id);
    return true;
}

void ContainerWatcher::follow_events(int fd) {
    std::string raw, lines;
    Body b;
    bool have_head = false;
    char buf[16384];
    while (!stop_) {
        pollfd p{fd, POLLIN, 0};
        int r = poll(&p, 1, kPollMs);
        if (r < 0 && errno != EINTR)
            return;
        if (r <= 0)
            continue;
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return;
        if (n < 0)
            continue;
        raw.append(buf, static_cast<size_t>(n));
        if (!have_head) {
            if (!(have_head = b.head(raw)))
                continue;
            if (b.status != 200) {
                std::lock_guard l(mu_);
                last_error_ = fmt::format("GET /events: HTTP {}", b.status);
                return;
            }
        }
        const bool ended = b.take(raw, lines);
        for (auto eol = lines.find('\n'); eol != std::string::npos; eol = lines.find('\n')) {
            json e = json::parse(lines.substr(0, eol), nullptr, false);
            lines.erase(0, eol + 1);
            if (!e.is_object())
                continue;
            std::string action = e.value("Action", e.value("status", ""));
            std::string id = e.value("id", "");
            if (id.empty() && e.contains("Actor") && e["Actor"].is_object())
                id = e["Actor"].value("ID", "");
            if (id.empty())
                continue;
            if (action == "start")
                container_up(id);
            else if (action == "die" || action == "stop" || action == "kill" ||
                     action == "destroy" || action == "remove" || action == "died" ||
                     action == "cleanup")
                container_gone(id);
        }
        if (ended)
            return;
    }
}

void ContainerWatcher::container_up(const std::string &id) {
    std::string why;
    auto c = get_json(engine_.socket, "/containers/" + id + "/json", &why);
    if (!c || !c->is_object())
        return; // gone already: its die event follows
    std::string name = c->value("Name", id.substr(0, 12));
    if (name.starts_with("/"))
        name.erase(0, 1);
    const json state = c->value("State", json::object());
    if (!state.value("Running", false))
        return;
    const json labels = c->contains("Config") && (*c)["Config"].is_object()
                            ? (*c)["Config"].value("Labels", json::object())
                            : json::object();
    auto want = want_of(labels, &why);
    {
        std::lock_guard l(mu_);
        if (!want) {
            if (!bad_labels_.contains(id.substr(0, 12)))
                log(fmt::format("container {} ({}): {}: nothing made for it", name,
                                id.substr(0, 12), why));
            bad_labels_[id.substr(0, 12)] = {name, why};
            return;
        }
        bad_labels_.erase(id.substr(0, 12));
        if (!want->in && !want->out && want->tmpl.empty())
            return; // not one of ours
    }
    // tricolor.policy alone: both directions, at the template's own rate and burst.
    json tmpl;
    if (!want->tmpl.empty()) {
        auto t = request_({{"cmd", "policy_show"}, {"name", want->tmpl}});
        if (t.value("ok", false))
            tmpl = t["policy"];
        if (tmpl.is_object() && !want->in && !want->out)
            want->in = want->out = LabelLimit{};
    }
    const std::string id12 = id.substr(0, 12);
    // Made already (an event after the list, or a daemon restarted): not twice.
    auto have = request_(
        {{"cmd", "policy_show"}, {"name", policy_name(engine_.kind, id, want->in.has_value())}});
    if (have.value("ok", false)) {
        std::lock_guard l(mu_);
        if (!made_.contains(id12))
            made_[id12] = {name, host_if_of(have["policy"].value("owner", ""))};
        return;
    }
    auto skip = [&](const std::string &w) {
        std::lock_guard l(mu_);
        if (skipped_[id12].second != w)
            log(fmt::format("container {} ({}): {}", name, id12, w));
        skipped_[id12] = {name, w};
    };
    const json hc = c->value("HostConfig", json::object());
    const int pid = state.value("Pid", 0);
    const std::string cgroup = pid > 0 ? own_cgroup(static_cast<pid_t>(pid), id) : "";
    // Its veths' host ends (eth0, eth1, ...: one a network) and its first network's address.
    std::vector<std::string> host_ifs;
    std::string ip;
    const bool host_network = hc.value("NetworkMode", "") == "host";
    if (host_network) {
        if (cgroup.empty()) {
            skip("on the host's network, and in no cgroup v2 cgroup of its own to match it by "
                 "(cgroup v1 alone?): nothing made");
            return;
        }
    } else {
        for (int i = 0; pid > 0 && i < 16; ++i) {
            std::string h = veth_peer_name(static_cast<pid_t>(pid), fmt::format("eth{}", i));
            if (h.empty())
                break;
            host_ifs.push_back(h);
        }
        const json ns = c->value("NetworkSettings", json::object());
        if (ns.contains("Networks") && ns["Networks"].is_object())
            for (const auto &[net, v] : ns["Networks"].items())
                if (ip.empty() && v.is_object() && !v.value("IPAddress", "").empty())
                    ip = v.value("IPAddress", "");
        if (ip.empty())
            ip = ns.value("IPAddress", "");
        if (host_ifs.empty() || ip.empty()) {
            skip(fmt::format("no {} found: nothing made",
                             host_ifs.empty() ? "host-side veth of its eth0" : "IPv4 address"));
            return;
        }
        // Several networks: one bucket a direction across them needs the cgroup; without one,
        // the first network alone (said in the log).
        if (host_ifs.size() > 1 && cgroup.empty()) {
            log(fmt::format("container {} ({}): on {} networks and in no cgroup v2 cgroup of its "
                            "own: limited on its first alone",
                            name, id.substr(0, 12), host_ifs.size()));
            host_ifs.resize(1);
        }
    }
    // By cgroup on the host's network or on several networks, else by address.
    const bool by_cgroup = host_network || host_ifs.size() > 1;
    std::string ifs;
    for (const auto &h : host_ifs)
        ifs += (ifs.empty() ? "" : ",") + h;
    if (!want->tmpl.empty() && !tmpl.is_object()) {
        skip(fmt::format("label tricolor.policy={}: tricolord has no policy '{}' (add it, then "
                         "restart the container)",
                         want->tmpl, want->tmpl));
        return;
    }
    // A template's meter and actions (tricolor.policy), or an srTCM committed bucket; a label's
    // rate and burst (the template's own without one).
    const json base =
        tmpl.is_object()
            ? template_base(tmpl)
            : json{{"algo", "srtcm"}, {"ebs", "0"}, {"shape", "sockets"}, {"aqm", "ecn"}};
    std::vector<json> policies;
    const std::string owner = owner_of(engine_.kind, name, ifs);
    for (bool in : {true, false})
        if (const auto &l = in ? want->in : want->out) {
            const std::string pn = policy_name(engine_.kind, id, in);
            policies.push_back(by_cgroup ? container_cgroup_policy(base, pn, in, cgroup, l->rate,
                                                                   l->burst, owner, engine_.kind)
                                         : container_policy(base, pn, in, ip, l->rate, l->burst,
                                                            owner, engine_.kind));
        }
    std::vector<std::string> done;
    auto undo = [&](const std::string &w) {
        for (const auto &n : done)
            request_({{"cmd", "policy_del"}, {"name", n}});
        for (const auto &h : host_ifs)
            for (const auto &r : container_detach(h))
                request_(r);
        skip(w);
    };
    for (const auto &p : policies) {
        auto r = request_({{"cmd", "policy_add"}, {"policy", p}});
        if (!r.value("ok", false))
            return undo(r.value("error", std::string("refused")));
        done.push_back(p["name"]);
    }
    for (const auto &h : host_ifs)
        for (const auto &req : container_attach(h, engine_.kind)) {
            auto r = request_(req);
            if (!r.value("ok", false))
                return undo(r.value("error", std::string("refused")));
        }
    std::lock_guard l(mu_);
    skipped_.erase(id12);
    made_[id12] = {name, ifs};
    made_total_++;
    auto say = [&](const char *dir, const std::optional<LabelLimit> &l) {
        if (!l)
            return std::string();
        return fmt::format(", {} {}", dir,
                           l->rate ? format_rate(l->rate) : "as policy " + want->tmpl);
    };
    log(fmt::format("container {} ({}): limited{}{} on {}{}", name, id12, say("egress", want->out),
                    say("ingress", want->in), ifs.empty() ? kHostNetwork : ifs,
                    by_cgroup ? ", by its cgroup " + cgroup : ""));
}

void ContainerWatcher::container_gone(const std::string &id) {
    const std::string id12 = id.substr(0, 12);
    Made m;
    {
        std::lock_guard l(mu_);
        bad_labels_.erase(id12);
        skipped_.erase(id12);
        auto it = made_.find(id12);
        if (it == made_.end())
            return;
        m = it->second;
        made_.erase(it);
        removed_total_++;
    }
    for (bool in : {true, false})
        request_({{"cmd", "policy_del"}, {"name", policy_name(engine_.kind, id12, in)}});
    for (const auto &h : split_ifs(m.host_if))
        for (const auto &r : container_detach(h))
            request_(r);
}

} // namespace tricolor
