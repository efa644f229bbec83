// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// redis_server.hpp: a real redis-server for a test, on a free port of a loopback (or test
// namespace) address, stopped (SIGKILL-free: SIGTERM, then waited for) when the object goes.
#pragma once

#include <cstdint>
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
    std::string url() const;
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

} // namespace tricolor::test
