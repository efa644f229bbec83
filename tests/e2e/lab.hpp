// lab.hpp: what the end-to-end tests stand on. A Lab is a network namespace joined to the root
// namespace by a veth pair, with addresses from 198.18.0.0/15 and 2001:db8::/32; a Daemon is a
// real tricolord with its own socket, config and pin directory. Both clean up after themselves.
#pragma once

#include "test_util.hpp"

#include <string>
#include <vector>

namespace tricolor::test {

class Lab {
  public:
    Lab();
    ~Lab();
    Lab(const Lab &) = delete;
    Lab &operator=(const Lab &) = delete;

    // Runs @argv inside the namespace.
    RunResult in_ns(std::vector<std::string> argv) const;

    std::string ns;      // the namespace (the "sender")
    std::string host_if; // veth end in the root namespace, where tricolor attaches
    std::string ns_if;
    std::string host_v4, ns_v4, host_v6, ns_v6;
};

class Daemon {
  public:
    explicit Daemon(std::string name, std::vector<std::string> extra_flags = {});
    ~Daemon();
    Daemon(const Daemon &) = delete;
    Daemon &operator=(const Daemon &) = delete;

    void start(); // and wait until the socket answers
    void kill9();
    void terminate(); // SIGTERM, wait
    void hup();       // SIGHUP: reload the config
    RunResult ctl(std::vector<std::string> args) const;
    std::string socket() const { return dir_ + "/sock"; }
    std::string config() const { return dir_ + "/tricolor.yaml"; }
    std::string state() const { return dir_ + "/state.yaml"; }
    std::string dir() const { return dir_; }
    int pid() const { return pid_; }
    std::string pin_dir() const { return pin_dir_; }
    std::string log() const;

  private:
    std::string dir_, pin_dir_;
    std::vector<std::string> extra_;
    int pid_ = -1;
};

// Where the test binaries are.
std::string tricolord_path();
std::string tricolorctl_path();
std::string udp_tool_path();

} // namespace tricolor::test
