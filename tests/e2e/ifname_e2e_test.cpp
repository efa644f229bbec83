// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// attach --match-ifname (docs/spec.md §11): interfaces that come and go, as a container's
// host-side veth does, attached by a pattern within a second and let go when they are deleted;
// the pattern kept across a restart; bad patterns refused.
#include "lab.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <regex>
#include <thread>

using namespace tricolor::test;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

// A veth pair made by the test, its far end in a namespace of its own (a container), names
// this process's own: the pattern below matches nothing of another test running beside it.
struct Container {
    std::string ns, host_if, ns_if, host_v4, ns_v4;
    explicit Container(int i) {
        int n = getpid() % 10000;
        ns = fmt::format("tcmi{}-{}", n, i);
        host_if = fmt::format("tcmi{}h{}", n, i);
        ns_if = fmt::format("tcmi{}n{}", n, i);
        int third = (getpid() + i) % 250; // 198.19.0.0/16, beside the labs' 198.18.x
        host_v4 = fmt::format("198.19.{}.2", third);
        ns_v4 = fmt::format("198.19.{}.1", third);
        run_command({"/sbin/ip", "netns", "del", ns});
        run_command({"/sbin/ip", "link", "del", host_if});
        run_command({"/sbin/ip", "netns", "add", ns});
        run_command({"/sbin/ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if,
                     "netns", ns});
        run_command({"/sbin/ip", "addr", "add", host_v4 + "/24", "dev", host_if});
        run_command({"/sbin/ip", "link", "set", host_if, "up"});
        run_command({"/sbin/ip", "-n", ns, "addr", "add", ns_v4 + "/24", "dev", ns_if});
        run_command({"/sbin/ip", "-n", ns, "link", "set", ns_if, "up"});
    }
    ~Container() { remove(); }
    void remove() {
        run_command({"/sbin/ip", "link", "del", host_if});
        run_command({"/sbin/ip", "netns", "del", ns});
    }
};

class InterfacePatterns : public DaemonLabTest {
  protected:
    std::string pattern() const { return fmt::format("tcmi{}h[0-9]", getpid() % 10000); }
    json status() { return parse_json(daemon->ctl({"-j", "status"})); }
    // The interfaces the pattern covers, as status lists them.
    std::vector<std::string> covered() {
        std::vector<std::string> out;
        json st = status(); // whole: a range-for over a member of a temporary would dangle
        for (const auto &p : st["patterns"])
            for (const auto &i : p["interfaces"])
                out.push_back(i.get<std::string>());
        return out;
    }
    // Seconds until covered() contains @name (or not, @present false); -1 after 5 s.
    double seconds_until(const std::string &name, bool present) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 500; ++i) {
            auto c = covered();
            if ((std::ranges::find(c, name) != c.end()) == present)
                return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return -1;
    }
    // 100 datagrams of 1000 bytes from the container to this namespace, at 10000/s; returns what
    // the policy metered (green + red).
    uint64_t metered_from(const Container &c) {
        auto before = parse_json(daemon->ctl({"-j", "stats"}))["policies"][0];
        std::thread rx([&] { run_command({udp_tool_path(), "recv", c.host_v4, "9000", "1"}); });
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        run_command({"/sbin/ip", "netns", "exec", c.ns, udp_tool_path(), "send", c.host_v4, "9000",
                     "100", "1000", "10000"});
        rx.join();
        auto after = parse_json(daemon->ctl({"-j", "stats"}))["policies"][0];
        auto sum = [](const json &p) {
            return p["green"]["packets"].get<uint64_t>() + p["red"]["packets"].get<uint64_t>();
        };
        return sum(after) - sum(before);
    }
};

TEST_F(InterfacePatterns, AVethMadeLaterIsPolicedWithinASecondAndLetGoWhenDeleted) {
    ok({"policy", "add", "ctr", "--algo", "srtcm", "--cir", "1mbit", "--cbs", "10k", "--ebs", "0",
        "--match", "dst", "198.19.0.0/16"});
    auto r = ok({"attach", "--match-ifname", pattern(), "--hook", "tc", "--direction", "ingress"});
    EXPECT_THAT(r.out, HasSubstr("no interface matches yet"));

    Container c1(1);
    double s = seconds_until(c1.host_if, true);
    EXPECT_GE(s, 0) << status().dump();
    EXPECT_LE(s, 1.0 * time_scale()) << "attached within a second";
    std::cout << fmt::format("[ ifname ] a veth made after the pattern: attached in {:.2f} s\n", s);
    EXPECT_EQ(metered_from(c1), 100u) << "every datagram through the new veth metered";
    auto st = status();
    bool listed = false;
    for (const auto &a : st["attachments"])
        if (a["iface"] == c1.host_if) {
            listed = true;
            EXPECT_TRUE(a["attached"].get<bool>()) << a.dump();
            EXPECT_EQ(a["by"], pattern());
        }
    EXPECT_TRUE(listed) << st.dump();
    EXPECT_THAT(daemon->ctl({"status"}).out,
                HasSubstr(fmt::format("pattern     '{}' tc ingress: {}", pattern(), c1.host_if)));

    // A name the pattern made is not detached by name: the pattern would attach it again.
    auto d = daemon->ctl({"detach", c1.host_if, "--hook", "tc", "--direction", "ingress"});
    EXPECT_NE(d.exit_code, 0);
    EXPECT_THAT(d.err, HasSubstr("detach --match-ifname"));

    // A second container; the first deleted: its entry goes, with no stale line in status.
    Container c2(2);
    EXPECT_GE(seconds_until(c2.host_if, true), 0);
    c1.remove();
    s = seconds_until(c1.host_if, false);
    EXPECT_GE(s, 0);
    EXPECT_LE(s, 1.0 * time_scale());
    st = status();
    for (const auto &a : st["attachments"])
        EXPECT_NE(a["iface"], c1.host_if) << a.dump();

    // The pattern is state: a restart keeps it, and its interfaces are attached again.
    daemon->kill9();
    daemon->start();
    EXPECT_GE(seconds_until(c2.host_if, true), 0);
    EXPECT_EQ(metered_from(c2), 100u);

    // A SIGHUP with the pattern in the config (the state, as the user would keep it) keeps what
    // the pattern attached: nothing detached, still metered.
    daemon->settle_state();
    write_file(daemon->config(), read_file(daemon->state()));
    daemon->hup();
    for (int i = 0; i < 100 && daemon->log().find("reloaded ") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_THAT(daemon->log(), HasSubstr("reloaded "));
    EXPECT_THAT(daemon->log(), ::testing::Not(HasSubstr("detached " + c2.host_if)));
    EXPECT_GE(seconds_until(c2.host_if, true), 0);
    EXPECT_EQ(metered_from(c2), 100u);

    // Detach the pattern: its interfaces go with it, and traffic is no longer metered.
    ok({"detach", "--match-ifname", pattern(), "--hook", "tc", "--direction", "ingress"});
    EXPECT_TRUE(status()["patterns"].empty());
    EXPECT_EQ(metered_from(c2), 0u);
    Container c3(3);
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(600 * time_scale())));
    st = status();
    for (const auto &a : st["attachments"])
        EXPECT_NE(a["iface"], c3.host_if) << "no pattern, no attachment: " << a.dump();
}

TEST_F(InterfacePatterns, BadPatternsAreRefusedAndChangeNothing) {
    struct Bad {
        std::vector<std::string> args;
        const char *says;
    };
    std::vector<Bad> cases = {
        {{"--match-ifname", "veth/*"}, "no '/', ':'"},
        {{"--match-ifname", "vethx"}, "no wildcard"},
        {{"--match-ifname", "veth[0-9"}, "without its ']'"},
        {{"--match-ifname", ""}, "name an interface (IF) or a pattern"},
        {{"--match-ifname", "veth*", "--hook", "xdp", "--direction", "egress"},
         "XDP only sees ingress"},
        {{"--match-ifname", "veth*", "lo"}, "excludes"},
        {{}, "name an interface (IF) or a pattern"},
    };
    for (const auto &c : cases) {
        std::vector<std::string> args = {"attach"};
        args.insert(args.end(), c.args.begin(), c.args.end());
        auto r = daemon->ctl(args);
        EXPECT_NE(r.exit_code, 0) << fmt::format("{}", fmt::join(args, " "));
        EXPECT_THAT(r.err, HasSubstr(c.says)) << fmt::format("{}", fmt::join(args, " "));
    }
    auto d = daemon->ctl({"detach", "--match-ifname", "nothing*"});
    EXPECT_NE(d.exit_code, 0);
    EXPECT_THAT(d.err, HasSubstr("no pattern 'nothing*' xdp to detach"));
    EXPECT_TRUE(status()["patterns"].empty());
}

} // namespace
