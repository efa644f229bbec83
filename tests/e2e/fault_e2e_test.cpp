// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The fault suite (issue 10): each fault is driven with traffic through the data path, and each
// test ends asserting that nothing was lost: the attachments (as the kernel has them), the
// policies, the counters (every packet sent is counted exactly once), and the user's config file,
// byte for byte.
#include "lab.hpp"

#include "tricolor/control.hpp"
#include "tricolor/datapath.hpp"
#include "tricolor/yaml.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

void wait_for(const std::function<bool()> &done, int ms = 5000) {
    for (int i = 0; i < ms * time_scale() / 20 && !done(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

size_t count_of(const std::string &text, const std::string &what) {
    size_t n = 0;
    for (size_t pos = 0; (pos = text.find(what, pos)) != std::string::npos; pos += what.size())
        ++n;
    return n;
}

class Fault : public DaemonLabTest {
  protected:
    void SetUp() override {
        DaemonLabTest::SetUp();
        if (IsSkipped())
            return;
        // The user's file, with comments and a layout of their own, applied by a restart.
        user_config = fmt::format("# hand-written: tricolord must never rewrite this file\n"
                                  "policies:\n"
                                  "  - name: guests      # UDP from the lab\n"
                                  "    algo: srtcm\n"
                                  "    cir: 1mbit\n"
                                  "    cbs: 15k\n"
                                  "    match: {{proto: udp}}\n"
                                  "attachments:\n"
                                  "  - {{iface: {}, hook: xdp}}   # the lab's link\n",
                                  lab->host_if);
        daemon->terminate();
        write_file(daemon->config(), user_config);
        daemon->start();
    }
    void send(long count, double pps = 0) {
        auto r = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", std::to_string(count),
                             "200", std::to_string(pps)});
        ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
        sent += count;
    }
    uint64_t counted(const std::string &policy = "guests") {
        auto s = parse_json(ok({"-j", "stats"}));
        for (const auto &p : s["policies"])
            if (p["name"] == policy)
                return p["green"]["packets"].get<uint64_t>() +
                       p["yellow"]["packets"].get<uint64_t>() + p["red"]["packets"].get<uint64_t>();
        return 0;
    }
    json status() { return parse_json(ok({"-j", "status"})); }
    json policies() { return parse_json(ok({"-j", "policy", "list"}))["policies"]; }
    // Nothing lost: the XDP attachment is what the kernel runs, the policies are @expected, every
    // packet sent was counted, and the user's file is as they wrote it.
    void nothing_lost(const json &expected_policies) {
        auto st = status();
        ASSERT_EQ(st["attachments"].size(), 1u) << st.dump();
        EXPECT_EQ(st["attachments"][0]["iface"], lab->host_if);
        EXPECT_TRUE(st["attachments"][0]["attached"].get<bool>()) << st.dump();
        EXPECT_GT(st["attachments"][0]["prog_id"].get<uint64_t>(), 0u);
        EXPECT_EQ(policies(), expected_policies);
        EXPECT_EQ(counted(), sent);
        EXPECT_EQ(read_file(daemon->config()), user_config);
    }

    std::string user_config;
    uint64_t sent = 0;
};

// Restart x3 (SIGTERM, kill -9, SIGTERM) with traffic flowing throughout, after a change made
// with tricolorctl: the change, the attachment, the counters and the user's file all survive.
TEST_F(Fault, RestartThreeTimesUnderTraffic) {
    EXPECT_THAT(daemon->log(), HasSubstr("applying the config"));
    ok({"policy", "set", "guests", "--cir", "2mbit"});
    ok({"policy", "add", "other", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "15k", "--match",
        "proto", "tcp"});
    auto expected = policies();
    ASSERT_EQ(expected.size(), 2u);
    EXPECT_EQ(expected[0]["cir"], "2mbit");
    const long kPackets = 2400;
    RunResult sender;
    std::thread tx([&] {
        sender = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000",
                             std::to_string(kPackets), "200", "1200"}); // 2 s
    });
    for (int i = 0; i < 3; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        if (i == 1)
            daemon->kill9();
        else
            daemon->terminate();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        daemon->start();
        EXPECT_EQ(policies(), expected) << "restart " << i;
        EXPECT_TRUE(status()["attachments"][0]["attached"].get<bool>()) << "restart " << i;
    }
    tx.join();
    ASSERT_EQ(sender.exit_code, 0) << sender.err;
    sent += kPackets;
    EXPECT_THAT(daemon->log(), HasSubstr("applying the state"));
    nothing_lost(expected);
}

// An upgrade from ABI 1 (maps named tc_*, pinned under abi1/): the daemon moves the pins to
// abi2/ under their new names and adopts them, so the counters and the policies survive. The
// ABI 1 layout is made by moving this daemon's own pins back: ABI 2 changed names, not layouts.
TEST_F(Fault, UpgradeFromAbi1KeepsCountersAndPolicies) {
    ok({"policy", "set", "guests", "--cir", "2mbit"});
    send(50);
    auto expected = policies();
    daemon->terminate();
    std::string pin = daemon->pin_dir();
    fs::create_directories(pin + "/abi1");
    size_t moved = 0;
    for (const auto &e : fs::directory_iterator(pin + "/abi2")) {
        std::string name = e.path().filename();
        std::string old = name.rfind("tcm_", 0) == 0 ? "tc_" + name.substr(4) : name;
        fs::rename(e.path(), pin + "/abi1/" + old);
        ++moved;
    }
    fs::remove(pin + "/abi2");
    ASSERT_GE(moved, 10u);
    ASSERT_TRUE(fs::exists(pin + "/abi1/tc_flow_slots"));
    daemon->start();
    EXPECT_THAT(daemon->log(),
                HasSubstr(fmt::format("moved {} pinned objects of tricolor's ABI 1", moved)));
    EXPECT_FALSE(fs::exists(pin + "/abi1"));
    EXPECT_TRUE(fs::exists(pin + "/abi2/tcm_flow_slots"));
    send(30);
    nothing_lost(expected); // every packet counted once: the ABI 1 counters were adopted
}

// SIGHUP with bad configs, each refused whole while traffic flows; then a good one applies.
TEST_F(Fault, SighupWithBadConfigsChangesNothing) {
    send(20);
    auto expected = policies();
    std::string dir_config = daemon->dir() + "/as-dir";
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"missing interface", "policies: []\nattachments:\n  - {iface: tcf-nosuchif, hook: xdp}\n"},
        {"missing interface beside a good one",
         fmt::format("attachments:\n  - {{iface: {}, hook: xdp}}\n"
                     "  - {{iface: tcf-nosuchif, hook: tc, direction: egress}}\n",
                     lab->host_if)},
        {"not YAML", "policies: [\n"},
        {"unknown section", "polices: []\n"},
        {"zero CBS", "policies:\n  - {name: g, algo: srtcm, cir: 1mbit, cbs: 0}\n"},
        {"duplicate name", "policies:\n  - {name: g, algo: srtcm, cir: 1mbit, cbs: 15k}\n"
                           "  - {name: g, algo: srtcm, cir: 2mbit, cbs: 15k}\n"},
        {"XDP on egress",
         fmt::format("attachments:\n  - {{iface: {}, hook: xdp, direction: egress}}\n",
                     lab->host_if)},
        {"unknown hook", fmt::format("attachments:\n  - {{iface: {}, hook: tcx}}\n", lab->host_if)},
        {"PIR below CIR",
         "policies:\n  - {name: t, algo: trtcm, cir: 2mbit, cbs: 15k, pir: 1mbit, pbs: 15k}\n"},
        {"policies not a list", "policies: {name: g}\n"},
        {"unknown unit", "policies:\n  - {name: g, algo: srtcm, cir: 1mbits, cbs: 15k}\n"},
    };
    daemon->settle_state();
    std::string state_before = read_file(daemon->state());
    for (size_t i = 0; i < bad.size(); ++i) {
        write_file(daemon->config(), bad[i].second);
        RunResult sender;
        std::thread tx([&] {
            sender =
                lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", "40", "200", "400"});
        });
        daemon->hup();
        wait_for([&] { return count_of(daemon->log(), "reload refused") > i; });
        tx.join();
        ASSERT_EQ(sender.exit_code, 0);
        sent += 40;
        EXPECT_EQ(count_of(daemon->log(), "reload refused"), i + 1) << bad[i].first;
        EXPECT_EQ(policies(), expected) << bad[i].first;
        EXPECT_EQ(read_file(daemon->state()), state_before) << bad[i].first;
        EXPECT_EQ(read_file(daemon->config()), bad[i].second) << "the file is the user's";
    }
    EXPECT_THAT(daemon->log(), HasSubstr("no interface named 'tcf-nosuchif'"));
    // The config as a directory (unreadable as a file).
    fs::remove(daemon->config());
    fs::create_directories(daemon->config());
    daemon->hup();
    wait_for([&] { return count_of(daemon->log(), "reload refused") > bad.size(); });
    EXPECT_THAT(daemon->log(), HasSubstr("is a directory"));
    fs::remove(daemon->config());
    // Back to the user's file: it applies.
    write_file(daemon->config(), user_config);
    daemon->hup();
    wait_for([&] { return count_of(daemon->log(), "reloaded") > 0; });
    send(10);
    nothing_lost(expected);
}

// A SIGHUP that drops an attachment from the config detaches it in the kernel; status agrees.
TEST_F(Fault, SighupDetachesWhatTheConfigNoLongerNames) {
    write_file(daemon->config(), "policies:\n  - {name: guests, algo: srtcm, cir: 1mbit, cbs: "
                                 "15k, match: {proto: udp}}\n");
    daemon->hup();
    wait_for([&] { return count_of(daemon->log(), "reloaded") > 0; });
    EXPECT_TRUE(status()["attachments"].empty());
    auto before = counted();
    send(10);
    EXPECT_EQ(counted(), before); // really off the interface
    EXPECT_THAT(daemon->log(), HasSubstr("detached " + lab->host_if));
}

// Interfaces deleted, renamed and moved to another namespace while attached: status says so,
// and detach removes the entry and the pinned tcx link.
TEST_F(Fault, InterfaceDeletedRenamedOrMovedWhileAttached) {
    std::string a = fmt::format("tcf{}a", getpid() % 10000),
                b = fmt::format("tcf{}b", getpid() % 10000);
    std::string renamed = a + "r";
    run_command({"/sbin/ip", "link", "del", a});
    ASSERT_EQ(
        run_command({"/sbin/ip", "link", "add", a, "type", "veth", "peer", "name", b}).exit_code,
        0);
    run_command({"/sbin/ip", "link", "set", a, "up"});
    run_command({"/sbin/ip", "link", "set", b, "up"});
    std::string links = daemon->pin_dir() + "/abi2/links";
    auto pinned = [&] {
        size_t n = 0;
        std::error_code ec;
        for (auto it = fs::directory_iterator(links, ec); !ec && it != fs::directory_iterator();
             ++it)
            ++n;
        return n;
    };
    size_t links_before = pinned();
    // Deleted.
    ok({"attach", a, "--hook", "tc", "--direction", "egress"});
    ok({"attach", a});
    // tcx (6.6+) pins a link; the clsact fallback (6.1) has none to pin.
    bool tcx = false;
    auto attached = status();
    for (const auto &x : attached["attachments"])
        if (x["iface"] == a && x["hook"] == "tc")
            tcx = x["mode"] == "tcx";
    EXPECT_EQ(pinned(), links_before + (tcx ? 1 : 0));
    run_command({"/sbin/ip", "link", "del", a});
    auto st = status();
    ASSERT_EQ(st["attachments"].size(), 3u);
    for (const auto &x : st["attachments"])
        if (x["iface"] == a) {
            EXPECT_FALSE(x["attached"].get<bool>());
            EXPECT_THAT(x["stale"].get<std::string>(), HasSubstr("no interface named"));
        }
    auto text = ok({"status"});
    EXPECT_THAT(text.out, HasSubstr("NOT ATTACHED"));
    auto d1 = ok({"detach", a, "--hook", "tc", "--direction", "egress"});
    EXPECT_THAT(d1.out, HasSubstr("no longer exists"));
    ok({"detach", a});
    EXPECT_EQ(status()["attachments"].size(), 1u);
    EXPECT_EQ(pinned(), links_before);
    EXPECT_EQ(daemon->ctl({"detach", a}).exit_code, 1); // now it is unknown as well
    // Renamed: status follows the ifindex, detach takes it off the new name.
    ASSERT_EQ(
        run_command({"/sbin/ip", "link", "add", a, "type", "veth", "peer", "name", b}).exit_code,
        0);
    run_command({"/sbin/ip", "link", "set", a, "up"});
    ok({"attach", a, "--xdp-mode", "generic"});
    run_command({"/sbin/ip", "link", "set", a, "down"});
    run_command({"/sbin/ip", "link", "set", a, "name", renamed});
    bool found = false;
    auto renamed_status = status();
    for (const auto &x : renamed_status["attachments"])
        if (x["iface"] == a) {
            found = true;
            EXPECT_THAT(x["stale"].get<std::string>(), HasSubstr("now called " + renamed));
        }
    EXPECT_TRUE(found) << renamed_status.dump();
    auto d2 = ok({"detach", a});
    EXPECT_THAT(d2.out, HasSubstr("now called " + renamed));
    auto xdp = run_command({"/sbin/ip", "link", "show", renamed});
    EXPECT_THAT(xdp.out, ::testing::Not(HasSubstr("xdp"))); // really off
    // Moved to another namespace.
    ok({"attach", renamed, "--hook", "tc", "--direction", "ingress"});
    ASSERT_EQ(run_command({"/sbin/ip", "link", "set", renamed, "netns", lab->ns}).exit_code, 0);
    EXPECT_FALSE(status()["attachments"][1]["attached"].get<bool>());
    ok({"detach", renamed, "--hook", "tc", "--direction", "ingress"});
    EXPECT_EQ(pinned(), links_before);
    run_command({"/sbin/ip", "-n", lab->ns, "link", "del", renamed});
    run_command({"/sbin/ip", "link", "del", b});
    send(10);
    nothing_lost(policies());
}

// attach over an existing attachment in another XDP mode switches it for real.
TEST_F(Fault, AttachInAnotherXdpModeSwitchesForReal) {
    auto mode = [&] { return status()["attachments"][0]["mode"].get<std::string>(); };
    ok({"attach", lab->host_if, "--xdp-mode", "native"});
    EXPECT_EQ(mode(), "native");
    auto r = ok({"attach", lab->host_if, "--xdp-mode", "generic"});
    EXPECT_THAT(r.out, HasSubstr("generic"));
    EXPECT_EQ(mode(), "generic");
    EXPECT_THAT(run_command({"/sbin/ip", "link", "show", lab->host_if}).out,
                HasSubstr("xdpgeneric"));
    send(10);
    ok({"attach", lab->host_if, "--xdp-mode", "native"});
    EXPECT_EQ(mode(), "native");
    send(10);
    nothing_lost(policies());
}

// A start under `ip netns exec` (which hides the host's bpffs) mounts one and says so; a pin
// directory on a filesystem that is not bpffs is refused with the fix, and nothing is created.
TEST_F(Fault, BpffsMissingOrPinDirNotBpffs) {
    std::string tag = std::to_string(getpid());
    std::string sock = daemon->dir() + "/ns.sock", log = daemon->dir() + "/ns.log";
    std::string pin = "/sys/fs/bpf/tricolor-e2e-ns-" + tag;
    RunResult inner;
    std::thread t([&] {
        inner = run_command({"/usr/bin/timeout", std::to_string(int(4 * time_scale())), "/sbin/ip",
                             "netns", "exec", lab->ns, tricolord_path(), "--socket", sock,
                             "--pin-dir", pin, "--config", daemon->dir() + "/ns.yaml", "--state",
                             daemon->dir() + "/ns-state.yaml", "--metrics", "none"});
    });
    wait_for([&] { return control_request(sock, {{"cmd", "status"}}).has_value(); });
    auto r = control_request(sock, {{"cmd", "status"}});
    t.join();
    ASSERT_TRUE(r.has_value()) << inner.err;
    EXPECT_TRUE((*r)["ok"].get<bool>());
    EXPECT_THAT(inner.err, HasSubstr("mounted a bpf filesystem at /sys/fs/bpf"));
    EXPECT_FALSE(fs::exists(pin)); // it lived in the namespace's own bpffs, not the host's

    std::string not_bpf = daemon->dir() + "/pins";
    auto refused = run_command({tricolord_path(), "--socket", daemon->dir() + "/x.sock",
                                "--pin-dir", not_bpf, "--config", daemon->dir() + "/x.yaml",
                                "--state", daemon->dir() + "/x-state.yaml", "--metrics", "none"});
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_THAT(refused.err, HasSubstr("is not on a bpf filesystem"));
    EXPECT_THAT(refused.err, HasSubstr("mount -t bpf bpf"));
    EXPECT_FALSE(fs::exists(not_bpf));
    EXPECT_FALSE(fs::exists(daemon->dir() + "/x.sock"));
    EXPECT_FALSE(fs::exists(daemon->dir() + "/x-state.yaml"));
    send(10);
    nothing_lost(policies());
}

// Socket in use, metrics port in use, a bad config with no state: each refused start leaves
// nothing behind (no pinned maps, no socket, no state) and the running daemon is untouched.
TEST_F(Fault, RefusedStartsLeaveNothingBehind) {
    send(10);
    std::string pin = "/sys/fs/bpf/tricolor-e2e-refused-" + std::to_string(getpid());
    std::string state = daemon->dir() + "/refused-state.yaml";
    auto start = [&](std::vector<std::string> extra) {
        std::vector<std::string> argv = {tricolord_path(), "--pin-dir", pin, "--state", state};
        argv.insert(argv.end(), extra.begin(), extra.end());
        return run_command(argv);
    };
    // The socket of the running daemon.
    auto r1 = start({"--socket", daemon->socket(), "--config", daemon->dir() + "/none.yaml",
                     "--metrics", "none"});
    EXPECT_EQ(r1.exit_code, 1);
    EXPECT_THAT(r1.err, HasSubstr("another tricolord answers on"));
    EXPECT_FALSE(fs::exists(pin));
    // A metrics port in use.
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(listen(fd, 1), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
    std::string sock = daemon->dir() + "/refused.sock";
    auto r2 = start({"--socket", sock, "--config", daemon->dir() + "/none.yaml", "--metrics",
                     fmt::format("127.0.0.1:{}", ntohs(addr.sin_port))});
    EXPECT_EQ(r2.exit_code, 1);
    EXPECT_THAT(r2.err, HasSubstr("Address already in use"));
    EXPECT_THAT(r2.err, ::testing::Not(HasSubstr("CivetServer")));
    EXPECT_FALSE(fs::exists(pin));
    EXPECT_FALSE(fs::exists(sock));
    // The page's port in use, and --web values that are not an address: refused, by name.
    auto r2w = start({"--socket", sock, "--config", daemon->dir() + "/none.yaml", "--metrics",
                      "none", "--web", std::to_string(ntohs(addr.sin_port))});
    close(fd);
    EXPECT_EQ(r2w.exit_code, 1);
    EXPECT_THAT(r2w.err, HasSubstr(fmt::format("cannot serve the page on 127.0.0.1:{}: Address "
                                               "already in use",
                                               ntohs(addr.sin_port))));
    EXPECT_THAT(r2w.err, HasSubstr("--web ADDR:PORT"));
    EXPECT_FALSE(fs::exists(pin));
    EXPECT_FALSE(fs::exists(sock));
    for (std::string bad : {"http", "70000", "::1:80", "127.0.0.1:", ":80", "-1"}) {
        auto r = start({"--socket", sock, "--config", daemon->dir() + "/none.yaml", "--metrics",
                        "none", "--web", bad});
        EXPECT_EQ(r.exit_code, 2) << bad;
        EXPECT_THAT(r.err, HasSubstr(fmt::format("--web '{}': expected PORT", bad))) << bad;
        EXPECT_FALSE(fs::exists(pin)) << bad;
    }
    // Debian's civetweb has no IPv6: said before anything starts (it would say "null context").
    auto r6 = start({"--socket", sock, "--config", daemon->dir() + "/none.yaml", "--metrics",
                     "none", "--web", "[::1]:0"});
    EXPECT_EQ(r6.exit_code, 2);
    EXPECT_THAT(r6.err, HasSubstr("--web '[::1]:0': this build's HTTP server (civetweb) has no "
                                  "IPv6"));
    // A config that does not check, and no state to fall back on: the maps this start created
    // are removed again.
    write_file(daemon->dir() + "/bad.yaml",
               "policies:\n  - {name: x, algo: srtcm, cir: 0, cbs: 1k}\n");
    auto r3 =
        start({"--socket", sock, "--config", daemon->dir() + "/bad.yaml", "--metrics", "none"});
    EXPECT_EQ(r3.exit_code, 1);
    EXPECT_THAT(r3.err, HasSubstr("bad.yaml"));
    EXPECT_FALSE(fs::exists(pin));
    EXPECT_FALSE(fs::exists(sock));
    EXPECT_FALSE(fs::exists(state));
    // A stale socket file (no daemon behind it) is taken over.
    send(10);
    nothing_lost(policies());
}

// Two daemons started at once on one fresh pin directory: one runs, the other is refused
// without touching the directory, and the winner works.
TEST_F(Fault, TwoDaemonsRaceForOnePinDir) {
    std::string pin = "/sys/fs/bpf/tricolor-e2e-race-" + std::to_string(getpid());
    Datapath::remove_pins(pin);
    RunResult results[2];
    std::string socks[2] = {daemon->dir() + "/race0.sock", daemon->dir() + "/race1.sock"};
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
        threads.emplace_back([&, i] {
            results[i] = run_command(
                {"/usr/bin/timeout", std::to_string(int(5 * time_scale())), tricolord_path(),
                 "--socket", socks[i], "--pin-dir", pin, "--config", daemon->dir() + "/race.yaml",
                 "--state", daemon->dir() + fmt::format("/race{}.yaml", i), "--metrics", "none"});
        });
    bool answered[2] = {false, false};
    wait_for([&] {
        for (int i = 0; i < 2; ++i)
            answered[i] = answered[i] || control_request(socks[i], {{"cmd", "status"}}).has_value();
        return answered[0] || answered[1];
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int i = 0; i < 2; ++i)
        answered[i] = answered[i] || control_request(socks[i], {{"cmd", "status"}}).has_value();
    int winner = answered[0] ? 0 : 1;
    auto add = control_request(
        socks[winner],
        {{"cmd", "policy_add"},
         {"policy", {{"name", "r"}, {"algo", "srtcm"}, {"cir", "1mbit"}, {"cbs", "15k"}}}});
    for (auto &t : threads)
        t.join();
    EXPECT_NE(answered[0], answered[1]);
    ASSERT_TRUE(add.has_value());
    EXPECT_TRUE((*add)["ok"].get<bool>());
    EXPECT_EQ(results[1 - winner].exit_code, 1);
    EXPECT_THAT(results[1 - winner].err, HasSubstr("another tricolord uses it"));
    EXPECT_TRUE(fs::exists(pin + "/abi2/tcm_runtime")); // the winner's maps are intact
    Datapath::remove_pins(pin);
    send(10);
    nothing_lost(policies());
}

// The config on a read-only filesystem, the state on a full one: changes that cannot be
// recorded are refused whole; nothing is ever written to the config.
TEST_F(Fault, ReadOnlyConfigAndFullStateDisk) {
    std::string ro = daemon->dir() + "/ro", full = daemon->dir() + "/full";
    fs::create_directories(ro);
    fs::create_directories(full);
    write_file(ro + "/tricolor.yaml", user_config);
    ASSERT_EQ(mount(ro.c_str(), ro.c_str(), nullptr, MS_BIND, nullptr), 0);
    ASSERT_EQ(mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr), 0);
    ASSERT_EQ(mount("tmpfs", full.c_str(), "tmpfs", 0, "size=64k"), 0);
    daemon->terminate();
    // Restart with the config read-only and the state on the small tmpfs.
    auto restart = [&] {
        std::string pin = daemon->pin_dir();
        return run_command({"/usr/bin/timeout", std::to_string(int(5 * time_scale())),
                            tricolord_path(), "--socket", daemon->socket(), "--pin-dir", pin,
                            "--config", ro + "/tricolor.yaml", "--state", full + "/state.yaml",
                            "--metrics", "none", "--flows", "65536"});
    };
    RunResult run;
    std::thread t([&] { run = restart(); });
    wait_for([&] { return control_request(daemon->socket(), {{"cmd", "status"}}).has_value(); });
    auto add = [&](const std::string &name) {
        return daemon->ctl({"policy", "add", name, "--algo", "srtcm", "--cir", "1mbit", "--cbs",
                            "15k", "--match", "proto", "tcp"});
    };
    auto added = add("a");
    if (added.exit_code != 0) {
        t.join();
        umount2(full.c_str(), MNT_DETACH);
        umount2(ro.c_str(), MNT_DETACH);
        FAIL() << added.err << run.err;
    }
    // Fill the state's filesystem.
    {
        std::ofstream filler(full + "/filler", std::ios::binary);
        std::string block(4096, 'x');
        for (int i = 0; i < 64 && filler; ++i)
            filler << block;
    }
    std::string state_before = read_file(full + "/state.yaml");
    // A change is recorded as one line of the state journal: the journal's last page may still
    // take a few. The first that cannot be recorded is refused and leaves no trace.
    RunResult refused;
    size_t accepted = 0;
    for (; accepted < 100; ++accepted) {
        refused = add(fmt::format("b{}", accepted));
        if (refused.exit_code != 0)
            break;
    }
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_THAT(refused.err, HasSubstr("No space left on device"));
    EXPECT_THAT(refused.err, HasSubstr("nothing changed"));
    auto list = parse_json(daemon->ctl({"-j", "policy", "list"}))["policies"];
    EXPECT_EQ(list.size(), 2u + accepted); // guests, a and those recorded, not the refused one
    EXPECT_EQ(read_file(full + "/state.yaml"), state_before); // cannot be folded on a full disk
    std::string refused_name = fmt::format("b{}", accepted);
    EXPECT_THAT(read_file(full + "/state.yaml.journal"),
                ::testing::Not(HasSubstr("\"" + refused_name + "\"")));
    fs::remove(full + "/filler");
    EXPECT_EQ(add(refused_name).exit_code, 0);
    t.join();
    EXPECT_EQ(run.exit_code, 124) << run.err; // it ran until timeout stopped it
    EXPECT_EQ(read_file(ro + "/tricolor.yaml"), user_config);
    umount2(full.c_str(), MNT_DETACH);
    umount2(ro.c_str(), MNT_DETACH);
    daemon->start();
    send(10);
    EXPECT_EQ(counted(), sent);
}

// kill -9 and SIGTERM while `apply` of 10k policies runs, with traffic flowing: the data path
// switches sets atomically and the state file is replaced only after it, so a restart finds the
// old set or the whole new one, never a mix; counters of the policy that stays are kept.
TEST_F(Fault, Kill9AndSigtermDuringApplyOf10kPolicies) {
    std::string file = daemon->dir() + "/10k.yaml";
    {
        std::ofstream out(file);
        out << "policies:\n  - {name: guests, algo: srtcm, cir: 1mbit, cbs: 15k, match: {proto: "
               "udp}}\n";
        for (int i = 0; i < 10000; ++i)
            out << fmt::format("  - {{name: p{}, algo: srtcm, cir: 1mbit, cbs: 15k, match: {{dst: "
                               "198.19.{}.{}, proto: tcp}}}}\n",
                               i, i / 250, i % 250);
    }
    auto old_set = policies();
    // How long the CLI takes to read, check and send the file, and the daemon to apply it.
    auto t0 = std::chrono::steady_clock::now();
    ok({"apply", "-f", file, "--dry-run"});
    int delay_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    for (bool hard : {true, false}) {
        SCOPED_TRACE(hard ? "kill -9" : "SIGTERM");
        RunResult applied, sender;
        std::thread tx([&] {
            sender =
                lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9000", "600", "200", "1000"});
        });
        std::thread apply([&] { applied = daemon->ctl({"apply", "-f", file}); });
        // Once the request is in (the daemon has the file's first policy's name in its answer
        // only after applying), strike.
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        if (hard)
            daemon->kill9();
        else
            daemon->terminate();
        apply.join();
        daemon->start();
        tx.join();
        ASSERT_EQ(sender.exit_code, 0);
        sent += 600;
        auto list = policies();
        std::cerr << (hard ? "kill -9" : "SIGTERM") << " after " << delay_ms << " ms: apply exited "
                  << applied.exit_code << ", " << list.size() << " policies after the restart\n";
        EXPECT_TRUE(list == old_set || list.size() == 10001u) << list.size();
        if (applied.exit_code == 0) { // the answer came: the new set is the state
            EXPECT_EQ(list.size(), 10001u) << applied.err;
        }
        EXPECT_EQ(counted(), sent);
        EXPECT_TRUE(status()["attachments"][0]["attached"].get<bool>());
        EXPECT_EQ(read_file(daemon->config()), user_config);
        if (list.size() == 10001u) // back to the one policy for the next round
            ok({"apply", "-f", daemon->config()});
        old_set = policies();
    }
    nothing_lost(old_set);
}

// A config edited into something broken and then a restart (or a reboot): the daemon keeps
// policing with the state that ran last, says why, and leaves the broken file as it is.
TEST_F(Fault, BrokenConfigAtRestartFallsBackToTheState) {
    send(10);
    auto expected = policies();
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // the edit is newer
    std::string broken = user_config + "  - {iface: tcf-nosuchif, hook: xdp}\n"
                                       "policies: [\n";
    write_file(daemon->config(), broken);
    daemon->terminate();
    daemon->start();
    EXPECT_THAT(daemon->log(), HasSubstr("applying the state"));
    EXPECT_THAT(daemon->log(), HasSubstr("fix the config and send SIGHUP"));
    send(10);
    user_config = broken;
    nothing_lost(expected);
}

// The kernel runs this data path on an interface that no entry names (the config was edited
// while the daemon was down): status shows it, and detach or attach settle it.
TEST_F(Fault, StatusShowsWhatTheKernelRunsThatNoEntryNames) {
    daemon->terminate();
    std::string no_attachments =
        "policies:\n  - {name: guests, algo: srtcm, cir: 1mbit, cbs: 15k, match: {proto: udp}}\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    write_file(daemon->config(), no_attachments);
    daemon->start();
    auto st = status();
    ASSERT_EQ(st["attachments"].size(), 1u) << st.dump();
    EXPECT_EQ(st["attachments"][0]["iface"], lab->host_if);
    EXPECT_FALSE(st["attachments"][0].value("managed", true));
    EXPECT_THAT(st["attachments"][0]["stale"].get<std::string>(), HasSubstr("not in the state"));
    EXPECT_THAT(ok({"status"}).out, HasSubstr("NOT MANAGED"));
    send(10); // still policed by the program left there
    EXPECT_EQ(counted(), sent);
    ok({"attach", lab->host_if}); // adopted
    st = status();
    ASSERT_EQ(st["attachments"].size(), 1u);
    EXPECT_TRUE(st["attachments"][0].value("managed", true));
    user_config = no_attachments;
    send(10);
    nothing_lost(policies());
    ok({"detach", lab->host_if});
    EXPECT_TRUE(status()["attachments"].empty());
}

} // namespace
