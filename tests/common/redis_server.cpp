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
    // Bounded wait until it answers PING.
    for (int i = 0; i < 200; ++i) {
        if (cli({"PING"}).find("PONG") != std::string::npos)
            return true;
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

} // namespace tricolor::test
