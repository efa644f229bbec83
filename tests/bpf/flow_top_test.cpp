// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// flows --top from the heavy hitters (docs/datapath.md, "flows --top at 2^20") through
// BPF_PROG_TEST_RUN: the data path records the packet that takes a flow across the threshold
// and only that one, counts the inserts a full map refuses, and colours and counts exactly as
// without it; Datapath::top_flows answers from the heavy hitters exactly what a walk answers,
// across passes that raise and lower the threshold, and walks when the heavy hitters cannot
// answer. Also the pass itself: deletions outside the walk re-check what they delete.
#include "datapath_fixture.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace tricolor;
using namespace tricolor::test; // DatapathFixture, Packet, policy(), prefix()

namespace {

class FlowTopTest : public DatapathFixture {
  protected:
    void configure(DatapathOptions &o) const override { o.top_keep = 4; }
    // Always green (the test clock stands still: 1 GiB buckets never run out here).
    static Policy green(uint32_t id, std::string name, tcm_per per, const char *src = nullptr) {
        Policy p = policy(id, std::move(name), Algo::srtcm, 1000000000, 1u << 30, 1u << 30);
        p.per = per;
        if (src)
            p.match.src = prefix(src);
        return p;
    }
    // @n packets of @l3 IP bytes from 198.18.<net>.<host>, source port @sport.
    void send(int net, int host, int n, size_t l3 = 100, uint16_t sport = 1) {
        auto frame =
            Packet().ipv4(fmt_addr(net, host), "198.19.0.1").udp(sport, 2).l3_size(l3).build();
        for (int i = 0; i < n; ++i)
            dp->run_xdp(frame);
    }
    static std::string fmt_addr(int net, int host) {
        return "198.18." + std::to_string(net) + "." + std::to_string(host);
    }
    // A flow key as "policy:net.host[:sport]", for messages that say which flow.
    static std::string name(const tcm_flow_key &k) {
        uint32_t a = ntohl(k.src[3]);
        std::string s = std::to_string(k.policy_id) + ":" + std::to_string((a >> 8) & 0xff) + "." +
                        std::to_string(a & 0xff);
        if (k.sport)
            s += ":" + std::to_string(k.sport);
        return s;
    }
    std::vector<std::string> hot() const {
        std::vector<std::string> out;
        for (const auto &k : dp->hot_keys())
            out.push_back(name(k));
        std::ranges::sort(out);
        return out;
    }
    static std::vector<std::pair<std::string, uint64_t>> listed(const std::vector<Flow> &flows) {
        std::vector<std::pair<std::string, uint64_t>> out;
        for (const auto &f : flows)
            out.emplace_back(name(f.key), flow_bytes(f.state));
        return out;
    }
    // top_flows(k) from the heavy hitters if it can (@via says whether it did) against a walk.
    void expect_top(size_t k, const char *expected_via,
                    const std::function<bool(uint32_t)> &want = {}) {
        SCOPED_TRACE("top " + std::to_string(k));
        std::string via;
        auto got = dp->top_flows(k, want, false, &via);
        auto walked = dp->top_flows(k, want, true);
        EXPECT_EQ(via, expected_via);
        EXPECT_EQ(listed(got), listed(walked));
        EXPECT_EQ(got.size(), k ? std::min<size_t>(k, walked.size()) : walked.size());
    }
};

// The packet that takes a flow from below T to T or more records it; the packets before and
// after do not, nor does a flow that stays below T, nor an aggregate bucket.
TEST_F(FlowTopTest, OnlyThePacketThatCrossesTheThresholdRecordsTheFlow) {
    Policy agg = green(2, "agg", TCM_PER_AGGREGATE, "198.18.9.0/24");
    apply({green(1, "per-src", TCM_PER_SRC, "198.18.0.0/24"), agg});
    dp->set_hot_threshold_for_test(1000);
    send(0, 1, 2, 400); // 800
    EXPECT_TRUE(hot().empty());
    send(0, 1, 1, 400); // 1200: crossed
    EXPECT_THAT(hot(), ::testing::ElementsAre("1:0.1"));
    send(0, 2, 2, 500); // exactly 1000 at the second packet
    send(0, 3, 1, 999); // 999: below
    send(9, 1, 5, 400); // the aggregate bucket: 2000, never a flow
    EXPECT_THAT(hot(), ::testing::ElementsAre("1:0.1", "1:0.2"));
    // Already above T: further packets record nothing (the pass empties the map; nothing
    // comes back without a new crossing).
    dp->clear_hot_for_test();
    send(0, 1, 3, 400);
    send(0, 2, 1, 100);
    EXPECT_TRUE(hot().empty());
    // A new threshold: the flows above the old one cross it in their own time.
    dp->set_hot_threshold_for_test(2500);
    send(0, 1, 1, 100); // 2400 + 100 = 2500
    send(0, 2, 1, 100); // 1100 + 100 = 1200
    EXPECT_THAT(hot(), ::testing::ElementsAre("1:0.1"));
    // Off: nothing is recorded, whatever a flow's bytes.
    dp->clear_hot_for_test();
    dp->set_hot_threshold_for_test(~0ull);
    send(0, 4, 10, 1400);
    EXPECT_TRUE(hot().empty());
    EXPECT_EQ(dp->hot_overflow(), 0u);
    // The counters the flows hold are the packets' bytes: nothing else was touched.
    auto flows = dp->flows();
    auto one = std::ranges::find_if(flows, [](const Flow &f) { return name(f.key) == "1:0.1"; });
    ASSERT_NE(one, flows.end());
    EXPECT_EQ(flow_bytes(one->state), 2500u);
}

// In a chain every level checks its own bytes: the parent (per source) crosses with the sum of
// its children (per 5-tuple), each child with its own.
TEST_F(FlowTopTest, EveryLevelOfAChainCrossesOnItsOwnBytes) {
    Policy child = green(1, "conn", TCM_PER_5TUPLE, "198.18.0.0/24");
    child.parent = "user";
    Policy parent = green(2, "user", TCM_PER_SRC);
    parent.only_parent = true;
    apply({child, parent});
    dp->set_hot_threshold_for_test(1000);
    send(0, 1, 1, 600, 10);
    send(0, 1, 1, 600, 11); // each connection 600, the source 1200
    EXPECT_THAT(hot(), ::testing::ElementsAre("2:0.1"));
    send(0, 1, 1, 600, 10); // the first connection 1200
    EXPECT_THAT(hot(), ::testing::ElementsAre("1:0.1:10", "2:0.1"));
}

class SmallHotMapTest : public FlowTopTest {
  protected:
    void configure(DatapathOptions &o) const override {
        o.top_keep = 4;
        o.hot_capacity = 4;
    }
};

// A full map refuses the insert, and the refusal is counted: never a heavy hitter lost silently.
TEST_F(SmallHotMapTest, AFullHotMapCountsEveryRefusedInsert) {
    apply({green(1, "per-src", TCM_PER_SRC)});
    dp->set_hot_threshold_for_test(1); // every flow's first packet crosses
    for (int i = 1; i <= 10; ++i)
        send(0, i, 1);
    EXPECT_EQ(dp->hot_keys().size(), 4u);
    EXPECT_EQ(dp->hot_overflow(), 6u);
    for (int i = 1; i <= 10; ++i)
        send(0, i, 1); // no crossing: no insert tried
    EXPECT_EQ(dp->hot_overflow(), 6u);
}

// Colours, verdicts and every counter are the same with the heavy hitters on (a threshold every
// flow crosses, a map that overflows) as off: the check comes after the meter and touches none.
TEST_F(SmallHotMapTest, ColoursAndCountersAreTheSameWithTheHeavyHittersOnAndOff) {
    auto off = std::make_unique<Datapath>(options());
    Policy p = policy(1, "per-src", Algo::srtcm, 80000, 3000, 3000); // 10 kB/s
    p.per = TCM_PER_SRC;
    Policy q = policy(2, "trtcm", Algo::trtcm, 80000, 2000, 4000);
    q.per = TCM_PER_5TUPLE;
    q.match.src = prefix("198.18.1.0/24"); // the longer prefix: q's
    apply({p, q});
    ASSERT_TRUE(off->apply({p, q}).has_value());
    dp->set_hot_threshold_for_test(1500);
    std::mt19937 rng(12);
    uint64_t now = 1000000000;
    for (int i = 0; i < 3000; ++i) {
        now += rng() % 20000000; // up to 20 ms
        dp->set_clock(now);
        off->set_clock(now);
        int net = static_cast<int>(rng() % 2), host = 1 + static_cast<int>(rng() % 12);
        auto frame = Packet()
                         .ipv4(fmt_addr(net, host), "198.19.0.1")
                         .udp(static_cast<uint16_t>(rng() % 3), 2)
                         .l3_size(64 + rng() % 1400)
                         .build();
        auto a = dp->run_xdp(frame), b = off->run_xdp(frame);
        ASSERT_EQ(a.retval, b.retval) << "packet " << i;
        ASSERT_EQ(dp->last_verdict().color, off->last_verdict().color) << "packet " << i;
    }
    EXPECT_GT(dp->hot_overflow(), 0u); // the map overflowed on the way
    EXPECT_TRUE(off->hot_keys().empty());
    auto flows_on = dp->top_flows(0, {}, true), flows_off = off->top_flows(0, {}, true);
    ASSERT_EQ(flows_on.size(), flows_off.size());
    for (size_t i = 0; i < flows_on.size(); ++i) {
        EXPECT_EQ(std::memcmp(&flows_on[i].key, &flows_off[i].key, sizeof(tcm_flow_key)), 0);
        EXPECT_EQ(std::memcmp(&flows_on[i].state, &flows_off[i].state, sizeof(tcm_flow)), 0);
    }
    auto c_on = dp->policy_counters(), c_off = off->policy_counters();
    for (uint32_t id : {1u, 2u})
        EXPECT_EQ(std::memcmp(&c_on[id], &c_off[id], sizeof(tcm_counters)), 0);
    auto g_on = dp->global_counters(), g_off = off->global_counters();
    EXPECT_EQ(std::memcmp(&g_on, &g_off, sizeof(g_on)), 0);
}

// top_flows from the heavy hitters against a walk, through the passes the daemon makes: the
// first pass only picks a threshold; from the second the heavy hitters answer, including flows
// that crossed after the walk and flows that are new; a pass that raises the threshold answers
// all through its walk; one that lowers it walks until its own walk is done.
TEST_F(FlowTopTest, TopFlowsFromTheHeavyHittersAreWhatAWalkFinds) {
    apply(
        {green(1, "a", TCM_PER_SRC, "198.18.0.0/24"), green(2, "b", TCM_PER_SRC, "198.18.1.0/24")});
    for (int i = 1; i <= 12; ++i) {
        send(0, i, i, 100);     // a: 100 .. 1200 bytes
        send(1, i, i / 2, 130); // b: 0 .. 780, two flows of each size (ties: by key)
    }
    auto only_b = [](uint32_t id) { return id == 2; };
    expect_top(3, "walk"); // no pass yet
    dp->count_flows();     // picks the threshold: the 4th largest, a's 900
    EXPECT_FALSE(dp->top_tracking().valid);
    expect_top(3, "walk");
    dp->count_flows(); // installs it and reads the flows at or above it
    auto t = dp->top_tracking();
    EXPECT_TRUE(t.valid);
    EXPECT_EQ(t.threshold, 900u);
    EXPECT_EQ(t.candidates, 4u);
    expect_top(3, "hot");
    expect_top(4, "hot");
    expect_top(5, "walk");         // only 4 flows stand at 900 or more
    expect_top(2, "walk", only_b); // none of b's do
    expect_top(0, "walk");         // every flow: always a walk

    // After the pass: a small flow of a and one of b cross 900, and a new flow is born above it.
    send(0, 1, 20, 100);  // 100 -> 2100: the busiest
    send(1, 2, 10, 100);  // 130 -> 1130
    send(0, 200, 1, 950); // new: 950
    expect_top(3, "hot");
    expect_top(7, "hot");
    expect_top(1, "hot", only_b);
    EXPECT_EQ(listed(dp->top_flows(1)).front().first, "1:0.1");

    // A pass that raises the threshold answers through its walk, including a flow that crosses
    // the new threshold meanwhile. (This pass keeps 900; its walk picks the 4th largest, 1100.)
    dp->count_flows();
    EXPECT_EQ(dp->top_tracking().threshold, 900u);
    expect_top(3, "hot");
    FlowPass pass = dp->begin_flow_pass(false);
    EXPECT_EQ(dp->top_tracking().threshold, 1100u);
    EXPECT_TRUE(dp->top_tracking().valid);
    expect_top(3, "hot");
    send(0, 5, 10, 100); // 500 -> 1500
    expect_top(4, "hot");
    dp->walk_flow_pass(pass);
    send(0, 3, 15, 100); // 300 -> 1800, after the walk read it
    expect_top(5, "hot");
    dp->end_flow_pass(pass);
    expect_top(5, "hot");
    expect_top(1, "hot", only_b);

    // Lowering: a's flows go with a (removed), leaving one flow at the threshold the last walk
    // picked (1130; fewer than half of 4), so the next pass lowers it to b's 4th largest (650) and
    // walks until its own walk is done.
    apply({green(2, "b", TCM_PER_SRC, "198.18.1.0/24")});
    dp->count_flows();
    expect_top(1, "hot");
    expect_top(2, "walk");
    pass = dp->begin_flow_pass(false);
    EXPECT_EQ(dp->top_tracking().threshold, 650u);
    EXPECT_FALSE(dp->top_tracking().valid);
    expect_top(2, "walk");
    dp->walk_flow_pass(pass);
    dp->end_flow_pass(pass);
    expect_top(2, "hot");
    expect_top(4, "hot");
}

// When the map overflowed the heavy hitters may miss a flow: top_flows walks, until a pass
// starts over with an empty map.
TEST_F(SmallHotMapTest, AnOverflowedMapMakesTopFlowsWalkUntilThePassAfter) {
    apply({green(1, "a", TCM_PER_SRC)});
    for (int i = 1; i <= 10; ++i)
        send(0, i, i, 100);
    dp->count_flows();
    dp->count_flows(); // threshold 700: flows 7..10
    ASSERT_TRUE(dp->top_tracking().valid);
    expect_top(3, "hot");
    for (int i = 1; i <= 5; ++i)
        send(0, i, 8, 100); // five flows cross 700: four fit the map
    EXPECT_EQ(dp->hot_overflow(), 1u);
    expect_top(3, "walk");
    expect_top(8, "walk");
    FlowPass pass = dp->begin_flow_pass(false); // raises the threshold, but cannot keep answering
    EXPECT_FALSE(dp->top_tracking().valid);
    EXPECT_EQ(dp->hot_overflow(), 0u);
    expect_top(3, "walk");
    dp->walk_flow_pass(pass);
    dp->end_flow_pass(pass);
    expect_top(3, "hot");
}

// A program that uses this flow table but is not this Datapath's (an older daemon's, left
// attached) meters packets the heavy hitters never see: top_flows walks while it exists.
TEST(FlowTopPinned, AnotherProgramOnTheFlowTableMakesTopFlowsWalk) {
    TRICOLOR_REQUIRE_ROOT();
    quiet_libbpf_logging();
    std::string pin = "/sys/fs/bpf/tricolor-top-test-" + std::to_string(getpid());
    Datapath::remove_pins(pin);
    DatapathOptions o;
    o.testing = true;
    o.flow_capacity = 64;
    o.pin_dir = pin;
    o.top_keep = 2;
    Policy p = policy(1, "a", Algo::srtcm, 1000000000, 1u << 30, 1u << 30);
    p.per = TCM_PER_SRC;
    Datapath a(o);
    ASSERT_TRUE(a.apply({p}).has_value());
    a.set_clock(1000000000);
    for (int i = 1; i <= 5; ++i)
        for (int n = 0; n < i; ++n)
            a.run_xdp(Packet()
                          .ipv4("198.18.0." + std::to_string(i), "198.19.0.1")
                          .udp(1, 2)
                          .l3_size(100)
                          .build());
    a.count_flows();
    a.count_flows();
    EXPECT_EQ(a.foreign_flow_writers(), 0u);
    std::string via;
    a.top_flows(2, {}, false, &via);
    EXPECT_EQ(via, "hot");
    {
        Datapath b(o);                           // its programs share the pinned flow table
        EXPECT_GE(a.foreign_flow_writers(), 2u); // its xdp and tc programs at least
        auto got = a.top_flows(2, {}, false, &via);
        EXPECT_EQ(via, "walk");
        ASSERT_EQ(got.size(), 2u);
        EXPECT_EQ(flow_bytes(got[0].state), 500u);
        // A pass that sees it does not make the heavy hitters valid.
        a.count_flows();
        EXPECT_FALSE(a.top_tracking().valid);
    }
    Datapath::remove_pins(pin);
}

class ReclaimPassTest : public DatapathFixture {
  protected:
    uint32_t flow_capacity() const override { return 16; }
};

// The walk runs without the caller's lock, so time passes between reading a flow and deleting
// it: a flow that saw a packet since is kept, and nothing is deleted once the policies changed
// (their sizes decided what was full).
TEST_F(ReclaimPassTest, DeletionsAfterTheWalkRecheckTheFlowAndThePolicies) {
    Policy p = policy(1, "per-src", Algo::srtcm, 8000, 1000, 0); // 1000 B/s, 1000 B buckets
    p.per = TCM_PER_SRC;
    apply({p});
    auto from = [](int i) {
        return Packet().ipv4("198.18.0." + std::to_string(i), "198.19.0.1").udp(1, 2).l3_size(600);
    };
    for (int i = 1; i <= 3; ++i)
        dp->run_xdp(from(i).build());
    dp->set_clock(1600000000); // full again
    FlowPass pass = dp->begin_flow_pass(true);
    dp->walk_flow_pass(pass);
    EXPECT_EQ(pass.reclaimable.size(), 3u);
    dp->run_xdp(from(2).build()); // flow 2 takes tokens after the walk read it
    while (dp->reclaim_some(pass, 1)) {
    }
    dp->end_flow_pass(pass);
    EXPECT_EQ(pass.reclaimed, 2u);
    ASSERT_EQ(dp->flows().size(), 1u);
    EXPECT_EQ(dp->flows()[0].state.counters.packets[TCM_GREEN], 2u);
    EXPECT_EQ(dp->counted_flows(), 1u);

    dp->run_xdp(from(4).build());
    dp->set_clock(3000000000);
    pass = dp->begin_flow_pass(true);
    dp->walk_flow_pass(pass);
    EXPECT_EQ(pass.reclaimable.size(), 2u);
    p.meter.cbs = 2000; // a bigger bucket: what was full no longer is
    apply({p});
    EXPECT_FALSE(dp->reclaim_some(pass, 10));
    dp->end_flow_pass(pass);
    EXPECT_EQ(pass.reclaimed, 0u);
    EXPECT_EQ(dp->flows().size(), 2u);
}

} // namespace
