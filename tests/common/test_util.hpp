// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// test_util.hpp: helpers shared by the test suites: the conformance vectors, running a command
// with captured output, and the privilege check for tests that load BPF programs.
#pragma once

#include "tricolor/meter.hpp"
#include "tricolor/policy.hpp"
#include "tricolor/replay.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>

#include <cstdint>
#include <string>
#include <vector>

namespace tricolor::test {

std::string read_file(const std::string &path);
// Writes @text to @path, replacing what was there.
void write_file(const std::string &path, const std::string &text);

struct Vector {
    std::string name;
    std::vector<std::string> args; // the replay flags, split on white space
    std::string trace_path;
    std::string expected; // the whole expected output
};
// Every NAME.args in tests/vectors, sorted by name.
std::vector<Vector> load_vectors();
// The meter a vector's replay flags give, read as `tricolorctl replay` reads them.
MeterParams meter_from_args(const std::vector<std::string> &args);

// Replays vector @v through the engine @make builds from its meter; the output text.
std::string
replay_vector(const Vector &v,
              const std::function<std::unique_ptr<ReplayEngine>(const MeterParams &)> &make);

// to_policy refuses @base with each patch applied, its message naming what the case says.
struct Refusal {
    nlohmann::json patch;
    std::string says;
};
void expect_each_refused(const nlohmann::json &base, const std::vector<Refusal> &cases);

// A run of tests/vectors/reference.py, the exact rational model (--states NAME, --case SEED):
// the meter's flags, and each packet with the model's colour and buckets after it.
struct ReferenceRun {
    std::vector<std::string> args;
    struct Step {
        uint64_t time_ns;
        uint32_t bytes;
        Color in, out;
        unsigned __int128 c_num, c_den, e_num, e_den; // tokens, N/D in lowest terms
    };
    std::vector<Step> steps;
};
ReferenceRun reference_run(const std::vector<std::string> &how);
// Whether a bucket of @tokens and @rem / @k2 of a token holds exactly @num / @den tokens.
bool same_tokens(uint64_t tokens, uint32_t rem, uint32_t k2, unsigned __int128 num,
                 unsigned __int128 den);

// Parameters with the second bucket each algorithm has: trtcm P (@second_rate, @second_size),
// rfc4115 E (EIR @second_rate, EBS @second_size), srtcm E (EBS @second_size; the rate is CIR's).
MeterParams meter_params(Algo algo, uint64_t cir, uint64_t cbs, uint64_t second_rate,
                         uint64_t second_size);

// The tests' one policy builder: @id named @name, matching everything with one aggregate bucket;
// @algo at @cir bit/s with a @cbs-byte committed bucket and a second bucket of @second bytes
// (meter_params) at @second_rate, by default twice CIR for a peak bucket and CIR for another.
// A test sets what else it needs on the result.
Policy policy(uint32_t id, std::string name, Algo algo = Algo::srtcm, uint64_t cir = 8000000,
              uint64_t cbs = 3000, uint64_t second = 3000,
              std::optional<uint64_t> second_rate = std::nullopt);

struct RunResult {
    int exit_code = -1;
    std::string out;
    std::string err;
};
// Runs argv[0] with @input on stdin; waits for it.
RunResult run_command(const std::vector<std::string> &argv, const std::string &input = "");
// Starts @argv in a session of its own (a server the test stops: SIGTERM, waitpid), its stdout
// and stderr appended to @log; returns its pid.
int spawn(const std::vector<std::string> &argv, const std::string &log);

bool is_root();

// Runs the program @prog_fd @repeat times on @frame from two threads pinned to CPUs 0 and 1,
// released together: two CPUs metering one flow at once.
void run_on_two_cpus(int prog_fd, const std::vector<uint8_t> &frame, int repeat);

// An fd of the map named @name among those program @prog_fd uses, -1 if none: found through the
// program's own map ids, since other tests may have programs loaded at the same time with maps
// of the same name. The caller closes it.
int map_of_prog(int prog_fd, const std::string &name);

// Empty when equal; otherwise the first differing line of each, numbered, so a failing vector
// points at its packet instead of printing two whole outputs.
std::string first_difference(const std::string &actual, const std::string &expected);

// How much longer than here waits may take: TRICOLOR_TIME_SCALE (default 1). The kernel
// matrix sets it, since a guest under QEMU's TCG loads and verifies programs ~10x slower.
double time_scale();

// A cgroup made for a test below the cgroup2 mount (its parents too), removed at the end with the
// cgroups below it; whoever was moved in must have left or exited by then.
class TestCgroup {
  public:
    explicit TestCgroup(std::string path); // below the mount; throws if it cannot be made
    ~TestCgroup();
    TestCgroup(const TestCgroup &) = delete;
    TestCgroup &operator=(const TestCgroup &) = delete;
    void add(int pid) const; // moves the process (all its threads) in
    std::string path;        // below the mount
    std::string dir;         // absolute
    uint64_t id = 0;         // the cgroup id BPF sees
};

// This process inside cgroup @c while the object lives, back where it was afterwards. (The
// sockets BPF_PROG_TEST_RUN makes for tc belong to the cgroup of the process that runs it.)
class InCgroup {
  public:
    explicit InCgroup(const TestCgroup &c);
    ~InCgroup();
    InCgroup(const InCgroup &) = delete;
    InCgroup &operator=(const InCgroup &) = delete;

  private:
    std::string back_;
};

// Where cgroup v2 is mounted, "" if nowhere.
std::string cgroup2_mount_or_empty();

} // namespace tricolor::test

// Tests that load BPF programs need root (or CAP_BPF); without it they are skipped, not failed.
#define TRICOLOR_REQUIRE_ROOT()                                                                    \
    do {                                                                                           \
        if (!::tricolor::test::is_root())                                                          \
            GTEST_SKIP() << "needs root to load BPF programs";                                     \
    } while (0)
