// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolord run as a user of its own with only the capabilities the kernel checks for what it
// does (docs/daemon.md, "Least privilege"): CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON, nothing
// else, held as ambient capabilities (as systemd's AmbientCapabilities= gives them). Everything
// it does must work so: the data path loaded and pinned, XDP and tc attached, a restart that
// adopts what an earlier daemon left (known by the ids of its pinned programs: the kernel names
// another process's program only to CAP_SYS_ADMIN), detach, flows --top from the heavy hitters,
// status; and each capability missing is named.
#include "lab.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

constexpr const char *kUser = "tricolor-e2e";
constexpr const char *kReader = "tricolor-e2e-rd"; // a member of the socket's group, no caps
constexpr const char *kGroup = "tricolor-e2e-sock";

class LeastPrivilege : public ::testing::Test {
  protected:
    void SetUp() override {
        TRICOLOR_REQUIRE_ROOT();
        if (run_command({"/usr/bin/setpriv", "--version"}).exit_code != 0)
            GTEST_SKIP() << "needs setpriv (util-linux)";
        run_command({"/usr/sbin/groupadd", "-r", kGroup});
        run_command(
            {"/usr/sbin/useradd", "-r", "-M", "-s", "/usr/sbin/nologin", "-G", kGroup, kUser});
        run_command(
            {"/usr/sbin/useradd", "-r", "-M", "-s", "/usr/sbin/nologin", "-G", kGroup, kReader});
        passwd *pw = getpwnam(kUser);
        ASSERT_NE(pw, nullptr) << "useradd " << kUser << " failed";
        uid_ = pw->pw_uid;
        gid_ = pw->pw_gid;
        lab = std::make_unique<Lab>();
        dir_ = fmt::format("/tmp/tricolor-e2e-priv-{}", getpid());
        fs::remove_all(dir_);
        fs::create_directories(dir_ + "/bpf");
        // A bpffs of the test's own, open to be traversed: /sys/fs/bpf is root's alone (0700),
        // where the unit's pre-start step makes the pin directory instead.
        ASSERT_EQ(mount("bpf", (dir_ + "/bpf").c_str(), "bpf", 0, "mode=0755"), 0);
        fs::create_directories(pin_dir());
        ASSERT_EQ(chown(dir_.c_str(), uid_, gid_), 0);
        ASSERT_EQ(chown(pin_dir().c_str(), uid_, gid_), 0);
    }
    void TearDown() override {
        if (HasFailure())
            std::cerr << "daemon log:\n" << log();
        stop();
        umount2((dir_ + "/bpf").c_str(), MNT_DETACH);
        fs::remove_all(dir_);
        lab.reset();
    }

    std::string pin_dir() const { return dir_ + "/bpf/pins"; }
    std::string socket() const { return dir_ + "/sock"; }
    std::string log() const { return read_file(dir_ + "/log"); }

    // setpriv's way to a user of its own with @caps ("bpf,+net_admin") and nothing else.
    static std::vector<std::string> as_user(const char *user, const std::string &caps) {
        std::vector<std::string> a = {"/usr/bin/setpriv", fmt::format("--reuid={}", user),
                                      fmt::format("--regid={}", user), "--init-groups"};
        std::string set = caps.empty() ? "-all" : "-all,+" + caps;
        for (const char *what : {"--inh-caps", "--ambient-caps", "--bounding-set"})
            a.push_back(fmt::format("{}={}", what, set));
        return a;
    }
    std::vector<std::string> daemon_argv(const std::string &caps,
                                         std::vector<std::string> extra = {}) const {
        auto a = as_user(kUser, caps);
        for (std::string s :
             {tricolord_path(), std::string("--socket"), socket(), std::string("--pin-dir"),
              pin_dir(), std::string("--config"), dir_ + "/c.yaml", std::string("--state"),
              dir_ + "/s.yaml", std::string("--flows"), std::string("65536"),
              std::string("--metrics"), std::string("127.0.0.1:0")})
            a.push_back(s);
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    }
    void start(const std::string &caps, std::vector<std::string> extra = {}) {
        pid_ = start_daemon_process(daemon_argv(caps, std::move(extra)), dir_ + "/log", socket());
    }
    void stop(int sig = SIGTERM) {
        if (pid_ > 0) {
            kill(pid_, sig);
            waitpid(pid_, nullptr, 0);
        }
        pid_ = -1;
    }
    RunResult ctl(std::vector<std::string> args, const char *user = nullptr) const {
        std::vector<std::string> a;
        if (user)
            a = as_user(user, "");
        a.insert(a.end(), {tricolorctl_path(), "--socket", socket()});
        a.insert(a.end(), args.begin(), args.end());
        return run_command(a);
    }
    RunResult ok(std::vector<std::string> args) {
        auto r = ctl(args);
        EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
        return r;
    }
    json status() { return parse_json(ok({"-j", "status"})); }
    // The programs pinned for their ids (Datapath::program_ids).
    std::vector<std::string> program_pins() const {
        std::vector<std::string> out;
        std::error_code ec;
        for (const auto &e : fs::directory_iterator(pin_dir() + "/abi2/progs", ec))
            out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }

    std::unique_ptr<Lab> lab;
    std::string dir_;
    uid_t uid_ = 0;
    gid_t gid_ = 0;
    pid_t pid_ = -1;
};

const std::string kCaps = "bpf,+net_admin,+perfmon";

TEST_F(LeastPrivilege, BpfNetAdminAndPerfmonAreAllItNeedsToRunRestartAndDetach) {
    start(kCaps, {"--reclaim-interval", "0.3", "--flow-idle-timeout", "3600", "--top-keep", "3"});
    // Not root, and none of what it was not given.
    std::string st = read_file(fmt::format("/proc/{}/status", pid_));
    EXPECT_THAT(st, HasSubstr(fmt::format("Uid:\t{}\t{}", uid_, uid_)));
    EXPECT_THAT(st, HasSubstr("CapEff:\t000000c000001000")); // 12, 38, 39
    ok({"attach", lab->host_if});
    ok({"attach", lab->host_if, "--hook", "tc", "--direction", "egress"});
    ok({"policy", "add", "conn", "--algo", "srtcm", "--cir", "1gbit", "--cbs", "64m", "--ebs",
        "64m", "--per", "5tuple", "--match", "proto", "udp"});
    auto attached = [&] {
        json s = status();
        EXPECT_EQ(s["attachments"].size(), 2u) << s.dump();
        for (const auto &a : s["attachments"])
            EXPECT_TRUE(a.value("attached", false)) << a.dump();
        return s;
    };
    json before = attached();
    EXPECT_EQ(program_pins().size(), 2u);
    // flows --top from the heavy hitters: this daemon can rule out writers it does not know of
    // without listing every program of the system (CAP_SYS_ADMIN).
    for (int n = 1; n <= 6; ++n) {
        auto r =
            lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", std::to_string(n), "200"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    json top;
    for (int i = 0; i < 100 * time_scale(); ++i) {
        top = status()["flows"]["top"];
        if (top.value("tracking", false) && top["threshold"] == 4 * 228)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(top.value("tracking", false)) << top.dump();
    EXPECT_EQ(parse_json(ok({"-j", "flows", "--top", "3"}))["via"], "hot");
    // kill -9 and a new daemon of the same user: it knows the programs left on the hooks by
    // their pinned ids, swaps its own in, and lets the old ones go.
    stop(SIGKILL);
    start(kCaps);
    json after = attached();
    for (size_t i = 0; i < 2; ++i)
        EXPECT_NE(after["attachments"][i]["prog_id"], before["attachments"][i]["prog_id"]);
    EXPECT_EQ(program_pins(),
              (std::vector<std::string>{
                  fmt::format("tc_{}", after["attachments"][1]["prog_id"].get<uint32_t>()),
                  fmt::format("xdp_{}", after["attachments"][0]["prog_id"].get<uint32_t>())}));
    EXPECT_THAT(log(), ::testing::Not(HasSubstr("already runs")));
    // Traffic after the restart is metered by the adopted policy.
    auto r = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", "5", "200"});
    ASSERT_EQ(r.exit_code, 0);
    json stats = parse_json(ok({"-j", "stats"}));
    EXPECT_EQ(stats["policies"][0]["green"]["packets"], 1 + 2 + 3 + 4 + 5 + 6 + 5);
    // Detach takes XDP off (known as ours by its id) and tc's link.
    ok({"detach", lab->host_if});
    ok({"detach", lab->host_if, "--hook", "tc", "--direction", "egress"});
    auto link = run_command({"/sbin/ip", "link", "show", lab->host_if});
    EXPECT_THAT(link.out, ::testing::Not(HasSubstr("xdp")));
    EXPECT_EQ(status()["attachments"].size(), 0u);
}

TEST_F(LeastPrivilege, ASocketGroupMemberReadsAndCannotChange) {
    start(kCaps, {"--socket-group", kGroup});
    struct stat s {};
    ASSERT_EQ(stat(socket().c_str(), &s), 0);
    EXPECT_EQ(s.st_uid, uid_); // the daemon's user keeps it; the group gets read-only commands
    EXPECT_EQ(s.st_gid, getgrnam(kGroup)->gr_gid);
    EXPECT_EQ(s.st_mode & 0777, 0660u);
    auto read = ctl({"stats"}, kReader);
    EXPECT_EQ(read.exit_code, 0) << read.err;
    auto change =
        ctl({"policy", "add", "x", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "8k"}, kReader);
    EXPECT_NE(change.exit_code, 0);
    EXPECT_THAT(change.err, HasSubstr("needs root or CAP_NET_ADMIN"));
}

TEST_F(LeastPrivilege, EachMissingCapabilityIsNamed) {
    for (auto [caps, missing] :
         {std::pair{"bpf,+net_admin", "CAP_PERFMON"}, std::pair{"bpf,+perfmon", "CAP_NET_ADMIN"},
          std::pair{"net_admin,+perfmon", "CAP_BPF"}}) {
        auto r = run_command(daemon_argv(caps));
        EXPECT_EQ(r.exit_code, 1) << caps;
        EXPECT_THAT(r.err, HasSubstr(fmt::format("this process lacks {}", missing))) << caps;
        EXPECT_THAT(r.err, ::testing::Not(HasSubstr("not a permissions problem"))) << caps;
        EXPECT_FALSE(fs::exists(pin_dir() + "/abi2")) << caps << ": a refused start left pins";
    }
}

} // namespace
