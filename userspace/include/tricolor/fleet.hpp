// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fleet.hpp: fleet-wide limits through Redis (docs/spec.md §10). A fleet policy's committed bucket
// is shared by all hosts: each host leases a rate (its max-min fair share of CIR by demand) and a
// cap (its part of CBS) by running one atomic Lua script per exchange (userspace/src/fleet.lua);
// its data path's C earns at that rate, up to that cap, and nothing else (bpf/lib/fleet.h).
// See docs/fleet.md.
#pragma once

#include "tricolor/datapath.hpp"
#include "tricolor/units.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

struct redisContext;

namespace tricolor::fleet {

extern const char *const kScript; // fleet.lua, embedded at build time

struct RedisNode {
    std::string host;
    uint16_t port = 6379;
    std::string text() const; // HOST:PORT, [IPv6]:PORT
    auto operator<=>(const RedisNode &) const = default;
};
// The nodes to start from: one Redis, or any nodes of a Redis Cluster (the client learns the
// others from them).
struct RedisUrl {
    std::vector<RedisNode> nodes;
    std::string text() const; // as parsed
};
// "redis://HOST:PORT[,HOST:PORT...]" (HOST a name, an IPv4 address or [IPv6]; PORT optional,
// 6379).
Result<RedisUrl> parse_redis_url(std::string_view text);

// The Redis Cluster slot of a key (CRC16 of its hash tag, modulo 16384).
uint16_t key_slot(std::string_view key);

enum class Fallback { share, closed, open };
std::optional<Fallback> parse_fallback(std::string_view text);
std::string_view to_string(Fallback f);

// The keys of one policy's fleet bucket: one hash tag, so Redis Cluster keeps them together.
std::vector<std::string> keys_of(std::string_view policy);

// Rates in bit/s (packet/s in packet mode), sizes in bytes (packets), times in Redis's µs.
// This daemon's instance in the fleet: HOST:PID:RANDOM, made once per process (a reload keeps
// it, a restart makes another). Sent with every exchange beside the node name: a name is held by
// one live instance at a time (fleet.lua, "Names").
const std::string &instance_id();

struct Request {
    std::string policy, node;
    std::string instance = instance_id();
    uint64_t cir = 0, cbs = 0;
    uint64_t run_rate = 0, run_cap = 0; // the lease this node runs now
    uint64_t run_epoch = 0;             // the fleet state that gave it (0: none, or a fallback's)
    uint64_t demand = 0;                // offered, all colours
    uint64_t ttl_us = 1000000;
    uint64_t settle_us = 150000; // a new state settles this long (leases of before may run)
    uint64_t level_us = 50000;   // the fair shares are computed anew at most this often
};
struct Reply {
    uint64_t rate = 0, cap = 0; // the lease
    uint64_t hosts = 0, cir = 0, cbs = 0, now_us = 0;
    bool mismatch = false;
    uint64_t epoch = 0;  // the state's birth time: leases from another epoch are not its own
    uint64_t fair = 0;   // this node's max-min fair share of CIR by demand
    uint64_t leased = 0; // the rates all hosts are counted at, this one's new lease included
    bool older = false;  // hosts of the token-grant version exchanged within a lease
    // A replica of the node that ran the exchange holds it (WAIT), or the node has none we
    // know of: a failover cannot lose the lease. When false, the host takes no raise from it.
    bool replicated = true;
    // Refused: another live instance (@holder) holds the node name; the lease is nothing and
    // Redis wrote nothing of this host.
    bool held = false;
    std::string holder;
};

// Synchronous, every call bounded by its timeout. To one Redis, or to a Redis Cluster (found
// out from the first node that answers: CLUSTER SLOTS): there each exchange goes to the master
// of its policy's slot, follows MOVED and ASK (a few hops, then it is an error), and after a
// failed one, or 5 s after it was read, the slot map is read again (after a failure a single
// Redis is looked for again among the URL's nodes). After any error the connection is dropped:
// a late reply can never be applied. (userspace/src/fleet_redis.cpp)
class Client {
  public:
    Client(RedisUrl url, std::chrono::milliseconds timeout);
    ~Client();
    Client(const Client &) = delete;
    Client &operator=(const Client &) = delete;
    Result<Reply> exchange(const Request &r);
    bool connected() const { return !conns_.empty(); }
    void disconnect(); // every connection; the next exchange starts from the URL's nodes
    bool cluster() const { return mode_ == Mode::cluster; }
    // The node the policy's exchanges go to ("" until known).
    std::string node_of(std::string_view policy) const;

  private:
    struct Conn;
    enum class Mode { unknown, single, cluster };
    struct Range {
        uint16_t first = 0, last = 0;
        RedisNode master;
        size_t replicas = 0;
    };
    Result<Conn *> conn(const RedisNode &n, bool script);
    void drop(const RedisNode &n);
    Result<void> discover();
    Result<void> read_slots(Conn &c, const RedisNode &from);
    const Range *range_of(uint16_t slot) const;
    RedisUrl url_;
    std::chrono::milliseconds timeout_;
    std::map<RedisNode, std::unique_ptr<Conn>> conns_;
    Mode mode_ = Mode::unknown;
    RedisNode single_;          // Mode::single: the node
    std::vector<Range> ranges_; // Mode::cluster: who serves which slots
    std::chrono::steady_clock::time_point mapped_at_;
    std::string undiscovered_; // why the last discovery found no node ("" it did)
    std::chrono::steady_clock::time_point undiscovered_at_;
};

struct AgentOptions {
    RedisUrl url;
    std::string node;
    Fallback fallback = Fallback::share;
    std::chrono::milliseconds period{50};   // one exchange per policy per period
    std::chrono::milliseconds lease{1000};  // a host silent this long holds nothing
    std::chrono::milliseconds timeout{100}; // per Redis call
};

// Runs the exchanges of every fleet policy on its own thread.
class Agent {
  public:
    Agent(AgentOptions o, Datapath &dp);
    ~Agent();
    void set_policies(const std::vector<Policy> &policies); // keeps the fleet ones
    nlohmann::json status() const;                          // daemon-wide and per policy
    nlohmann::json policy_status(const std::string &name) const;
    struct Totals {
        uint64_t exchanges = 0, failures = 0, fallbacks = 0, recoveries = 0, mismatches = 0;
        uint64_t collisions = 0; // refusals of the node name that began (one per episode)
        bool fallback = false;
        std::string held_by; // while any policy is refused: the instance holding the name
    };
    Totals totals() const;
    // The exchanges that are due now (the thread's loop); returns when the next one is due
    // (CLOCK_MONOTONIC ns).
    uint64_t tick();
    // Holds off exchanges (and so the agent's writes to the leases) while the caller changes
    // the policy set: the data path's lease words have one writer at a time.
    std::unique_lock<std::mutex> hold() { return std::unique_lock(mu_); }

  private:
    struct State;
    void run();
    void enter_fallback(State &s, const std::string &name, const std::string &why);
    // The fallback @s runs when Redis does not answer: --fleet-fallback's, but closed while
    // another daemon holds our node name (its holder may run one of its own).
    Fallback fallback_of(const State &s) const;
    std::optional<Reply> exchange(State &s, const std::string &name, uint64_t lease_ns,
                                  uint64_t revoke_after_ns, uint64_t period_ns);
    void log(const std::string &line);
    AgentOptions o_;
    Datapath &dp_;
    Client client_;
    mutable std::mutex mu_;
    std::map<std::string, std::unique_ptr<State>> states_;
    Totals totals_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

} // namespace tricolor::fleet
