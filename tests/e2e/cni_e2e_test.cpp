// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The `tricolor` CNI plugin end to end (docs/containers.md): the real chain a runtime runs -
// containernetworking-plugins' bridge with host-local, then tricolor - with the CNI
// environment and stdin per the spec (runtimeConfig for the capabilities a plugin declares,
// prevResult from the plugin before it; DEL in reverse), into a network namespace the test
// made, against a real tricolord. The "pod" gets 198.19.77.0/24 from host-local; the host is
// the bridge's gateway.
#include "lab.hpp"
#include "tricolor/control.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;

namespace {

constexpr const char *kRefPlugins = "/usr/lib/cni";
// As the kubelet's runtime passes them.
constexpr const char *kArgs =
    "IgnoreUnknown=1;K8S_POD_NAMESPACE=web;K8S_POD_NAME=frontend-0;K8S_POD_INFRA_CONTAINER_ID=x";
constexpr uint64_t kRate = 20000000;       // bit/s
constexpr uint64_t kBurstBits = 65536 * 8; // 64 KiB

// The names the plugin gives a container's policies (docs/containers.md): by its id.
std::string cni_policy(const std::string &id, bool ingress) {
    return fmt::format("cni-{}-{}", id.substr(0, 52), ingress ? "in" : "out");
}

std::string plugin_dir() {
    return std::string(TRICOLOR_BINARY_DIR) + "/tools/cni";
}

// A network namespace as a runtime makes one for a pod, and a conflist for it.
class Cni : public ::testing::Test {
  protected:
    void SetUp() override {
        TRICOLOR_REQUIRE_ROOT();
        if (access((std::string(kRefPlugins) + "/bridge").c_str(), X_OK) != 0)
            GTEST_SKIP() << "containernetworking-plugins is not installed (./tricolor.sh test "
                            "installs it)";
        const int n = getpid() % 1000;
        netns = fmt::format("tccni{}", n);
        bridge = fmt::format("tccnibr{}", n);
        run_command({"/sbin/ip", "netns", "del", netns});
        ASSERT_EQ(run_command({"/sbin/ip", "netns", "add", netns}).exit_code, 0);
        netns_path = "/var/run/netns/" + netns;
        ipam_dir = fmt::format("/tmp/tricolor-e2e-cni-ipam-{}", getpid());
        daemon = std::make_unique<Daemon>("cni");
        container = fmt::format("{:016x}{:016x}", static_cast<uint64_t>(getpid()), mono_ns());
    }
    void TearDown() override {
        if (!netns.empty()) {
            run_command({"/sbin/ip", "netns", "del", netns});
            run_command({"/sbin/ip", "link", "del", bridge});
        }
        std::filesystem::remove_all(ipam_dir);
    }

    // The network list: bridge (host-local IPAM), then tricolor with the bandwidth capability.
    json conflist(const json &tricolor_extra = json::object()) const {
        json t = {{"type", "tricolor"},
                  {"capabilities", {{"bandwidth", true}}},
                  {"socket", daemon->socket()}};
        if (tricolor_extra.is_object())
            t.update(tricolor_extra);
        return {{"cniVersion", "1.0.0"},
                {"name", "tricolor-test"},
                {"plugins",
                 {{{"type", "bridge"},
                   {"bridge", bridge},
                   {"isGateway", true},
                   {"ipMasq", false},
                   {"ipam",
                    {{"type", "host-local"},
                     {"dataDir", ipam_dir},
                     {"ranges", {{{{"subnet", "198.19.77.0/24"}}}}}}}},
                  t}}};
    }
    json bandwidth(uint64_t rate = kRate, uint64_t burst = kBurstBits) const {
        return {{"ingressRate", rate},
                {"ingressBurst", burst},
                {"egressRate", rate},
                {"egressBurst", burst}};
    }

    // One plugin invocation as the runtime makes it (CNI SPEC "Section 4: Plugin Delegation").
    // @ns: the network namespace's path (default: the fixture's).
    RunResult invoke(const std::string &command, const json &list, size_t index, const json &prev,
                     const json &runtime_bw, const std::string &id, const std::string &args = "",
                     const std::string &ns = "") const {
        json conf = list["plugins"][index];
        conf["cniVersion"] = list["cniVersion"];
        conf["name"] = list["name"];
        if (conf.contains("capabilities") && conf["capabilities"].value("bandwidth", false) &&
            !runtime_bw.is_null())
            conf["runtimeConfig"] = {{"bandwidth", runtime_bw}};
        if (!prev.is_null())
            conf["prevResult"] = prev;
        const std::string type = conf["type"];
        const std::string dir = type == "tricolor" ? plugin_dir() : kRefPlugins;
        return run_command({"/usr/bin/env", "CNI_COMMAND=" + command, "CNI_CONTAINERID=" + id,
                            "CNI_NETNS=" + (ns.empty() ? netns_path : ns), "CNI_IFNAME=eth0",
                            "CNI_ARGS=" + args, "CNI_PATH=" + plugin_dir() + ":" + kRefPlugins,
                            dir + "/" + type},
                           conf.dump());
    }
    // ADD through the whole chain: the final result, or the failing plugin's output.
    json add(const json &list, const json &bw, std::string *failure = nullptr,
             const std::string &id = "") {
        json prev;
        for (size_t i = 0; i < list["plugins"].size(); ++i) {
            auto r = invoke("ADD", list, i, prev, bw, id.empty() ? container : id, kArgs);
            if (r.exit_code != 0) {
                if (failure)
                    *failure = r.out + r.err;
                else
                    ADD_FAILURE() << "plugin " << i << ": " << r.out << r.err;
                return json();
            }
            prev = json::parse(r.out);
        }
        return prev;
    }
    void del(const json &list, const json &result, const json &bw) {
        for (size_t i = list["plugins"].size(); i-- > 0;) {
            auto r = invoke("DEL", list, i, result, bw, container);
            EXPECT_EQ(r.exit_code, 0) << "DEL of plugin " << i << ": " << r.out << r.err;
        }
    }
    std::string pod_ip(const json &result) const {
        std::string a = result["ips"][0]["address"];
        return a.substr(0, a.find('/'));
    }
    RunResult in_pod(std::vector<std::string> argv) const {
        argv.insert(argv.begin(), {"/usr/bin/nsenter", "--net=" + netns_path});
        return run_command(argv);
    }
    json stats(const std::string &name) const {
        auto r = control_request(daemon->socket(), {{"cmd", "stats"}, {"name", name}});
        return r && r->value("ok", false) ? (*r)["policies"][0] : json();
    }

    std::string netns, netns_path, bridge, ipam_dir, container;
    std::unique_ptr<Daemon> daemon;
};

// UDP at twice the rate: green within CBS + rate*T, where T runs from before the first
// datagram was sent to after the stats were read (conservative), and red refused the rest.
void expect_udp_within(const json &before, const json &after, uint64_t ns) {
    const uint64_t green =
        after["green"]["bytes"].get<uint64_t>() - before["green"]["bytes"].get<uint64_t>();
    const __int128 bound_bits =
        static_cast<__int128>(kBurstBits) * 1000000000 + static_cast<__int128>(kRate) * ns;
    EXPECT_LE(static_cast<__int128>(green) * 8 * 1000000000, bound_bits)
        << green << " green bytes in " << ns / 1e9 << " s";
    EXPECT_GT(after["red"]["packets"].get<uint64_t>(), before["red"]["packets"].get<uint64_t>());
    // And not far under: the bucket's rate, not a fraction of it.
    EXPECT_GE(static_cast<double>(green) * 8 / (ns / 1e9), 0.9 * kRate)
        << green << " green bytes in " << ns / 1e9 << " s";
}

} // namespace

TEST_F(Cni, TheChainLimitsThePodBothWaysAndDelLeavesNothing) {
    const json list = conflist();
    json result = add(list, bandwidth());
    ASSERT_FALSE(result.is_null());
    const std::string ip = pod_ip(result);
    const std::string in = cni_policy(container, true), out = cni_policy(container, false);
    ASSERT_FALSE(stats(in).is_null()) << daemon->log();
    ASSERT_FALSE(stats(out).is_null()) << daemon->log();
    // Named by the pod where CNI_ARGS says which: stats (JSON and table) and flows.
    EXPECT_EQ(stats(in)["owner"], "pod web/frontend-0");
    EXPECT_NE(daemon->ctl({"stats"}).out.find("pod web/frontend-0"), std::string::npos);

    // The pod sends (egress) at 40 Mbit/s for 2 s, to the host (the bridge's gateway).
    {
        json b = stats(out);
        uint64_t t0 = mono_ns();
        auto r = in_pod({udp_tool_path(), "send", "198.19.77.1", "9", "10000", "972", "5000"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        json a = stats(out);
        expect_udp_within(b, a, mono_ns() - t0);
    }
    // The host sends to the pod (ingress) the same.
    {
        json b = stats(in);
        uint64_t t0 = mono_ns();
        auto r = run_command({udp_tool_path(), "send", ip, "9", "10000", "972", "5000"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        json a = stats(in);
        expect_udp_within(b, a, mono_ns() - t0);
    }

    // TCP each way (iperf3, 4 s): at least 95% of the rate. The pod's sockets and the host's
    // are this kernel's: --shape sockets (the plugin's default) paces them to their bucket.
    if (run_command({"/bin/sh", "-c", "command -v iperf3"}).exit_code == 0) {
        const std::string pid = fmt::format("/tmp/tricolor-e2e-cni-iperf3-{}.pid", getpid());
        auto server = in_pod({"/usr/bin/iperf3", "-s", "-D", "-B", ip, "--pidfile", pid});
        ASSERT_EQ(server.exit_code, 0) << server.err;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        for (bool reverse : {false, true}) { // to the pod (ingress), then from it (egress)
            std::vector<std::string> argv = {"/usr/bin/iperf3", "-c", ip, "-t", "4", "-J"};
            if (reverse)
                argv.push_back("-R");
            auto r = run_command(argv);
            ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
            double bps = json::parse(r.out)["end"]["sum_received"]["bits_per_second"];
            std::printf("TCP %s the pod: %.2f Mbit/s (%.1f%% of the rate)\n",
                        reverse ? "from" : "to", bps / 1e6, 100 * bps / kRate);
            EXPECT_GE(bps, 0.95 * kRate) << (reverse ? "egress" : "ingress");
            EXPECT_LE(bps, 1.01 * kRate) << (reverse ? "egress" : "ingress");
        }
        run_command({"/bin/sh", "-c", "kill $(cat " + pid + ") 2>/dev/null; rm -f " + pid});
    }

    // CHECK: all there; and still, after a reload of a config that names none of it (a pod's
    // limits are not the config's to remove).
    auto c = invoke("CHECK", list, 1, result, bandwidth(), container);
    EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
    std::ofstream(daemon->config()) << "policies: []\n";
    daemon->hup();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_NE(daemon->log().find("reloaded"), std::string::npos) << daemon->log();
    c = invoke("CHECK", list, 1, result, bandwidth(), container);
    EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
    // And a daemon started again from a config newer than its state (a DaemonSet's ConfigMap
    // edited): the state's pod policies and attachments stay.
    daemon->settle_state();
    daemon->kill9();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ofstream(daemon->config()) << "policies: []\n";
    daemon->start();
    EXPECT_NE(daemon->log().find("applying the config"), std::string::npos) << daemon->log();
    c = invoke("CHECK", list, 1, result, bandwidth(), container);
    EXPECT_EQ(c.exit_code, 0) << c.out << c.err << daemon->log();

    // DEL in reverse: no policy, no attachment of the pod's interface, nothing in status.
    const std::string host_if = [&] {
        for (const auto &i : result["interfaces"])
            if (!i.contains("sandbox") && i["name"] != bridge)
                return i["name"].get<std::string>();
        return std::string();
    }();
    ASSERT_FALSE(host_if.empty()) << result.dump();
    del(list, result, bandwidth());
    EXPECT_TRUE(stats(in).is_null());
    EXPECT_TRUE(stats(out).is_null());
    auto st = control_request(daemon->socket(), {{"cmd", "status"}});
    ASSERT_TRUE(st);
    for (const auto &a : (*st)["attachments"])
        EXPECT_NE(a.value("iface", ""), host_if) << st->dump();
    // A second DEL (the runtime retries): nothing to remove is success.
    auto again = invoke("DEL", list, 1, result, bandwidth(), container);
    EXPECT_EQ(again.exit_code, 0) << again.out;
}

// Every bad input is a CNI error object on stdout (code, msg naming what is wrong) with a
// non-zero exit, and the daemon is left as it was: no policy, no attachment.
TEST_F(Cni, BadInputIsACniErrorAndMakesNothing) {
    json list = conflist();
    json prev;
    {
        auto r = invoke("ADD", list, 0, json(), json(), container); // bridge alone
        ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
        prev = json::parse(r.out);
    }
    auto nothing_made = [&](const std::string &what) {
        auto l = control_request(daemon->socket(), {{"cmd", "policy_list"}});
        ASSERT_TRUE(l);
        EXPECT_TRUE((*l)["policies"].empty()) << what << ": " << l->dump();
        auto st = control_request(daemon->socket(), {{"cmd", "status"}});
        EXPECT_TRUE((*st)["attachments"].empty()) << what << ": " << st->dump();
    };
    struct Case {
        std::string what;
        json conf_patch; // merged into tricolor's entry
        json bw;         // runtimeConfig.bandwidth
        int code;
        std::string says;
    };
    json no_if = prev;
    no_if["interfaces"] = json::array();
    const std::vector<Case> cases = {
        {"no daemon",
         {{"socket", "/tmp/tricolor-e2e-cni-nobody.sock"}},
         bandwidth(),
         11,
         "does not answer"},
        {"rate 0", {}, bandwidth(0), 7, "ingressRate must be a positive integer"},
        {"negative rate",
         {},
         {{"egressRate", -5}, {"egressBurst", 1000}},
         7,
         "egressRate must be a positive integer"},
        {"fractional rate",
         {},
         {{"egressRate", 1.5e7}, {"egressBurst", 524288}},
         7,
         "egressRate must be a positive integer"},
        {"rate as text",
         {},
         {{"ingressRate", "20M"}, {"ingressBurst", 524288}},
         7,
         "ingressRate must be a positive integer"},
        {"burst without rate", {}, {{"ingressBurst", 524288}}, 7, "a burst needs a rate"},
        {"rate without burst", {}, {{"ingressRate", 20000000}}, 7, "say the burst too"},
        {"unknown key", {{"ingresRate", 5}}, bandwidth(), 2, "unknown key 'ingresRate'"},
        {"unknown bandwidth key", {}, {{"ingressrate", 5}}, 2, "runtimeConfig.bandwidth"},
        {"bad shape", {{"shape", "warp"}}, bandwidth(), 101, "shape"},
    };
    for (const auto &k : cases) {
        json l = conflist(k.conf_patch);
        auto r = invoke("ADD", l, 1, prev, k.bw, container);
        EXPECT_NE(r.exit_code, 0) << k.what;
        json e = json::parse(r.out, nullptr, false);
        ASSERT_TRUE(e.is_object()) << k.what << ": " << r.out << r.err;
        EXPECT_EQ(e.value("code", 0), k.code) << k.what << ": " << r.out;
        EXPECT_NE(e.value("msg", "").find(k.says), std::string::npos) << k.what << ": " << r.out;
        EXPECT_EQ(e.value("cniVersion", ""), "1.0.0") << k.what;
        nothing_made(k.what);
    }
    // A prevResult without the container's interface; none at all.
    auto r = invoke("ADD", list, 1, no_if, bandwidth(), container);
    EXPECT_NE(r.out.find("names no interface 'eth0'"), std::string::npos) << r.out;
    EXPECT_NE(r.exit_code, 0);
    r = invoke("ADD", list, 1, json(), bandwidth(), container);
    EXPECT_NE(r.out.find("no prevResult"), std::string::npos) << r.out;
    nothing_made("prevResult");
    // An unsupported cniVersion.
    json old = list;
    old["cniVersion"] = "0.2.0";
    r = invoke("ADD", old, 1, prev, bandwidth(), container);
    EXPECT_NE(r.out.find("\"code\":1"), std::string::npos) << r.out;

    // A second ADD for a container that has its policies: refused, the first's untouched.
    r = invoke("ADD", list, 1, prev, bandwidth(), container);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    r = invoke("ADD", list, 1, prev, bandwidth(5000000, 80000), container);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.out.find("\"code\":100"), std::string::npos) << r.out;
    EXPECT_EQ(stats(cni_policy(container, true))["name"], cni_policy(container, true));
    auto show = control_request(daemon->socket(),
                                {{"cmd", "policy_show"}, {"name", cni_policy(container, true)}});
    EXPECT_EQ((*show)["policy"]["cir"], "20000000bit") << show->dump();
    // CHECK sees drift: a policy removed behind the plugin's back.
    control_request(daemon->socket(),
                    {{"cmd", "policy_del"}, {"name", cni_policy(container, false)}});
    r = invoke("CHECK", list, 1, prev, bandwidth(), container);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.out.find("is missing"), std::string::npos) << r.out;
    // DEL with the daemon gone succeeds (nothing it can remove).
    json gone = conflist({{"socket", "/tmp/tricolor-e2e-cni-nobody.sock"}});
    r = invoke("DEL", gone, 1, prev, bandwidth(), container);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    // VERSION.
    r = run_command({"/usr/bin/env", "CNI_COMMAND=VERSION", plugin_dir() + "/tricolor"});
    EXPECT_EQ(json::parse(r.out)["supportedVersions"], json({"0.3.0", "0.3.1", "0.4.0", "1.0.0"}));
    invoke("DEL", list, 1, prev, bandwidth(), container);
    // Rates alone: containerd's burst of 2^32-1 bits is "not set" (10 ms of the rate, at least
    // 64 KiB), not 512 MiB.
    r = invoke("ADD", list, 1, prev, bandwidth(kRate, 4294967295ull), container);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    show = control_request(daemon->socket(),
                           {{"cmd", "policy_show"}, {"name", cni_policy(container, true)}});
    EXPECT_EQ((*show)["policy"]["cbs"], "65536") << show->dump();
    invoke("DEL", list, 1, prev, bandwidth(), container);
    invoke("DEL", list, 0, prev, json(), container);
}

namespace {

// What the daemon holds: its resident memory (kB), open files, and what it made.
struct Held {
    long rss_kb = 0;
    size_t fds = 0, pins = 0, policies = 0, attachments = 0;
    uint64_t flows = 0;
};

Held held(const Daemon &d) {
    Held h;
    std::ifstream status(fmt::format("/proc/{}/status", d.pid()));
    for (std::string line; std::getline(status, line);)
        if (line.starts_with("VmRSS:"))
            h.rss_kb = std::stol(line.substr(6));
    for (auto &e : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", d.pid()))) {
        (void)e;
        h.fds++;
    }
    for (auto &e : std::filesystem::recursive_directory_iterator(d.pin_dir())) {
        (void)e;
        h.pins++;
    }
    auto l = control_request(d.socket(), {{"cmd", "policy_list"}});
    h.policies = l ? (*l)["policies"].size() : 999;
    auto st = control_request(d.socket(), {{"cmd", "status"}});
    h.attachments = st ? (*st)["attachments"].size() : 999;
    auto f = control_request(d.socket(), {{"cmd", "flows"}, {"walk", true}});
    h.flows = f ? (*f)["flows"].size() : 999;
    return h;
}

} // namespace

// Runtimes run chains concurrently: 200 pods added and deleted, 8 at a time, each through the
// whole chain in a namespace of its own. Every ADD and DEL succeeds; after them no policy,
// attachment, flow, pin or file of a pod is left, and the daemon's memory and open files are
// what they were after the first round (a leak of one thing per cycle would show).
TEST_F(Cni, TwoHundredPodsComeAndGoEightAtATimeAndLeaveNothing) {
    const json list = conflist();
    constexpr int kWorkers = 8, kPerWorker = 25;
    std::atomic<int> failures{0};
    Held after_first;
    auto cycle = [&](int w, int i) {
        const std::string ns = fmt::format("tccni{}w{}", getpid() % 1000, w);
        const std::string path = "/var/run/netns/" + ns;
        run_command({"/sbin/ip", "netns", "add", ns});
        const std::string id = fmt::format("churn{:04x}{:02x}{:04x}", getpid() % 65536, w, i);
        json prev;
        bool ok = true;
        for (size_t p = 0; p < list["plugins"].size() && ok; ++p) {
            auto r = invoke("ADD", list, p, prev, bandwidth(), id, "", path);
            if (r.exit_code != 0) {
                ok = false;
                ADD_FAILURE() << "ADD " << p << " of " << id << ": " << r.out << r.err;
            } else {
                prev = json::parse(r.out);
            }
        }
        for (size_t p = list["plugins"].size(); p-- > 0;) {
            auto r = invoke("DEL", list, p, prev, bandwidth(), id, "", path);
            if (r.exit_code != 0) {
                ok = false;
                ADD_FAILURE() << "DEL " << p << " of " << id << ": " << r.out << r.err;
            }
        }
        run_command({"/sbin/ip", "netns", "del", ns});
        if (!ok)
            failures++;
    };
    auto round = [&](int from, int to) {
        std::vector<std::thread> workers;
        for (int w = 0; w < kWorkers; ++w)
            workers.emplace_back([&, w] {
                for (int i = from; i < to; ++i)
                    cycle(w, i);
            });
        for (auto &t : workers)
            t.join();
    };
    const auto t0 = std::chrono::steady_clock::now();
    round(0, 2); // the first 16: what the daemon holds once it has seen pods come and go
    after_first = held(*daemon);
    round(2, kPerWorker);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Held end = held(*daemon);
    std::printf("%d pods in %.1f s; daemon RSS %ld -> %ld kB, fds %zu -> %zu, pins %zu -> %zu\n",
                kWorkers * kPerWorker, s, after_first.rss_kb, end.rss_kb, after_first.fds, end.fds,
                after_first.pins, end.pins);
    EXPECT_EQ(failures, 0);
    EXPECT_EQ(end.policies, 0u);
    EXPECT_EQ(end.attachments, 0u);
    EXPECT_EQ(end.flows, 0u);
    EXPECT_EQ(end.pins, after_first.pins);
    EXPECT_EQ(end.fds, after_first.fds);
    // Flat: within 2 MiB (allocator noise) of what it held after the first round.
    EXPECT_LE(end.rss_kb, after_first.rss_kb + 2048);
    // host-local's leases all given back.
    size_t leases = 0;
    for (auto &e : std::filesystem::recursive_directory_iterator(ipam_dir)) {
        const std::string n = e.path().filename();
        leases += n.starts_with("198.19.");
    }
    EXPECT_EQ(leases, 0u);
    // The state file holds no pod either.
    daemon->settle_state();
    std::ifstream st(daemon->state());
    std::string text((std::istreambuf_iterator<char>(st)), {});
    EXPECT_EQ(text.find("cni-churn"), std::string::npos) << text;
}

// What tricolor has beyond the reference plugin: another meter by its keys, or a template (a
// policy of tricolord's config, only_parent so that it matches nothing itself) whose meter and
// actions the pod's policies copy, with the capability's rate and burst.
TEST_F(Cni, OtherMetersByTheirKeysOrByATemplateFromTheConfig) {
    json prev;
    {
        auto r = invoke("ADD", conflist(), 0, json(), json(), container);
        ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
        prev = json::parse(r.out);
    }
    auto show = [&](bool in) {
        auto s = control_request(daemon->socket(),
                                 {{"cmd", "policy_show"}, {"name", cni_policy(container, in)}});
        return s && s->value("ok", false) ? (*s)["policy"] : json();
    };
    // trTCM by its keys.
    json l =
        conflist({{"algo", "trtcm"}, {"pir", "40mbit"}, {"pbs", "128k"}, {"yellow", "dscp:af12"}});
    auto r = invoke("ADD", l, 1, prev, bandwidth(), container);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(show(true)["algo"], "trtcm");
    EXPECT_EQ(show(true)["pir"], "40mbit");
    EXPECT_EQ(show(false)["yellow"], "dscp:af12");
    invoke("DEL", l, 1, prev, bandwidth(), container);
    // trTCM without its peak rate: the daemon's refusal, naming the field; nothing made.
    l = conflist({{"algo", "trtcm"}});
    r = invoke("ADD", l, 1, prev, bandwidth(), container);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.out.find("trtcm needs PIR"), std::string::npos) << r.out;
    EXPECT_TRUE(show(true).is_null());
    // A template.
    ASSERT_EQ(
        daemon
            ->ctl({"policy", "add", "gold", "--algo", "rfc4115", "--cir", "1mbit", "--cbs", "16k",
                   "--eir", "30mbit", "--ebs", "96k", "--yellow", "dscp:af12", "--only-parent"})
            .exit_code,
        0);
    l = conflist({{"template", "gold"}});
    r = invoke("ADD", l, 1, prev, bandwidth(), container);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    json p = show(true);
    EXPECT_EQ(p["algo"], "rfc4115") << p.dump();
    EXPECT_EQ(p["eir"], "30mbit") << p.dump();
    EXPECT_EQ(p["cir"], "20000000bit") << p.dump(); // the capability's
    EXPECT_FALSE(p.contains("only_parent")) << p.dump();
    EXPECT_EQ(p["match"]["dst"], pod_ip(prev) + "/32") << p.dump();
    EXPECT_EQ(p["yellow"], "dscp:af12") << p.dump();
    invoke("DEL", l, 1, prev, bandwidth(), container);
    // A template that is not there; a template beside a meter key.
    r = invoke("ADD", conflist({{"template", "silver"}}), 1, prev, bandwidth(), container);
    EXPECT_NE(r.out.find("template 'silver': tricolord has no such policy"), std::string::npos)
        << r.out;
    r = invoke("ADD", conflist({{"template", "gold"}, {"shape", "off"}}), 1, prev, bandwidth(),
               container);
    EXPECT_NE(r.out.find("shape and template"), std::string::npos) << r.out;
    EXPECT_TRUE(show(true).is_null());
    invoke("DEL", conflist(), 0, prev, json(), container);
}
