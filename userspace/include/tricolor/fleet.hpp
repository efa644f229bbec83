// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fleet.hpp: fleet-wide limits through Redis (docs/spec.md §10). A fleet policy's committed bucket
// is one bucket for all hosts, kept in Redis; each host leases chunks of it by running one atomic
// Lua script per exchange (userspace/src/fleet.lua) and grants them to its data path, which
// spends nothing else (bpf/lib/fleet.h). See docs/fleet.md.
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

// Redis units: 10^-6 bit (10^-6 packet); a data-path token is 10^-3 unit.
constexpr uint64_t kTokensPerUnit = 1000;
constexpr uint64_t kUnitsPerByte = 8000000, kUnitsPerPacket = 1000000;

extern const char *const kScript; // fleet.lua, embedded at build time

struct RedisUrl {
    std::string host;
    uint16_t port = 6379;
};
// "redis://HOST:PORT" (HOST a name, an IPv4 address or [IPv6]; PORT optional, 6379).
Result<RedisUrl> parse_redis_url(std::string_view text);

enum class Fallback { share, closed, open };
std::optional<Fallback> parse_fallback(std::string_view text);
std::string_view to_string(Fallback f);

// The keys of one policy's fleet bucket: one hash tag, so Redis Cluster keeps them together.
std::vector<std::string> keys_of(std::string_view policy);

struct Request {
    std::string policy, node;
    uint64_t cir = 0;    // bit/s (packet/s)
    uint64_t cbs = 0;    // units
    uint64_t report = 0; // units this node may still spend (rounded up)
    uint64_t want = 0;   // units
    uint64_t ttl_us = 1000000;
    bool reset = false;
};
struct Reply {
    uint64_t grant = 0, tokens = 0, out = 0, hosts = 0, cir = 0, cbs = 0, now_us = 0;
    bool mismatch = false;
};

// One connection, synchronous, every call bounded by its timeout. After any error the
// connection is dropped: a late reply can never be applied.
class Client {
  public:
    Client(RedisUrl url, std::chrono::milliseconds timeout);
    ~Client();
    Client(const Client &) = delete;
    Client &operator=(const Client &) = delete;
    Result<Reply> exchange(const Request &r);
    bool connected() const { return ctx_ != nullptr; }
    void disconnect();

  private:
    Result<void> connect();
    RedisUrl url_;
    std::chrono::milliseconds timeout_;
    redisContext *ctx_ = nullptr;
    std::string sha_;
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
        bool fallback = false;
    };
    Totals totals() const;
    // One round of exchanges now (the thread does this every period).
    void tick();
    // Holds off exchanges (and so the agent's writes to the grants) while the caller changes
    // the policy set: the data path's grant words have one writer at a time.
    std::unique_lock<std::mutex> hold() { return std::unique_lock(mu_); }

  private:
    struct State;
    void run();
    void enter_fallback(State &s, const std::string &name, const std::string &why);
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
