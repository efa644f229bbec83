// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// redis_server.hpp: a real redis-server for a test, on a free port of a loopback (or test
// namespace) address, stopped (SIGKILL-free: SIGTERM, then waited for) when the object goes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>

namespace tricolor::test {

class RedisServer {
  public:
    // @netns: run inside this network namespace ("" for the caller's); @bind: the address.
    explicit RedisServer(std::string bind = "127.0.0.1", std::string netns = "", uint16_t port = 0);
    ~RedisServer();
    RedisServer(const RedisServer &) = delete;
    RedisServer &operator=(const RedisServer &) = delete;
    bool start(); // false: redis-server is missing or never answered
    void stop();  // kill it (the test of "Redis down"); start() brings it back, empty
    uint16_t port() const { return port_; }
    const std::string &bind() const { return bind_; }
    std::string url() const;
    std::vector<std::string> extra_args; // more redis-server options, for start()
    pid_t pid() const { return pid_; }
    static bool available(); // redis-server is installed
    // Runs redis-cli against it; returns its output.
    std::string cli(const std::vector<std::string> &args) const;

  private:
    std::string bind_, netns_;
    uint16_t port_ = 0;
    pid_t pid_ = -1;
};

uint16_t free_loopback_port();

// A real Redis Cluster: @masters masters with @replicas replicas each, made by redis-cli
// --cluster create, cluster-node-timeout @node_timeout_ms (a failover takes about twice that).
class RedisCluster {
  public:
    RedisCluster(int masters, int replicas, int node_timeout_ms = 500,
                 std::string bind = "127.0.0.1", std::string netns = "");
    ~RedisCluster(); // every node stopped, their cluster config files removed
    bool start();    // false: a node did not start or the cluster did not form (see why())
    const std::string &why() const { return why_; }
    std::string url() const; // redis://every master's address
    size_t size() const { return nodes_.size(); }
    RedisServer &node(size_t i) { return *nodes_[i]; }
    uint16_t slot(const std::string &key) const; // CLUSTER KEYSLOT
    // The node serving @key's slot as master now (by a running node's CLUSTER NODES), -1: none.
    int master_of(const std::string &key) const;
    int replica_of(int master) const; // a replica of that master, -1: none
    bool is_master(int i) const;      // by its own ROLE
    // Until every running node says cluster_state:ok and every master's slot map agrees.
    bool wait_ok(int timeout_ms) const;

  private:
    std::string any_cli(const std::vector<std::string> &args) const; // of a running node
    int index_of(const std::string &addr) const;                     // "ip:port@bus" -> node
    std::unique_ptr<RedisServer> make_node();
    std::string bind_, netns_;
    std::vector<std::unique_ptr<RedisServer>> nodes_;
    std::vector<std::string> confs_;
    int masters_, replicas_, node_timeout_ms_;
    std::string why_;
};

} // namespace tricolor::test
