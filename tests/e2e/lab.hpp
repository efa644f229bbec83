// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// lab.hpp: what the end-to-end tests stand on. A Lab is a network namespace joined to the root
// namespace by a veth pair, with addresses from 198.18.0.0/15 and 2001:db8::/32; a Daemon is a
// real tricolord with its own socket, config and pin directory. Both clean up after themselves.
#pragma once

#include "test_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <sys/types.h>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tricolor::test {

// A command's standard output as JSON; a test failure (and a discarded value) if it is not.
inline nlohmann::json parse_json(const RunResult &r) {
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded())
        ADD_FAILURE() << "not JSON: " << r.out << r.err;
    return j;
}

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

// Starts @argv (tricolord, or what runs it: setpriv) with its output appended to @log, and
// returns its pid once it answers on @socket; throws, with the log, when it exits first or
// does not answer (then it is killed).
pid_t start_daemon_process(std::vector<std::string> argv, const std::string &log,
                           const std::string &socket);

class Daemon {
  public:
    explicit Daemon(std::string name, std::vector<std::string> extra_flags = {});
    ~Daemon();
    Daemon(const Daemon &) = delete;
    Daemon &operator=(const Daemon &) = delete;

    void start(); // and wait until the socket answers
    // Flags of its own for the next start(), in place of those it was made with.
    void set_flags(std::vector<std::string> extra_flags) { extra_ = std::move(extra_flags); }
    void kill9();
    void terminate(); // SIGTERM, wait
    void hup();       // SIGHUP: reload the config
    RunResult ctl(std::vector<std::string> args) const;
    std::string socket() const { return dir_ + "/sock"; }
    std::string config() const { return dir_ + "/tricolor.yaml"; }
    std::string state() const { return dir_ + "/state.yaml"; }
    // Waits (up to 5 s, times TRICOLOR_TIME_SCALE) until the daemon has folded its state journal
    // into the state file, which it does once changes pause; then state() holds every change.
    void settle_state() const;
    std::string dir() const { return dir_; }
    int pid() const { return pid_; }
    std::string pin_dir() const { return pin_dir_; }
    std::string log() const;

  private:
    std::string dir_, pin_dir_;
    std::vector<std::string> extra_;
    int pid_ = -1;
};

// ---- what the accuracy bounds are computed from ------------------------------------------------

// CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns reads, so the data path's time.
uint64_t monotonic_ns();

// udp_tool send's STAMPS file: for each datagram sent, the monotonic time before and after its
// sendto.
struct SendStamp {
    uint64_t start, end;
};
std::vector<SendStamp> read_send_stamps(const std::string &path);

// The fewest packets a token bucket (@burst bytes, @rate bit/s, starting full at the first
// packet) must have admitted from a stream of equal packets of @len metered bytes, given that
// packet i was metered at some instant in [start_i, end_i] (@stamps sorted by start; from one
// sender, that is send order, from several, interleaved). Zero if a premise
// fails (no packets, or a packet larger than the bucket).
//
// Why it is a floor: with equal packets, a meter that admits every packet its bucket can pay for
// (greedy, as meter_mark does on C, or on P for trtcm's green+yellow) admits at least as many
// as any other choice of packets that fits the bucket. So it
// suffices to exhibit one subset that fits whatever the metering instants were. (Invariant, packet
// by packet against any other choice: greedy's count is at least the other's, and so is its
// count*len + tokens; where the other admits and greedy cannot, greedy holds < len tokens, so it
// must already be a packet ahead.) This function
// builds it greedily under the least favourable instants: between two chosen packets a < b the
// bucket is credited only rate*(start_b - end_a) <= rate*(m_b - m_a). Everything the window
// cannot pin down (where in its send call each packet was metered) is charged against the
// floor, and nothing else: no tolerance is tuned. A meter crediting 96% of the rate, or
// colouring green packets anything else, falls below it.
uint64_t admission_floor(const std::vector<SendStamp> &stamps, uint64_t rate_bps,
                         uint64_t burst_bytes, uint64_t len_bytes);

// The aggregate bucket state of the only started policy under a daemon's pin directory: the
// time of the newest packet it metered (ns, monotonic). Nullopt if none was found.
std::optional<uint64_t> last_metered_ns(const std::string &pin_dir);

// Where the test binaries are.
// GET /metrics from the daemon's Prometheus endpoint at @address (HOST:PORT, as `status`
// gives it) over a plain socket: the whole reply, headers first; "" if nothing answers.
std::string scrape_metrics(const std::string &address);

std::string tricolord_path();
std::string tricolorctl_path();
std::string udp_tool_path();
// CLOCK_MONOTONIC in ns: what the data path's clock reads.
uint64_t mono_ns();

// The fixture most end-to-end tests share: a veth lab and a daemon named after the test,
// the daemon's log printed when the test failed, and ok() for a CLI call that must succeed.
class DaemonLabTest : public ::testing::Test {
  protected:
    void SetUp() override {
        TRICOLOR_REQUIRE_ROOT();
        lab = std::make_unique<Lab>();
        daemon = std::make_unique<Daemon>(
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    }
    void TearDown() override {
        if (HasFailure() && daemon)
            std::cerr << "daemon log:\n" << daemon->log();
        daemon.reset();
        lab.reset();
    }
    RunResult ok(std::vector<std::string> args) {
        auto r = daemon->ctl(args);
        EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
        return r;
    }

    std::unique_ptr<Lab> lab;
    std::unique_ptr<Daemon> daemon;
};

} // namespace tricolor::test
