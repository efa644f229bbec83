// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
#include "redis_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

namespace tricolor::test {

uint16_t free_loopback_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    uint16_t port = 0;
    if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

bool RedisServer::available() {
    return std::filesystem::exists("/usr/bin/redis-server");
}

RedisServer::RedisServer(std::string bind, std::string netns, uint16_t port)
    : bind_(std::move(bind)), netns_(std::move(netns)), port_(port ? port : free_loopback_port()) {}

RedisServer::~RedisServer() {
    stop();
}

std::string RedisServer::url() const {
    return "redis://" + (bind_.find(':') != std::string::npos ? "[" + bind_ + "]" : bind_) + ":" +
           std::to_string(port_);
}

bool RedisServer::start() {
    if (pid_ > 0 || !available())
        return pid_ > 0;
    std::vector<std::string> args;
    if (!netns_.empty())
        args = {"/usr/bin/ip", "netns", "exec", netns_};
    std::vector<std::string> redis = {"/usr/bin/redis-server",
                                      "--port",
                                      std::to_string(port_),
                                      "--bind",
                                      bind_,
                                      "--save",
                                      "",
                                      "--appendonly",
                                      "no",
                                      "--protected-mode",
                                      "no",
                                      "--daemonize",
                                      "no",
                                      "--loglevel",
                                      "warning",
                                      "--dir",
                                      "/tmp"};
    args.insert(args.end(), redis.begin(), redis.end());
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::fflush(nullptr); // the child must not write out the parent's buffered output again
    pid_ = fork();
    if (pid_ == 0) {
        std::vector<char *> argv;
        for (auto &a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        freopen("/dev/null", "w", stdout);
        execv(argv[0], argv.data());
        _exit(127);
    }
    // Bounded wait until it answers PING; at once when it exited (its port taken meanwhile).
    for (int i = 0; i < 200; ++i) {
        if (cli({"PING"}).find("PONG") != std::string::npos)
            return true;
        int st = 0;
        if (waitpid(pid_, &st, WNOHANG) == pid_) {
            pid_ = -1;
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    stop();
    return false;
}

void RedisServer::stop() {
    if (pid_ <= 0)
        return;
    kill(pid_, SIGKILL); // "Redis down" means gone at once, nothing saved
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
}

std::string RedisServer::cli(const std::vector<std::string> &args) const {
    std::string cmd;
    if (!netns_.empty())
        cmd = "ip netns exec " + netns_ + " ";
    cmd += "redis-cli -h " + bind_ + " -p " + std::to_string(port_);
    for (const auto &a : args)
        cmd += " '" + a + "'";
    cmd += " 2>&1";
    std::string out;
    if (FILE *f = popen(cmd.c_str(), "r")) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
            out.append(buf, n);
        pclose(f);
    }
    return out;
}

// ---- cluster ------------------------------------------------------------------------------

RedisCluster::RedisCluster(int masters, int replicas, int node_timeout_ms, std::string bind,
                           std::string netns)
    : bind_(std::move(bind)), netns_(std::move(netns)), masters_(masters), replicas_(replicas),
      node_timeout_ms_(node_timeout_ms) {
    for (int i = 0; i < masters * (1 + replicas); ++i)
        nodes_.push_back(make_node());
}

// A node on two free ports: the clients' and the cluster bus's (cluster-port, Redis 7). Free
// when asked, which another test running beside may also be told: start() tries again with new
// ones when a node exits at once.
std::unique_ptr<RedisServer> RedisCluster::make_node() {
    uint16_t port = free_loopback_port(), bus = 0;
    do
        bus = free_loopback_port();
    while (bus == port);
    auto n = std::make_unique<RedisServer>(bind_, netns_, port);
    std::string conf = "/tmp/tricolor-redis-nodes-" + std::to_string(getpid()) + "-" +
                       std::to_string(port) + ".conf";
    std::filesystem::remove(conf); // a node with an old config would join an old cluster
    confs_.push_back(conf);
    // A replica's first sync at once, not after diskless sync's 5 s wait for more replicas;
    // and its offset moves within a second, not ten (CLUSTER SLOTS lists a replica once it
    // has an offset, and an idle master's offset moves only with its pings to replicas).
    n->extra_args = {"--cluster-enabled",
                     "yes",
                     "--cluster-config-file",
                     conf,
                     "--cluster-port",
                     std::to_string(bus),
                     "--cluster-node-timeout",
                     std::to_string(node_timeout_ms_),
                     "--repl-diskless-sync-delay",
                     "0",
                     "--repl-ping-replica-period",
                     "1"};
    return n;
}

RedisCluster::~RedisCluster() {
    nodes_.clear();
    for (const auto &c : confs_)
        std::filesystem::remove(c);
}

std::string RedisCluster::url() const {
    std::string out = "redis://";
    for (int i = 0; i < masters_; ++i)
        out += (i ? "," : "") + nodes_[i]->url().substr(8);
    return out;
}

std::string RedisCluster::any_cli(const std::vector<std::string> &args) const {
    for (const auto &n : nodes_)
        if (n->pid() > 0)
            return n->cli(args);
    return "";
}

int RedisCluster::index_of(const std::string &addr) const {
    auto colon = addr.rfind(':');
    auto at = addr.find('@');
    if (colon == std::string::npos)
        return -1;
    int port = std::atoi(addr.substr(colon + 1, at - colon - 1).c_str());
    for (size_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i]->port() == port)
            return static_cast<int>(i);
    return -1;
}

bool RedisCluster::start() {
    for (auto &n : nodes_) {
        int tries = 0;
        while (!n->start()) {
            if (++tries == 5) {
                why_ = "a redis-server of the cluster did not start";
                return false;
            }
            n = make_node();
        }
    }
    std::vector<std::string> create = {"--cluster", "create"};
    for (auto &n : nodes_)
        create.push_back(n->bind() + ":" + std::to_string(n->port()));
    create.insert(create.end(), {"--cluster-replicas", std::to_string(replicas_), "--cluster-yes"});
    std::string out = nodes_[0]->cli(create);
    if (out.find("[OK] All 16384 slots covered") == std::string::npos) {
        why_ = "redis-cli --cluster create: " + out;
        return false;
    }
    if (!wait_ok(10000)) {
        why_ = "the cluster did not come up: " + any_cli({"CLUSTER", "INFO"});
        return false;
    }
    // And every replica holds its master's data: every node lists all of them in its slot map
    // (CLUSTER SLOTS leaves out a replica until it has synced; a client reading the map sooner
    // would see masters without replicas).
    // A deadline, not a count of tries: each try runs a redis-cli per node, which a loaded
    // machine (a build beside the suite) slows more than the sync itself.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
        size_t listed = nodes_.size();
        for (auto &n : nodes_) {
            std::istringstream lines(n->cli({"CLUSTER", "SLOTS"}));
            size_t ids = 0;
            for (std::string line; std::getline(lines, line);)
                ids += line.size() == 40 &&
                       line.find_first_not_of("0123456789abcdef") == std::string::npos;
            listed = std::min(listed, ids);
        }
        if (listed == nodes_.size())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    why_ = "the replicas did not sync with their masters: " + any_cli({"CLUSTER", "NODES"});
    return false;
}

bool RedisCluster::wait_ok(int timeout_ms) const {
    for (int waited = 0; waited < timeout_ms; waited += 25) {
        bool ok = true;
        for (const auto &n : nodes_)
            if (n->pid() > 0 &&
                n->cli({"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos)
                ok = false;
        if (ok)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
}

uint16_t RedisCluster::slot(const std::string &key) const {
    return static_cast<uint16_t>(std::atoi(any_cli({"CLUSTER", "KEYSLOT", key}).c_str()));
}

// CLUSTER NODES: "<id> <ip:port@bus> <flags> <master id|-> <ping> <pong> <epoch> <link>
// [<slot>|<first>-<last>]...".
int RedisCluster::master_of(const std::string &key) const {
    const int s = slot(key);
    std::istringstream lines(any_cli({"CLUSTER", "NODES"}));
    for (std::string line; std::getline(lines, line);) {
        std::istringstream f(line);
        std::string id, addr, flags, master, ping, pong, epoch, link, range;
        f >> id >> addr >> flags >> master >> ping >> pong >> epoch >> link;
        if (flags.find("master") == std::string::npos || flags.find("fail") != std::string::npos)
            continue;
        while (f >> range) {
            auto dash = range.find('-');
            int first = std::atoi(range.c_str());
            int last = dash == std::string::npos ? first : std::atoi(range.c_str() + dash + 1);
            if (s >= first && s <= last)
                return index_of(addr);
        }
    }
    return -1;
}

int RedisCluster::replica_of(int master) const {
    std::istringstream lines(any_cli({"CLUSTER", "NODES"}));
    std::string master_id;
    std::vector<std::pair<std::string, std::string>> replicas; // (master id, addr)
    for (std::string line; std::getline(lines, line);) {
        std::istringstream f(line);
        std::string id, addr, flags, of;
        f >> id >> addr >> flags >> of;
        if (index_of(addr) == master)
            master_id = id;
        if (flags.find("slave") != std::string::npos && flags.find("fail") == std::string::npos)
            replicas.emplace_back(of, addr);
    }
    for (const auto &[of, addr] : replicas)
        if (of == master_id)
            return index_of(addr);
    return -1;
}

bool RedisCluster::is_master(int i) const {
    return nodes_[i]->pid() > 0 && nodes_[i]->cli({"ROLE"}).starts_with("master");
}

} // namespace tricolor::test
