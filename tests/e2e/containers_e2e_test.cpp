// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// tricolord --containers docker=SOCKET end to end (docs/containers.md): a real dockerd (Debian's
// docker.io) started by the test with its own socket, data root and exec root, on a bridge the
// test made in 198.19.91.0/24, with --iptables=false --ip-masq=false (never Docker's default
// 172.17.0.0/16 bridge); an image imported from a busybox root (no registry is reachable). The
// containers only sleep: their traffic is sent from their network namespaces (nsenter), where
// their own processes' would be.
#include "lab.hpp"
#include "tricolor/control.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <regex>
#include <set>
#include <fstream>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;

namespace {

constexpr uint64_t kRate = 20000000; // bit/s
constexpr uint64_t kBurst = 65536;   // bytes
constexpr const char *kImage = "tcbusy:1";

// A root of busybox alone, for `docker import` / `podman import`: the containers only sleep.
std::string busybox_root(const std::string &dir) {
    const std::string root = dir + "/image";
    for (const char *d : {"/bin", "/proc", "/sys", "/dev", "/etc", "/tmp"})
        std::filesystem::create_directories(root + d);
    std::filesystem::copy_file("/bin/busybox", root + "/bin/busybox",
                               std::filesystem::copy_options::overwrite_existing);
    return root;
}

// A dockerd of the test's own.
class Dockerd {
  public:
    Dockerd() {
        const int n = getpid() % 1000;
        dir = fmt::format("/tmp/tricolor-e2e-docker-{}", getpid());
        bridge = fmt::format("tcdk{}", n);
        std::filesystem::create_directories(dir);
        run_command({"/sbin/ip", "link", "del", bridge});
        run_command({"/sbin/ip", "link", "add", bridge, "type", "bridge"});
        run_command({"/sbin/ip", "addr", "add", "198.19.91.1/24", "dev", bridge});
        run_command({"/sbin/ip", "link", "set", bridge, "up"});
    }
    ~Dockerd() {
        stop();
        run_command({"/sbin/ip", "link", "del", bridge});
        // The data root holds the containers' vfs copies; its mounts went with dockerd, but for
        // the host's network namespace it mounts for --network host, which it leaves.
        umount2((dir + "/exec/netns/default").c_str(), MNT_DETACH);
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    std::string socket() const { return dir + "/docker.sock"; }
    bool start(std::string *why) {
        pid =
            spawn({"/usr/sbin/dockerd", "--host", "unix://" + socket(), "--data-root",
                   dir + "/root", "--exec-root", dir + "/exec", "--pidfile", dir + "/docker.pid",
                   "--bridge", bridge, "--iptables=false", "--ip-masq=false", "--ip-forward=false",
                   "--storage-driver=vfs", "--log-level=warn", "--userland-proxy=false"},
                  dir + "/dockerd.log");
        for (int i = 0; i < 300; ++i) {
            if (docker({"version"}).exit_code == 0)
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        std::ifstream l(dir + "/dockerd.log");
        *why = std::string((std::istreambuf_iterator<char>(l)), {});
        return false;
    }
    void stop() {
        if (pid > 0) {
            run_command({"/bin/sh", "-c",
                         fmt::format("/usr/bin/docker -H unix://{} rm -f $(/usr/bin/docker -H "
                                     "unix://{} ps -aq) >/dev/null 2>&1",
                                     socket(), socket())});
            kill(pid, SIGTERM);
            waitpid(pid, nullptr, 0);
            pid = -1;
        }
    }
    RunResult docker(std::vector<std::string> args) const {
        args.insert(args.begin(), {"/usr/bin/docker", "-H", "unix://" + socket()});
        return run_command(args);
    }
    // The image: busybox, imported from a root made here.
    bool image(std::string *why) {
        const std::string root = busybox_root(dir);
        auto r = run_command({"/bin/sh", "-c",
                              fmt::format("tar -C {} -c . | /usr/bin/docker -H unix://{} import "
                                          "- {}",
                                          root, socket(), kImage)});
        *why = r.out + r.err;
        return r.exit_code == 0;
    }
    // A container that sleeps, with @labels.
    std::string run(const std::string &name, const std::vector<std::string> &labels) const {
        std::vector<std::string> args = {"run", "-d", "--name", name};
        for (const auto &l : labels)
            args.insert(args.end(), {"--label", l});
        args.insert(args.end(), {kImage, "/bin/busybox", "sleep", "3600"});
        auto r = docker(args);
        EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
        return r.out.substr(0, r.out.find('\n'));
    }
    // A container that sleeps, with @labels and the docker run options @extra (before the image).
    std::string run_with(const std::string &name, const std::vector<std::string> &labels,
                         const std::vector<std::string> &extra) const {
        std::vector<std::string> args = {"run", "-d", "--name", name};
        for (const auto &l : labels)
            args.insert(args.end(), {"--label", l});
        args.insert(args.end(), extra.begin(), extra.end());
        args.insert(args.end(), {kImage, "/bin/busybox", "sleep", "3600"});
        auto r = docker(args);
        EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
        return r.out.substr(0, r.out.find('\n'));
    }
    std::string inspect(const std::string &name, const std::string &format) const {
        auto r = docker({"inspect", "-f", format, name});
        return r.out.substr(0, r.out.find('\n'));
    }

    std::string dir, bridge;
    pid_t pid = -1;
};

class Containers : public ::testing::Test {
  protected:
    void SetUp() override {
        TRICOLOR_REQUIRE_ROOT();
        if (access("/usr/sbin/dockerd", X_OK) != 0 || access("/bin/busybox", X_OK) != 0)
            GTEST_SKIP() << "docker.io and busybox-static are not installed (./tricolor.sh test "
                            "installs them)";
        engine = std::make_unique<Dockerd>();
    }
    void start_engine() {
        std::string why;
        ASSERT_TRUE(engine->start(&why)) << why;
        ASSERT_TRUE(engine->image(&why)) << why;
    }
    void start_daemon() {
        daemon = std::make_unique<Daemon>(
            "containers", std::vector<std::string>{"--containers", "docker=" + engine->socket()});
    }
    json policies() const {
        auto r = control_request(daemon->socket(), {{"cmd", "policy_list"}});
        return r ? (*r)["policies"] : json();
    }
    size_t count_policies() const { return policies().size(); }
    json stats(const std::string &name) const {
        auto r = control_request(daemon->socket(), {{"cmd", "stats"}, {"name", name}});
        return r && r->value("ok", false) ? (*r)["policies"][0] : json();
    }
    json containers_status() const {
        auto r = control_request(daemon->socket(), {{"cmd", "status"}});
        return r ? (*r)["containers"][0] : json();
    }
    // Waits up to @ms for @done; true when it held.
    bool within(int ms, const std::function<bool()> &done) const {
        for (auto end = mono_ns() + ms * 1000000ull; mono_ns() < end;) {
            if (done())
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return done();
    }
    // `docker rm -f @name`, and no policy left within a second of its return (the time printed).
    void remove_and_expect_no_policy(const std::string &name) {
        auto t0 = std::chrono::steady_clock::now();
        ASSERT_EQ(engine->docker({"rm", "-f", name}).exit_code, 0);
        ASSERT_TRUE(within(1000, [&] { return count_policies() == 0; })) << policies().dump();
        std::printf("policies gone %.0f ms after docker rm -f returned\n",
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count());
    }
    std::string in_container(const std::string &name) const {
        return "--net=/proc/" + engine->inspect(name, "{{.State.Pid}}") + "/ns/net";
    }

    std::unique_ptr<Dockerd> engine;
    std::unique_ptr<Daemon> daemon;
};

std::string pname(const std::string &id, bool in) {
    return fmt::format("docker-{}-{}", id.substr(0, 12), in ? "in" : "out");
}

// UDP at twice the rate: green within CBS + rate*T (T from before the first datagram to after
// the stats were read), and at least 90% of the rate.
void expect_udp_within(const json &before, const json &after, uint64_t ns) {
    const uint64_t green =
        after["green"]["bytes"].get<uint64_t>() - before["green"]["bytes"].get<uint64_t>();
    EXPECT_LE(static_cast<__int128>(green) * 8 * 1000000000,
              static_cast<__int128>(kBurst) * 8 * 1000000000 + static_cast<__int128>(kRate) * ns)
        << green << " green bytes in " << ns / 1e9 << " s";
    EXPECT_GE(static_cast<double>(green) * 8 / (ns / 1e9), 0.9 * kRate);
    EXPECT_GT(after["red"]["packets"].get<uint64_t>(), before["red"]["packets"].get<uint64_t>());
}

} // namespace

// A container labelled 20mbit/64k each way is limited each way (UDP within the bound, TCP at
// 95% or more), one beside it without labels is untouched, and `docker rm -f` leaves nothing
// within a second.
TEST_F(Containers, LabelledContainerIsLimitedBothWaysAndGoesWithinASecond) {
    ASSERT_NO_FATAL_FAILURE(start_engine());
    start_daemon();
    const std::string id =
        engine->run("limited", {"tricolor.egress=20mbit/64k", "tricolor.ingress=20mbit/64k"});
    engine->run("plain", {});
    ASSERT_TRUE(within(2000, [&] { return count_policies() == 2; }))
        << policies().dump() << daemon->log();
    const std::string ip = engine->inspect("limited", "{{.NetworkSettings.IPAddress}}");
    const std::string in = pname(id, true), out = pname(id, false);
    EXPECT_EQ(stats(in)["owner"].get<std::string>().substr(0, 14), "docker limited");
    {
        auto st = control_request(daemon->socket(), {{"cmd", "status"}});
        auto m = scrape_metrics((*st)["metrics"].get<std::string>());
        EXPECT_NE(m.find("tricolor_policy_info{owner=\"docker limited on "), std::string::npos)
            << m;
    }
    {
        json b = stats(out);
        uint64_t t0 = mono_ns();
        auto r = run_command({"/usr/bin/nsenter", in_container("limited"), udp_tool_path(), "send",
                              "198.19.91.1", "9", "10000", "972", "5000"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        expect_udp_within(b, stats(out), mono_ns() - t0);
    }
    {
        json b = stats(in);
        uint64_t t0 = mono_ns();
        auto r = run_command({udp_tool_path(), "send", ip, "9", "10000", "972", "5000"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        expect_udp_within(b, stats(in), mono_ns() - t0);
    }
    if (run_command({"/bin/sh", "-c", "command -v iperf3"}).exit_code == 0) {
        const std::string pid = fmt::format("/tmp/tricolor-e2e-docker-iperf3-{}.pid", getpid());
        auto server = run_command({"/usr/bin/nsenter", in_container("limited"), "/usr/bin/iperf3",
                                   "-s", "-D", "-B", ip, "--pidfile", pid});
        ASSERT_EQ(server.exit_code, 0) << server.err;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        for (bool reverse : {false, true}) {
            std::vector<std::string> argv = {"/usr/bin/iperf3", "-c", ip, "-t", "4", "-J"};
            if (reverse)
                argv.push_back("-R");
            auto r = run_command(argv);
            ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
            double bps = json::parse(r.out)["end"]["sum_received"]["bits_per_second"];
            std::printf("TCP %s the container: %.2f Mbit/s\n", reverse ? "from" : "to", bps / 1e6);
            EXPECT_GE(bps, 0.95 * kRate);
            EXPECT_LE(bps, 1.01 * kRate);
        }
        run_command({"/bin/sh", "-c", "kill $(cat " + pid + ") 2>/dev/null; rm -f " + pid});
    }
    // The unlabelled one: no policy, its interface not attached.
    const std::string plain_ip = engine->inspect("plain", "{{.NetworkSettings.IPAddress}}");
    for (const auto &p : policies())
        EXPECT_EQ(p.dump().find(plain_ip + "/"), std::string::npos) << p.dump();
    auto st = control_request(daemon->socket(), {{"cmd", "status"}});
    EXPECT_EQ((*st)["attachments"].size(), 2u) << st->dump();

    ASSERT_NO_FATAL_FAILURE(remove_and_expect_no_policy("limited"));
    st = control_request(daemon->socket(), {{"cmd", "status"}});
    EXPECT_TRUE((*st)["attachments"].empty()) << st->dump();
}

// The cgroup v2 path (below the mount) of a running container's first process: "" when the
// engine gave it none of its own (cgroup v1 alone).
std::string container_cgroup(const Dockerd &engine, const std::string &name,
                             const std::string &id) {
    std::ifstream in("/proc/" + engine.inspect(name, "{{.State.Pid}}") + "/cgroup");
    for (std::string line; std::getline(in, line);)
        if (line.starts_with("0::/") && line.find(id) != std::string::npos)
            return line.substr(4);
    return "";
}

// A container on the host's network has no interface of its own: it is limited by its cgroup
// v2 cgroup, its egress on tc egress of the host's interface tricolord is attached to, its
// ingress as it reaches its sockets. Its own processes (docker exec) are held to the bound each
// way; the host's, and an unlabelled host-network container's, are not counted.
TEST_F(Containers, OnTheHostsNetworkItIsLimitedByItsCgroup) {
    ASSERT_NO_FATAL_FAILURE(start_engine());
    start_daemon();
    Lab lab;
    ASSERT_TRUE(
        control_request(
            daemon->socket(),
            {{"cmd", "attach"}, {"iface", lab.host_if}, {"hook", "tc"}, {"direction", "egress"}})
            ->value("ok", false));
    // The host's libraries and the test's tools, read-only: udp_tool runs inside.
    const std::string tools = std::filesystem::path(udp_tool_path()).parent_path();
    const std::vector<std::string> host = {"--network", "host",
                                           "-v",        "/usr:/usr:ro",
                                           "-v",        "/lib:/lib:ro",
                                           "-v",        "/lib64:/lib64:ro",
                                           "-v",        tools + ":" + tools + ":ro"};
    const std::string id = engine->run_with(
        "hostnet", {"tricolor.egress=20mbit/64k", "tricolor.ingress=20mbit/64k"}, host);
    engine->run_with("hostplain", {}, host);
    const std::string cgroup = container_cgroup(*engine, "hostnet", id);
    if (cgroup.empty())
        GTEST_SKIP() << "this dockerd gives its containers no cgroup v2 cgroup of their own";
    ASSERT_TRUE(within(2000, [&] { return count_policies() == 2; }))
        << policies().dump() << daemon->log();
    const std::string in = pname(id, true), out = pname(id, false);
    for (const auto &p : policies()) {
        EXPECT_EQ(p["match"]["cgroup"], cgroup) << p.dump();
        EXPECT_EQ(p["owner"], "docker hostnet on the host's network") << p.dump();
    }
    {
        json b = stats(out);
        uint64_t t0 = mono_ns();
        auto r = engine->docker(
            {"exec", "hostnet", udp_tool_path(), "send", lab.ns_v4, "9", "10000", "972", "5000"});
        ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
        json a = stats(out);
        expect_udp_within(b, a, mono_ns() - t0);
        EXPECT_EQ(a["green"]["packets"].get<uint64_t>() + a["red"]["packets"].get<uint64_t>() -
                      b["green"]["packets"].get<uint64_t>() - b["red"]["packets"].get<uint64_t>(),
                  10000u)
            << "every datagram of the container, once";
        // The host's own, and the unlabelled container's: not the container's policy.
        ASSERT_EQ(
            run_command({udp_tool_path(), "send", lab.ns_v4, "9", "300", "972", "5000"}).exit_code,
            0);
        ASSERT_EQ(engine
                      ->docker({"exec", "hostplain", udp_tool_path(), "send", lab.ns_v4, "9", "300",
                                "972", "5000"})
                      .exit_code,
                  0);
        json c = stats(out);
        EXPECT_EQ(c["green"]["packets"], a["green"]["packets"]);
        EXPECT_EQ(c["red"]["packets"], a["red"]["packets"]);
    }
    {
        json b = stats(in);
        RunResult rx;
        std::thread t([&] {
            rx = engine->docker(
                {"exec", "hostnet", udp_tool_path(), "recv", lab.host_v4, "9001", "4"});
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        uint64_t t0 = mono_ns();
        auto r = lab.in_ns({udp_tool_path(), "send", lab.host_v4, "9001", "10000", "972", "5000"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        json a = stats(in);
        const uint64_t ns = mono_ns() - t0;
        t.join();
        expect_udp_within(b, a, ns);
        std::smatch m;
        ASSERT_TRUE(std::regex_search(rx.out, m, std::regex("packets (\\d+) "))) << rx.out;
        // Green reached the container's socket, red did not (a green datagram may still find
        // the socket's buffer full: metered as it reaches the socket, before its queue).
        const uint64_t got = std::stoull(m[1]), green = a["green"]["packets"].get<uint64_t>() -
                                                        b["green"]["packets"].get<uint64_t>();
        EXPECT_LE(got, green);
        EXPECT_GE(got, green - green / 100);
    }
    ASSERT_NO_FATAL_FAILURE(remove_and_expect_no_policy("hostnet"));
    auto st = control_request(daemon->socket(), {{"cmd", "status"}});
    EXPECT_EQ((*st)["attachments"].size(), 1u) << "the host's interface, attached by the test";
}

// A container on two networks: one bucket a direction across both, by its cgroup, both of its
// veths attached; sent on either network, its datagrams count in the same egress policy.
TEST_F(Containers, OnTwoNetworksOneBucketADirectionCoversBoth) {
    ASSERT_NO_FATAL_FAILURE(start_engine());
    start_daemon();
    const std::string second = fmt::format("tcdn{}", getpid() % 1000);
    auto made = engine->docker({"network", "create", "--driver", "bridge", "--subnet",
                                "198.19.94.0/24", "--gateway", "198.19.94.1", "-o",
                                "com.docker.network.bridge.name=" + second, "-o",
                                "com.docker.network.bridge.enable_ip_masquerade=false", "second"});
    ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
    // Created stopped, joined to the second network, then started: one start, both networks.
    const std::string tools = std::filesystem::path(udp_tool_path()).parent_path();
    auto c = engine->docker({"create", "--name", "twonets", "--label", "tricolor.egress=20mbit/64k",
                             "--label", "tricolor.ingress=20mbit/64k", "-v", "/usr:/usr:ro", "-v",
                             "/lib:/lib:ro", "-v", "/lib64:/lib64:ro", "-v",
                             tools + ":" + tools + ":ro", kImage, "/bin/busybox", "sleep", "3600"});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    const std::string id = c.out.substr(0, c.out.find('\n'));
    ASSERT_EQ(engine->docker({"network", "connect", "second", "twonets"}).exit_code, 0);
    ASSERT_EQ(engine->docker({"start", "twonets"}).exit_code, 0);
    const std::string cgroup = container_cgroup(*engine, "twonets", id);
    if (cgroup.empty())
        GTEST_SKIP() << "this dockerd gives its containers no cgroup v2 cgroup of their own";
    ASSERT_TRUE(within(2000, [&] { return count_policies() == 2; }))
        << policies().dump() << daemon->log();
    auto st = control_request(daemon->socket(), {{"cmd", "status"}});
    EXPECT_EQ((*st)["attachments"].size(), 4u) << "both veths, each way: " << st->dump();
    const std::string out = pname(id, false);
    for (const auto &p : policies())
        EXPECT_EQ(p["match"]["cgroup"], cgroup) << p.dump();
    // The container's egress leaves by either veth; its packets carry their socket (and so its
    // cgroup) to tc ingress of the veth's host end.
    json b = stats(out);
    for (const char *to : {"198.19.91.1", "198.19.94.1"}) {
        auto r = engine->docker(
            {"exec", "twonets", udp_tool_path(), "send", to, "9", "500", "972", "5000"});
        ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    }
    json a = stats(out);
    EXPECT_EQ(a["green"]["packets"].get<uint64_t>() + a["red"]["packets"].get<uint64_t>() -
                  b["green"]["packets"].get<uint64_t>() - b["red"]["packets"].get<uint64_t>(),
              1000u)
        << "both networks' datagrams in one policy";
    ASSERT_NO_FATAL_FAILURE(remove_and_expect_no_policy("twonets"));
    st = control_request(daemon->socket(), {{"cmd", "status"}});
    EXPECT_TRUE((*st)["attachments"].empty()) << st->dump();
    engine->docker({"network", "rm", "second"});
}

// A label that does not parse: said once with the container's name, listed in status, nothing
// made; the engine unreachable when the daemon starts: it starts, says so, and catches up.
TEST_F(Containers, BadLabelsAreRefusedAndAnEngineThatComesLaterIsCaughtUp) {
    start_daemon(); // no dockerd yet
    auto c = containers_status();
    EXPECT_EQ(c["connected"], false) << c.dump();
    EXPECT_NE(c["last_error"].get<std::string>().find("cannot connect"), std::string::npos)
        << c.dump();
    ASSERT_NO_FATAL_FAILURE(start_engine());
    ASSERT_TRUE(within(3000, [&] { return containers_status()["connected"] == true; }))
        << containers_status().dump() << daemon->log();
    engine->run("fast", {"tricolor.egress=fast"});
    engine->run("typo", {"tricolor.egres=20mbit"});
    engine->run("good", {"tricolor.ingress=10mbit"});
    ASSERT_TRUE(within(2000, [&] { return count_policies() == 1; })) << policies().dump();
    ASSERT_TRUE(within(1000, [&] { return containers_status()["bad_labels"].size() == 2; }));
    c = containers_status();
    EXPECT_NE(c["bad_labels"]["fast"].get<std::string>().find("tricolor.egress=fast"),
              std::string::npos)
        << c.dump();
    EXPECT_NE(c["bad_labels"]["typo"].get<std::string>().find("unknown"), std::string::npos)
        << c.dump();
    // The default burst: 10 ms of the rate, at least 64 KiB.
    auto show = control_request(
        daemon->socket(),
        {{"cmd", "policy_show"}, {"name", pname(engine->inspect("good", "{{.Id}}"), true)}});
    EXPECT_EQ((*show)["policy"]["cbs"], "65536") << show->dump();
    const std::string log = daemon->log();
    const auto first = log.find("container fast");
    ASSERT_NE(first, std::string::npos) << log;
    EXPECT_EQ(log.find("container fast", first + 1), std::string::npos) << "once: " << log;
    // tricolor.policy=NAME: a policy of the daemon's (only_parent: it matches nothing itself)
    // whose meter and actions the container's copy, both ways at its own rate; with a rate
    // label, that direction only, at the label's rate. A name tricolord has not: said, nothing
    // made.
    ASSERT_EQ(
        daemon
            ->ctl({"policy", "add", "gold", "--algo", "trtcm", "--cir", "3mbit", "--cbs", "32k",
                   "--pir", "6mbit", "--pbs", "64k", "--yellow", "dscp:af12", "--only-parent"})
            .exit_code,
        0);
    const std::string t1 = engine->run("templated", {"tricolor.policy=gold"});
    const std::string t2 =
        engine->run("templated-out", {"tricolor.policy=gold", "tricolor.egress=5mbit"});
    engine->run("no-template", {"tricolor.policy=silver"});
    ASSERT_TRUE(within(2000, [&] { return count_policies() == 1 + 1 + 2 + 1; }))
        << policies().dump();
    auto spec = [&](const std::string &name) {
        auto s = control_request(daemon->socket(), {{"cmd", "policy_show"}, {"name", name}});
        return s && s->value("ok", false) ? (*s)["policy"] : json();
    };
    EXPECT_EQ(spec(pname(t1, true))["algo"], "trtcm");
    EXPECT_EQ(spec(pname(t1, false))["pir"], "6mbit");
    EXPECT_EQ(spec(pname(t1, false))["cir"], "3mbit");
    EXPECT_FALSE(spec(pname(t1, false)).contains("only_parent"));
    EXPECT_EQ(spec(pname(t2, false))["cir"], "5000000bit");
    EXPECT_EQ(spec(pname(t2, false))["yellow"], "dscp:af12");
    EXPECT_TRUE(spec(pname(t2, true)).is_null());
    ASSERT_TRUE(
        within(1000, [&] { return containers_status()["skipped"].contains("no-template"); }));
    EXPECT_NE(
        containers_status()["skipped"]["no-template"].get<std::string>().find("no policy 'silver'"),
        std::string::npos);
    engine->docker({"rm", "-f", "templated", "templated-out", "no-template"});
    ASSERT_TRUE(within(1000, [&] { return count_policies() == 2; })) << policies().dump();
    daemon->ctl({"policy", "del", "gold"});
    // Removed: no longer listed.
    engine->docker({"rm", "-f", "fast", "typo", "good"});
    ASSERT_TRUE(within(1000, [&] {
        return count_policies() == 0 && containers_status()["bad_labels"].empty();
    })) << containers_status().dump();
}

// 50 labelled containers started and removed in a burst, tricolord killed and restarted in the
// middle of it: the policies follow the containers, none twice, none left.
TEST_F(Containers, FiftyInABurstWithTheDaemonRestartedMidwayLeaveNothing) {
    ASSERT_NO_FATAL_FAILURE(start_engine());
    start_daemon();
    constexpr int kN = 50;
    std::vector<std::string> names;
    std::thread starter([&] {
        for (int i = 0; i < kN; ++i) {
            names.push_back(fmt::format("burst{}", i));
            engine->run(names.back(), {"tricolor.egress=5mbit"});
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    daemon->kill9();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    daemon->start();
    starter.join();
    ASSERT_TRUE(within(5000, [&] { return count_policies() == kN; }))
        << count_policies() << " policies: " << daemon->log();
    std::set<std::string> unique;
    for (const auto &p : policies())
        unique.insert(p["name"].get<std::string>());
    EXPECT_EQ(unique.size(), static_cast<size_t>(kN));
    // Half removed while the daemon is down: the restart removes theirs.
    std::vector<std::string> args = {"rm", "-f"};
    args.insert(args.end(), names.begin(), names.begin() + kN / 2);
    daemon->kill9();
    ASSERT_EQ(engine->docker(args).exit_code, 0);
    daemon->start();
    ASSERT_TRUE(within(5000, [&] { return count_policies() == kN / 2; }))
        << count_policies() << " policies: " << daemon->log();
    args = {"rm", "-f"};
    args.insert(args.end(), names.begin() + kN / 2, names.end());
    ASSERT_EQ(engine->docker(args).exit_code, 0);
    ASSERT_TRUE(within(3000, [&] { return count_policies() == 0; }))
        << policies().dump() << daemon->log();
    auto st = control_request(daemon->socket(), {{"cmd", "status"}});
    EXPECT_TRUE((*st)["attachments"].empty()) << st->dump();
}

namespace {

// Podman's Docker-compatible API (podman system service), with storage, run and network
// directories of the test's own: a network in 198.19.92.0/24 the test wrote (bridge and
// host-local, no masquerade, no firewall rules), and a busybox image imported as for Docker.
class PodmanService {
  public:
    PodmanService() {
        dir = fmt::format("/tmp/tricolor-e2e-podman-{}", getpid());
        bridge = fmt::format("tcpd{}", getpid() % 1000);
        std::filesystem::create_directories(dir + "/net");
        std::ofstream(dir + "/net/tcpod.conflist")
            << json{{"cniVersion", "0.4.0"},
                    {"name", "tcpod"},
                    {"plugins",
                     {{{"type", "bridge"},
                       {"bridge", bridge},
                       {"isGateway", true},
                       {"ipMasq", false},
                       {"ipam",
                        {{"type", "host-local"},
                         {"ranges",
                          {{{{"subnet", "198.19.92.0/24"}, {"gateway", "198.19.92.1"}}}}}}}}}}}
                   .dump();
    }
    ~PodmanService() {
        if (pid > 0) {
            podman({"rm", "-a", "-f", "-t", "0"});
            kill(pid, SIGTERM);
            waitpid(pid, nullptr, 0);
        }
        run_command({"/sbin/ip", "link", "del", bridge});
        run_command({"/bin/sh", "-c", "umount -R " + dir + "/root/* 2>/dev/null"});
        std::filesystem::remove_all(dir);
    }
    std::vector<std::string> base() const {
        return {"/usr/bin/podman",
                "--root",
                dir + "/root",
                "--runroot",
                dir + "/run",
                "--storage-driver",
                "vfs",
                "--network-config-dir",
                dir + "/net",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
                "--tmpdir",
                dir + "/tmp"};
    }
    RunResult podman(std::vector<std::string> args) const {
        auto argv = base();
        argv.insert(argv.end(), args.begin(), args.end());
        return run_command(argv);
    }
    std::string socket() const { return dir + "/podman.sock"; }
    bool start(std::string *why) {
        const std::string root = busybox_root(dir);
        std::string cmd;
        for (const auto &a : base())
            cmd += a + " ";
        auto r = run_command(
            {"/bin/sh", "-c", "tar -C " + root + " -c . | " + cmd + "import - " + kImage});
        if (r.exit_code != 0) {
            *why = r.out + r.err;
            return false;
        }
        auto argv = base();
        argv.insert(argv.end(), {"system", "service", "--time=0", "unix://" + socket()});
        pid = spawn(argv, dir + "/service.log");
        for (int i = 0; i < 100; ++i) {
            if (access(socket().c_str(), F_OK) == 0)
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        *why = "podman system service did not make its socket";
        return false;
    }
    // A container that sleeps (podman's default limits above this machine's hard ones: set).
    std::string run(const std::string &name, const std::vector<std::string> &labels) const {
        std::vector<std::string> args = {"run",       "-d",
                                         "--ulimit",  "nofile=1024:1024",
                                         "--ulimit",  "nproc=1024:1024",
                                         "--network", "tcpod",
                                         "--name",    name};
        for (const auto &l : labels)
            args.insert(args.end(), {"--label", l});
        args.insert(args.end(), {kImage, "/bin/busybox", "sleep", "3600"});
        auto r = podman(args);
        EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
        return r.out.substr(0, r.out.find('\n'));
    }

    std::string dir, bridge;
    pid_t pid = -1;
};

} // namespace

// Podman through its Docker-compatible API: a container running when the daemon starts and one
// started after are limited (UDP within the bound), and `podman rm` takes theirs within a second.
TEST_F(Containers, PodmanContainersAreLimitedThroughItsCompatibleApi) {
    if (access("/usr/bin/podman", X_OK) != 0)
        GTEST_SKIP() << "podman is not installed (./tricolor.sh test installs it)";
    PodmanService pod;
    std::string why;
    ASSERT_TRUE(pod.start(&why)) << why;
    const std::string before = pod.run("early", {"tricolor.egress=20mbit/64k"});
    daemon = std::make_unique<Daemon>(
        "podman", std::vector<std::string>{"--containers", "podman=" + pod.socket()});
    ASSERT_TRUE(within(3000, [&] { return count_policies() == 1; }))
        << policies().dump() << daemon->log();
    const std::string after = pod.run("late", {"tricolor.egress=20mbit/64k"});
    ASSERT_TRUE(within(2000, [&] { return count_policies() == 2; }))
        << policies().dump() << daemon->log();
    const std::string out = fmt::format("podman-{}-out", after.substr(0, 12));
    const std::string pid_text = pod.podman({"inspect", "-f", "{{.State.Pid}}", "late"}).out;
    json b = stats(out);
    ASSERT_FALSE(b.is_null()) << policies().dump();
    uint64_t t0 = mono_ns();
    auto r = run_command({"/usr/bin/nsenter",
                          "--net=/proc/" + pid_text.substr(0, pid_text.find('\n')) + "/ns/net",
                          udp_tool_path(), "send", "198.19.92.1", "9", "10000", "972", "5000"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_udp_within(b, stats(out), mono_ns() - t0);
    ASSERT_EQ(pod.podman({"rm", "-f", "-t", "0", "early", "late"}).exit_code, 0);
    ASSERT_TRUE(within(1000, [&] { return count_policies() == 0; })) << policies().dump();
}

// containers: in the config file: followed after a reload, stopped by the next that leaves it
// out; a bad entry refuses the reload, naming it, and changes nothing.
TEST_F(Containers, TheConfigsContainersSectionIsFollowedAndAReloadStopsIt) {
    ASSERT_NO_FATAL_FAILURE(start_engine());
    daemon = std::make_unique<Daemon>("containers-config");
    auto engines = [&] {
        auto r = control_request(daemon->socket(), {{"cmd", "status"}});
        return r ? (*r)["containers"] : json();
    };
    EXPECT_TRUE(engines().empty());
    std::ofstream(daemon->config()) << "containers: [docker=" << engine->socket() << "]\n";
    daemon->hup();
    ASSERT_TRUE(
        within(3000, [&] { return engines().size() == 1 && engines()[0]["connected"] == true; }))
        << engines().dump() << daemon->log();
    engine->run("cfg", {"tricolor.ingress=10mbit"});
    ASSERT_TRUE(within(2000, [&] { return count_policies() == 1; })) << daemon->log();
    // A reload keeps what was made for a container (not the config's to remove), policy and
    // attachments, beside a policy the config adds.
    std::ofstream(daemon->config()) << "containers: [docker=" << engine->socket()
                                    << "]\npolicies:\n  - {name: mine, algo: srtcm, cir: 1mbit, "
                                       "cbs: 16k, ebs: 0, match: {proto: icmp}}\n";
    daemon->hup();
    ASSERT_TRUE(within(2000, [&] { return count_policies() == 2; })) << daemon->log();
    {
        auto st = control_request(daemon->socket(), {{"cmd", "status"}});
        EXPECT_EQ((*st)["attachments"].size(), 2u) << st->dump();
    }
    std::ofstream(daemon->config()) << "containers: [docker=relative.sock]\n";
    daemon->hup();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_NE(daemon->log().find("containers: \"docker=relative.sock\" is not docker"),
              std::string::npos)
        << daemon->log();
    EXPECT_EQ(engines().size(), 1u);
    std::ofstream(daemon->config()) << "containers: []\n";
    daemon->hup();
    ASSERT_TRUE(within(2000, [&] { return engines().empty(); })) << engines().dump();
}
