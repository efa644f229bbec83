// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// flow_table_e2e_test.cpp: a flow table sized by its flows (docs/daemon.md, "The flow table"):
// it grows under traffic and is resized at a restart with another --flows, and every flow keeps
// its tokens and counters through both: no packet metered by a bucket not its flow's, none
// twice, none unmetered. The policy tables sized by the policies: grown before a change that
// needs them (a request, a reload, a start), every packet metered meanwhile.
#include "lab.hpp"

#include "tricolor/control.hpp"
#include "tricolor/datapath.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>

namespace tricolor::test {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class FlowTable : public DaemonLabTest {
  protected:
    // The next start of the daemon with @flags.
    void daemon_with(std::vector<std::string> flags) { daemon->set_flags(std::move(flags)); }
    // The fixture's daemon stopped, its pins and state gone: started afresh with @flags.
    void fresh_daemon(std::vector<std::string> flags) {
        daemon->terminate();
        Datapath::remove_pins(daemon->pin_dir());
        std::filesystem::remove(daemon->state()); // the config, if any, is what it starts from
        std::filesystem::remove(daemon->state() + ".journal");
        daemon_with(std::move(flags));
        daemon->start();
    }
    json stats() { return parse_json(ok({"-j", "stats"})); }
    json status() { return parse_json(ok({"-j", "status"})); }
    // A per-destination policy over 198.19.0.0/16 that drops every colour (nothing it meters
    // goes on: those addresses are no one's) with a bucket of 2500 bytes earning 100 bytes/s:
    // of three datagrams of 1000 bytes (1028 metered) a flow passes two green, the third red,
    // if each packet is metered by its own flow's bucket.
    void add_policy(const std::string &cir = "800bit") {
        ok({"attach", lab->host_if});
        ok({"policy",  "add",  "spread",   "--algo", "srtcm",         "--cir", cir,
            "--cbs",   "2500", "--match",  "dst",    "198.19.0.0/16", "--per", "dst",
            "--green", "drop", "--yellow", "drop",   "--red",         "drop"});
        auto r = lab->in_ns({"ip", "route", "add", "198.19.0.0/16", "via", lab->host_v4});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    // @rounds datagrams to each of @n addresses from 198.19.0.1 (or @first), at @pps.
    void spread(long n, long rounds, long pps) { spread_from("198.19.0.1", n, rounds, pps); }
    void spread_from(const std::string &first, long n, long rounds, long pps) {
        auto r = lab->in_ns({udp_tool_path(), "spread", first, "9", std::to_string(n),
                             std::to_string(rounds), "1000", std::to_string(pps)});
        ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
        std::cout << "[ spread   ] " << r.out;
    }
    // Every flow of the policy: 2 green and 1 red, and the policy's totals the flows' sum.
    void expect_each_flow_two_green_one_red(long n) {
        auto s = stats();
        ASSERT_EQ(s["policies"].size(), 1u);
        auto p = s["policies"][0];
        EXPECT_EQ(s["table_full"], 0) << "no flow was metered in the policy's bucket";
        EXPECT_EQ(p["green"]["packets"], 2 * n);
        EXPECT_EQ(p["yellow"]["packets"], 0);
        EXPECT_EQ(p["red"]["packets"], n);
        auto flows = parse_json(ok({"-j", "flows"}))["flows"];
        ASSERT_EQ(flows.size(), static_cast<size_t>(n));
        size_t wrong = 0;
        for (const auto &f : flows)
            wrong += f["green"]["packets"] != 2 || f["red"]["packets"] != 1;
        EXPECT_EQ(wrong, 0u) << "flows not at 2 green, 1 red, e.g. " << flows[0].dump();
    }
};

// 24000 new flows at 10^5 a second into a table that starts at 16384, from idle, at once: it
// grows, 4096 flows short of full, for what it holds and what comes while it loads (a second at
// the rate it sees: to the most here); the flows that find it full while the growth loads (0.7
// s here: the table fills in 160 ms) are made in the growth's own table, and moved into the
// grown one with their tokens. Each flow's three packets are metered by its own
// bucket: two green, one red, none in the policy's bucket.
TEST_F(FlowTable, GrowsUnderTrafficAndEveryPacketIsMeteredByItsOwnFlow) {
    fresh_daemon({"--flows", "16384", "--max-flows", "65536", "--reclaim-interval", "0"});
    add_policy();
    ASSERT_FALSE(HasFailure());
    EXPECT_EQ(status()["flows"]["capacity"], 16384);
    constexpr long n = 24000;
    spread(n, 1, 100000);
    for (int i = 0; i < 600 && (status()["flows"]["grown"] != 1 || status()["flows"]["moving"]);
         ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    spread(n, 2, 100000);
    auto st = status()["flows"];
    EXPECT_EQ(st["capacity"], 65536);
    EXPECT_EQ(st["max"], 65536);
    EXPECT_EQ(st["grown"], 1);
    EXPECT_EQ(st["moving"], false);
    expect_each_flow_two_green_one_red(n);
    EXPECT_THAT(daemon->log(), HasSubstr("the flow table grew from 16384 to 65536 flows"));
}

// Faster than a growth can follow (10^5 new flows a second into 1024, twice what the grown
// table holds): the flows the table has no room for are made in the growth's table up to what
// the grown one holds (16384, the most: a table that small is within the goal's constant), and
// the rest metered in the policy's bucket and counted as table full (as past --max-flows):
// never passed unmetered, never metered twice.
TEST_F(FlowTable, FlowsBeyondTheTableAreMeteredInThePolicysBucket) {
    fresh_daemon({"--flows", "1024", "--max-flows", "16384", "--reclaim-interval", "0"});
    add_policy();
    ASSERT_FALSE(HasFailure());
    constexpr long n = 30000;
    spread(n, 1, 100000);
    // It grew once (1024 -> 16384) while the 0.3 s of traffic lasted (the growth takes
    // longer), and the growth's table's flows moved in. The grown table is 80% full at its
    // capacity: a flow of the table of before may find all 128 slots of its probes taken (one
    // run in two here), and goes into a table of the growth's own, which no growth takes at
    // --max-flows: listed there, in its own bucket.
    auto settled = [&] {
        auto f = status()["flows"];
        return f["grown"] == 1 && f["moving"] == false;
    };
    for (int i = 0; i < 100 && !settled(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(status()["flows"]["capacity"], 16384);
    auto s = stats();
    auto p = s["policies"][0];
    const uint64_t metered = p["green"]["packets"].get<uint64_t>() +
                             p["yellow"]["packets"].get<uint64_t>() +
                             p["red"]["packets"].get<uint64_t>();
    EXPECT_EQ(metered, static_cast<uint64_t>(n)) << "every packet metered once";
    auto flows = parse_json(ok({"-j", "flows"}))["flows"];
    uint64_t in_flows = 0;
    for (const auto &f : flows)
        in_flows += f["green"]["packets"].get<uint64_t>() + f["red"]["packets"].get<uint64_t>();
    EXPECT_EQ(in_flows + s["table_full"].get<uint64_t>(), static_cast<uint64_t>(n))
        << "each packet in its own flow, or counted as table full";
    EXPECT_EQ(flows.size(), 16384u) << "the grown table full, each with its own bucket";
    EXPECT_EQ(s["table_full"].get<uint64_t>(), static_cast<uint64_t>(n) - 16384);
    std::cout << fmt::format("[ flood    ] {} flows in the table, {} packets table full\n",
                             flows.size(), s["table_full"].get<uint64_t>());
}

// Flows gone give their memory back: 24000 flows grow the table past the least (16384); all but
// 100 go idle and are reclaimed; half a minute after the growth the table, no longer within 1.5
// slots a flow plus the least table's, shrinks to the least, and the 100 flows that stayed move
// whole (each one flow, its counts all there, its next packet in its own bucket).
TEST_F(FlowTable, FlowsGoneShrinkTheTableAndTheRestMoveWhole) {
    // An emulated guest runs everything ten times slower (TRICOLOR_TIME_SCALE): the busy flows'
    // datagrams a second apart must not look idle there.
    const int scale = static_cast<int>(std::ceil(time_scale()));
    fresh_daemon({"--flows", "16384", "--max-flows", "65536", "--reclaim-interval", "1",
                  "--flow-idle-timeout", std::to_string(3 * scale)});
    // Buckets that are full again at once (8 Mbit/s): an idle flow is reclaimed.
    add_policy("8mbit");
    ASSERT_FALSE(HasFailure());
    spread(24000, 1, 100000);
    json st;
    for (int i = 0; i < 100; ++i) {
        st = status()["flows"];
        if (st["grown"] == 1 && st["moving"] == false)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_EQ(st["grown"], 1) << st.dump();
    const uint32_t grown_to = st["capacity"];
    EXPECT_GT(grown_to, 24000u);
    // 100 flows stay busy (a datagram each a second); the rest go.
    long rounds = 1; // the datagrams each of the 100 had: one of the 24000's
    for (int i = 0; i < 60 * scale; ++i) {
        spread(100, 1, 10000);
        ++rounds;
        st = status()["flows"];
        if (st["shrunk"] == 1 && st["moving"] == false)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(900));
    }
    EXPECT_EQ(st["shrunk"], 1) << st.dump();
    EXPECT_EQ(st["capacity"], 16384) << st.dump();
    EXPECT_THAT(daemon->log(),
                HasSubstr(fmt::format("the flow table shrank from {} to 16384 flows", grown_to)));
    spread(100, 1, 10000);
    ++rounds;
    auto flows = parse_json(ok({"-j", "flows"}))["flows"];
    ASSERT_EQ(flows.size(), 100u);
    size_t wrong = 0;
    for (const auto &f : flows)
        wrong += f["green"]["packets"].get<long>() + f["red"]["packets"].get<long>() != rounds;
    EXPECT_EQ(wrong, 0u) << rounds << " packets each, e.g. " << flows[0].dump();
    EXPECT_EQ(stats()["table_full"], 0);
}

// max_flows in the config, without --max-flows: the most the table grows to; SIGHUP raises it
// (and the table grows on), and a bad one is refused naming the field, nothing changed.
TEST_F(FlowTable, TheConfigsMaxFlowsBoundsTheGrowth) {
    auto config = [&](const std::string &max) {
        std::ofstream(daemon->config())
            << "max_flows: " << max << "\n"
            << "attachments:\n  - {iface: " << lab->host_if << "}\n"
            << "policies:\n  - {name: spread, algo: srtcm, cir: 800bit, cbs: 2500, match: {dst: "
               "198.19.0.0/16}, per: dst, green: drop, yellow: drop, red: drop}\n";
    };
    auto flows_status_when = [&](const std::function<bool(const json &)> &done) {
        json st;
        for (int i = 0; i < 50; ++i) {
            st = status()["flows"];
            if (done(st))
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return st;
    };
    config("32");
    fresh_daemon({"--flows", "8", "--reclaim-interval", "0"});
    ASSERT_EQ(lab->in_ns({"ip", "route", "add", "198.19.0.0/16", "via", lab->host_v4}).exit_code,
              0);
    EXPECT_EQ(status()["flows"]["max"], 32);
    // Four flows fill the table of 8 to half: it grows, to 32 (a table under 16384 flows is
    // within the goal's constant) and no further; then sixteen more.
    spread(4, 1, 1000);
    auto st = flows_status_when([](const json &f) { return f["grown"] == 1 && !f["moving"]; });
    EXPECT_EQ(st["capacity"], 32) << st.dump();
    spread_from("198.19.0.5", 16, 1, 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(status()["flows"]["capacity"], 32) << "20 flows, but no more than max_flows";
    config("128");
    daemon->hup();
    st = flows_status_when([](const json &f) { return f["grown"] == 2 && !f["moving"]; });
    EXPECT_EQ(st["max"], 128) << st.dump();
    EXPECT_EQ(st["capacity"], 128) << "20 flows fill 32 past half: raised, it grows on";
    config("0");
    daemon->hup();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_THAT(daemon->log(), HasSubstr("max_flows: 0 is not a number of flows"));
    EXPECT_EQ(status()["flows"]["max"], 128);
    EXPECT_EQ(stats()["table_full"], 0);
}

// A restart resizes a pinned table that is not within the goal for its flows (3000 in 65536: to
// 16384, the least) or under --flows, and the flows move with their tokens: the third packet of
// each is red after the restart as it would have been.
TEST_F(FlowTable, ARestartWithAnotherSizeMovesEveryFlowWhole) {
    add_policy(); // the fixture's daemon: --flows 65536
    ASSERT_FALSE(HasFailure());
    constexpr long n = 3000;
    spread(n, 2, 50000);
    daemon->terminate();
    daemon_with({"--flows", "8192"});
    daemon->start();
    EXPECT_THAT(daemon->log(), HasSubstr("3000 flows moved into it"));
    auto st = status()["flows"];
    EXPECT_EQ(st["capacity"], TCM_START_FLOWS);
    EXPECT_EQ(st["moving"], false);
    EXPECT_FALSE(std::filesystem::exists(
        fmt::format("{}/abi{}/tcm_flow_slots_prev", daemon->pin_dir(), TCM_ABI_VERSION)));
    spread(n, 1, 50000);
    expect_each_flow_two_green_one_red(n);
    // At most fewer than it holds: refused, naming the count, and the pins left as they were.
    daemon->terminate();
    daemon_with({"--flows", "1024", "--max-flows", "1024"});
    try {
        daemon->start();
        ADD_FAILURE() << "a table smaller than its flows must be refused";
    } catch (const std::runtime_error &e) {
        EXPECT_THAT(e.what(), HasSubstr("it holds 3000"));
    }
    daemon_with({"--flows", "32768"});
    daemon->start();
    EXPECT_EQ(status()["flows"]["capacity"], 32768) << "under --flows: made to it";
    expect_each_flow_two_green_one_red(n);
}

// The policy tables start at TCM_START_POLICY_SLOTS and TCM_START_RULE_SLOTS a set.
class PolicyTables : public FlowTable {
  protected:
    // "busy" (on the lab's host address) and @n more, p0..p(n-1), each on one address of
    // 198.19.0.0/16: policy i on 198.19.(i / 200).(i % 200 + 1).
    static std::string set_yaml(int n, bool attach) {
        std::string y = "policies:\n  - {name: busy, algo: srtcm, cir: 8mbit, cbs: 16k, ebs: 0, "
                        "match: {dst: HOST/32}}\n";
        for (int i = 0; i < n; ++i)
            y += fmt::format("  - {{name: p{}, algo: srtcm, cir: 1mbit, cbs: 16k, match: {{dst: "
                             "198.19.{}.{}/32}}}}\n",
                             i, i / 200, i % 200 + 1);
        if (attach)
            y += "attachments:\n  - {iface: IF, hook: xdp, direction: ingress}\n";
        return y;
    }
    std::string yaml(int n, bool attach) {
        std::string y = set_yaml(n, attach);
        for (auto [from, to] :
             {std::pair<std::string, std::string>{"HOST", lab->host_v4}, {"IF", lab->host_if}})
            for (size_t at; (at = y.find(from)) != std::string::npos;)
                y.replace(at, from.size(), to);
        return y;
    }
    json tables() { return status()["policies"]; }
    uint64_t packets_of(const std::string &name) {
        auto p = parse_json(ok({"-j", "stats", name}))["policies"][0];
        return p["green"]["packets"].get<uint64_t>() + p["yellow"]["packets"].get<uint64_t>() +
               p["red"]["packets"].get<uint64_t>();
    }
    // One datagram from the lab's namespace to policy p604's address.
    void to_p604() {
        auto r = lab->in_ns({udp_tool_path(), "send", "198.19.3.5", "9", "1", "100", "1000"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    // The tables hold @slots policies, grown @grown times by this daemon, and a datagram to p604
    // makes its count @p604.
    void expect_tables(uint32_t slots, int grown, uint64_t p604) {
        auto t = tables();
        EXPECT_EQ(t["slots"], slots) << t.dump() << daemon->log();
        EXPECT_EQ(t["grown"], grown) << t.dump();
        to_p604();
        EXPECT_EQ(packets_of("p604"), p604);
    }
};

// A request whose set outgrows the tables (2101 policies and classifier entries: beyond 1024
// ids and 2048 entries) while UDP at twice a policy's rate runs: the tables grow first (the
// request made again under the flow pass's lock), then the set is applied; every datagram is
// metered once and the green ones within CBS + CIR*T. A restart keeps the sizes; a start afresh
// from that state grows at once; a reload grows; a start on smaller pins from a bigger config
// grows once every hook runs its programs.
TEST_F(PolicyTables, GrowBeforeTheChangeThatNeedsThemAndEveryPacketIsMetered) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "busy", "--algo", "srtcm", "--cir", "8mbit", "--cbs", "16k", "--ebs", "0",
        "--match", "dst", lab->host_v4 + "/32"});
    ASSERT_EQ(lab->in_ns({"ip", "route", "add", "198.19.0.0/16", "via", lab->host_v4}).exit_code,
              0);
    auto t = tables();
    EXPECT_EQ(t["slots"], TCM_START_POLICY_SLOTS) << t.dump();
    EXPECT_EQ(t["rule_slots"], TCM_START_RULE_SLOTS / 2) << t.dump();
    const std::string file = daemon->config() + ".big";
    std::ofstream(file) << yaml(2100, false);
    const uint64_t t0 = mono_ns();
    RunResult sent;
    std::thread tx([&] {
        sent = lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9", "6000", "972", "2000"});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    ok({"apply", "-f", file});
    tx.join();
    ASSERT_EQ(sent.exit_code, 0) << sent.err;
    const uint64_t ns = mono_ns() - t0;
    t = tables();
    EXPECT_EQ(t["slots"], 4 * TCM_START_POLICY_SLOTS) << t.dump();
    EXPECT_EQ(t["rule_slots"], 4 * TCM_START_RULE_SLOTS / 2) << t.dump();
    EXPECT_EQ(t["grown"], 1) << t.dump();
    EXPECT_THAT(daemon->log(), HasSubstr("the policy tables grew from 1024 to 4096 policies"));
    {
        auto p = parse_json(ok({"-j", "stats", "busy"}))["policies"][0];
        const uint64_t green = p["green"]["packets"], red = p["red"]["packets"];
        EXPECT_EQ(green + red, 6000u) << "every datagram metered, once";
        EXPECT_GT(red, 0u);
        EXPECT_LE(static_cast<__int128>(green) * 1000 * 8 * 1000000000,
                  static_cast<__int128>(16384) * 8 * 1000000000 +
                      static_cast<__int128>(8000000) * ns)
            << green << " green in " << ns / 1e9 << " s";
    }
    to_p604();
    EXPECT_EQ(packets_of("p604"), 1u);
    // The counter arrays grew with the tables: those of before were carried into the pinned
    // carried counts once the programs of before were gone.
    const std::string pins = fmt::format("{}/abi{}/", daemon->pin_dir(), TCM_ABI_VERSION);
    EXPECT_THAT(daemon->log(), HasSubstr("the counters of 1 policy carried over"));
    for (const char *name : {"tcm_policy_stats", "tcm_tcp_stats"}) {
        EXPECT_FALSE(std::filesystem::exists(pins + name + "_prev")) << name;
        EXPECT_TRUE(std::filesystem::exists(pins + name + "_carried")) << name;
    }

    // A restart: the pinned sizes hold, and the counts carried.
    daemon->terminate();
    daemon->start();
    expect_tables(4 * TCM_START_POLICY_SLOTS, 0, 2);
    EXPECT_EQ(packets_of("busy"), 6000u);

    // Afresh (no pins) from that state: grown at the start, before anything is attached.
    daemon->terminate();
    Datapath::remove_pins(daemon->pin_dir());
    daemon->start();
    expect_tables(4 * TCM_START_POLICY_SLOTS, 1, 1);

    // A reload that needs them: afresh from the config's small set, then the config grown.
    std::ofstream(daemon->config()) << yaml(0, true);
    fresh_daemon({});
    EXPECT_EQ(tables()["slots"], TCM_START_POLICY_SLOTS);
    std::ofstream(daemon->config()) << yaml(2100, true);
    daemon->hup();
    for (int i = 0; i < 100 && tables()["slots"] != 4 * TCM_START_POLICY_SLOTS; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    expect_tables(4 * TCM_START_POLICY_SLOTS, 1, 1);

    // A start on the pins of small tables from a config that needs more (newer than the state).
    std::ofstream(daemon->config()) << yaml(0, true);
    fresh_daemon({});
    EXPECT_EQ(tables()["slots"], TCM_START_POLICY_SLOTS);
    daemon->terminate();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ofstream(daemon->config()) << yaml(2100, true);
    daemon->start();
    expect_tables(4 * TCM_START_POLICY_SLOTS, 1, 1);
}

// Policies gone give the policy tables back: 2100 policies grow them (to 4096 ids and 8192
// classifier entries); all but "busy" (id 0) removed, the tables shrink to the start's half a
// minute after the growth, while UDP runs to busy: every datagram metered once, its counts
// neither lost nor carried twice. A restart on grown tables the set no longer needs shrinks
// them at its first look.
TEST_F(PolicyTables, PoliciesGoneShrinkTheTablesAndEveryPacketIsMeteredOnce) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "busy", "--algo", "srtcm", "--cir", "8mbit", "--cbs", "16k", "--ebs", "0",
        "--match", "dst", lab->host_v4 + "/32"});
    auto send = [&](int n, int rate) {
        return lab->in_ns({udp_tool_path(), "send", lab->host_v4, "9", std::to_string(n), "100",
                           std::to_string(rate)});
    };
    ASSERT_EQ(send(50, 1000).exit_code, 0);
    const std::string file = daemon->config() + ".big";
    std::ofstream(file) << yaml(2100, false);
    ok({"apply", "-f", file});
    const auto grown_at = std::chrono::steady_clock::now();
    ASSERT_EQ(tables()["slots"], 4 * TCM_START_POLICY_SLOTS) << tables().dump();
    std::ofstream(file) << yaml(0, false);
    ok({"apply", "-f", file});
    EXPECT_EQ(tables()["shrunk"], 0) << "not within half a minute of the growth";
    // 15000 datagrams at 1000/s from 20 s after the growth: the shrink (30 s after it, looked
    // for each second) comes while they run.
    std::this_thread::sleep_until(grown_at + std::chrono::seconds(20));
    RunResult sent = send(15000, 1000);
    ASSERT_EQ(sent.exit_code, 0) << sent.err;
    json t;
    for (int i = 0; i < 100; ++i) {
        t = tables();
        if (t["shrunk"] == 1)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(t["shrunk"], 1) << t.dump() << daemon->log();
    EXPECT_EQ(t["slots"], TCM_START_POLICY_SLOTS) << t.dump();
    EXPECT_EQ(t["rule_slots"], TCM_START_RULE_SLOTS / 2) << t.dump();
    EXPECT_THAT(daemon->log(), HasSubstr("the policy tables shrank from 4096 to 1024 policies and "
                                         "from 8192 to 2048 classifier entries"));
    EXPECT_EQ(packets_of("busy"), 15050u) << "every datagram metered, once";
    // The counter arrays of before the shrink carried into the pinned counts (moments after it).
    const std::string prev =
        fmt::format("{}/abi{}/tcm_policy_stats_prev", daemon->pin_dir(), TCM_ABI_VERSION);
    for (int i = 0; i < 50 && std::filesystem::exists(prev); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(std::filesystem::exists(prev));
    ASSERT_EQ(send(10, 1000).exit_code, 0);
    EXPECT_EQ(packets_of("busy"), 15060u);

    // Grown again, the set small again, and a restart before the half minute: the pinned sizes
    // are adopted, and the first look of the new daemon (a second on) shrinks them.
    std::ofstream(file) << yaml(2100, false);
    ok({"apply", "-f", file});
    std::ofstream(file) << yaml(0, false);
    ok({"apply", "-f", file});
    daemon->terminate();
    daemon->start();
    for (int i = 0; i < 50 && tables()["shrunk"] != 1; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    t = tables();
    EXPECT_EQ(t["shrunk"], 1) << t.dump();
    EXPECT_EQ(t["slots"], TCM_START_POLICY_SLOTS) << t.dump();
    EXPECT_EQ(packets_of("busy"), 15060u);
}

// Pins of a daemon whose counter arrays were made for every id (TCM_MAX_POLICIES, per CPU)
// beside policy tables of 1024: the next start sets them aside, reads them, and carries them
// over once its programs run on every hook; the policy counts on from there.
TEST_F(PolicyTables, CounterArraysOfEveryIdOfBeforeAreCarriedAtTheStart) {
    ok({"attach", lab->host_if});
    ok({"policy", "add", "busy", "--algo", "srtcm", "--cir", "8mbit", "--cbs", "16k", "--ebs", "0",
        "--match", "dst", lab->host_v4 + "/32"});
    auto send = [&](int n) {
        auto r = lab->in_ns(
            {udp_tool_path(), "send", lab->host_v4, "9", std::to_string(n), "100", "1000"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    };
    send(50);
    ASSERT_EQ(packets_of("busy"), 50u);
    daemon->terminate();
    const std::string stats =
        fmt::format("{}/abi{}/tcm_policy_stats", daemon->pin_dir(), TCM_ABI_VERSION);
    {
        const size_t ncpus = static_cast<size_t>(libbpf_num_possible_cpus());
        int now = bpf_obj_get(stats.c_str());
        ASSERT_GE(now, 0);
        int old = bpf_map_create(BPF_MAP_TYPE_PERCPU_ARRAY, "tcm_policy_stat", 4,
                                 sizeof(tcm_counters), TCM_MAX_POLICIES, nullptr);
        ASSERT_GE(old, 0);
        std::vector<tcm_counters> v(ncpus);
        for (uint32_t id = 0; id < TCM_START_POLICY_SLOTS; ++id) {
            if (bpf_map_lookup_elem(now, &id, v.data()) == 0) {
                ASSERT_EQ(bpf_map_update_elem(old, &id, v.data(), 0), 0);
            }
        }
        close(now);
        ASSERT_EQ(unlink(stats.c_str()), 0);
        ASSERT_EQ(bpf_obj_pin(old, stats.c_str()), 0);
        close(old);
    }
    daemon->start();
    EXPECT_EQ(packets_of("busy"), 50u);
    EXPECT_THAT(daemon->log(), HasSubstr("the counters of 1 policy carried over"));
    EXPECT_FALSE(std::filesystem::exists(stats + "_prev"));
    send(10);
    EXPECT_EQ(packets_of("busy"), 60u);
    daemon->terminate();
    daemon->start();
    EXPECT_EQ(packets_of("busy"), 60u);
}

} // namespace
} // namespace tricolor::test
