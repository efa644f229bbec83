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

#include <filesystem>
#include <thread>

#include <unistd.h>

using namespace tricolor;
using namespace tricolor::test;
using nlohmann::json;

namespace {

constexpr const char *kRefPlugins = "/usr/lib/cni";
constexpr uint64_t kRate = 20000000;       // bit/s
constexpr uint64_t kBurstBits = 65536 * 8; // 64 KiB

// The names the plugin gives a container's policies (docs/containers.md): by its id.
std::string cni_policy(const std::string &id, bool ingress) {
    return fmt::format("cni-{}-{}", id.substr(0, 52), ingress ? "in" : "out");
}

std::string plugin_dir() {
    return std::string(TRICOLOR_BINARY_DIR) + "/tools/cni";
}

uint64_t mono_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
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
    RunResult invoke(const std::string &command, const json &list, size_t index, const json &prev,
                     const json &runtime_bw, const std::string &id,
                     const std::string &args = "") const {
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
                            "CNI_NETNS=" + netns_path, "CNI_IFNAME=eth0", "CNI_ARGS=" + args,
                            "CNI_PATH=" + plugin_dir() + ":" + kRefPlugins, dir + "/" + type},
                           conf.dump());
    }
    // ADD through the whole chain: the final result, or the failing plugin's output.
    json add(const json &list, const json &bw, std::string *failure = nullptr,
             const std::string &id = "") {
        json prev;
        for (size_t i = 0; i < list["plugins"].size(); ++i) {
            auto r = invoke("ADD", list, i, prev, bw, id.empty() ? container : id);
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

    // CHECK: all there.
    auto c = invoke("CHECK", list, 1, result, bandwidth(), container);
    EXPECT_EQ(c.exit_code, 0) << c.out << c.err;

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
