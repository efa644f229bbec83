// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hierarchies (docs/spec.md §9) in the real data path through BPF_PROG_TEST_RUN: the conformance
// vectors, the bpf engine against the model and the exact reference on random chains, the
// all-or-nothing rule read back from the buckets, live updates that keep every level, and two
// CPUs on one 3-level chain.
#include "datapath_fixture.hpp"
#include "hier_reference.hpp"
#include "tricolor/hier_replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

using namespace tricolor;
using test::Packet;

namespace {

constexpr uint64_t kByte = TCM_TOKENS_PER_BYTE;

class HierDatapathTest : public test::DatapathFixture {
  protected:
    uint32_t flow_capacity() const override { return 65536; }
    Datapath::Verdict send(const std::string &src, uint32_t bytes, uint16_t sport = 1000) {
        dp->run_xdp(Packet().ipv4(src, "198.18.9.9").udp(sport, 7000).l3_size(bytes).build());
        return dp->last_verdict();
    }
    // The bucket of @policy_id for source @src (aggregate: the policy's own state).
    tcm_flow flow_of(uint32_t policy_id, const std::string &src = "") {
        for (const auto &f : dp->flows()) {
            if (f.key.policy_id != policy_id)
                continue;
            if (src.empty())
                return f.state;
            auto want = parse_prefix(src).value();
            if (std::memcmp(&f.key.src[3], want.addr.data(), 4) == 0)
                return f.state;
        }
        return dp->policy_state(policy_id);
    }
};

Policy level(uint32_t id, std::string name, Algo algo, uint64_t cir, uint64_t cbs,
             uint64_t second_rate, uint64_t second_size, tcm_per per, std::string parent = "") {
    Policy p = test::policy(id, std::move(name), algo, cir, cbs, second_size, second_rate);
    p.per = per;
    p.parent = std::move(parent);
    return p;
}

Policy only_parent(Policy p) {
    p.only_parent = true;
    return p;
}

TEST_F(HierDatapathTest, BpfEngineMatchesEveryHierVector) {
    size_t n = 0;
    for (const auto &e : std::filesystem::directory_iterator(TRICOLOR_VECTOR_DIR)) {
        std::string name = e.path().stem().string();
        if (e.path().extension() != ".yaml" || !name.starts_with("hier-"))
            continue;
        SCOPED_TRACE(name);
        ++n;
        std::string base = std::string(TRICOLOR_VECTOR_DIR) + "/" + name;
        auto policies = load_policy_file(base + ".yaml");
        ASSERT_TRUE(policies) << policies.error();
        std::ifstream in(base + ".trace");
        auto trace = parse_flow_trace(in);
        ASSERT_TRUE(trace) << trace.error();
        HierBpfEngine engine(*policies);
        std::ostringstream out;
        run_hier_replay(engine, *policies, *trace, out);
        EXPECT_EQ(test::first_difference(out.str(), test::read_file(base + ".expected")), "");
    }
    EXPECT_GE(n, 4u);
}

// The real program, the model and the exact reference agree packet by packet on random chains
// (every algorithm at every level, colour-blind and aware, coupled, empty starts, every `per`).
TEST_F(HierDatapathTest, BpfEqualsModelAndReferenceOnRandomChains) {
    std::mt19937_64 rng(4115);
    int rounds = test::time_scale() > 1 ? 12 : 40;
    for (int round = 0; round < rounds; ++round) {
        auto rc = test::random_case(rng, 250, 1 + round % TCM_MAX_LEVELS);
        // Fresh ids each round: apply gives ids that were not active fresh buckets.
        for (auto &p : rc.policies)
            p.id += 4 * round;
        SCOPED_TRACE(fmt::format("round {} ({} levels)", round, rc.policies.size()));
        apply(rc.policies);
        HierModelEngine model(rc.policies);
        test::RefChain ref(rc.levels);
        for (size_t k = 0; k < rc.trace.size(); ++k) {
            const auto &p = rc.trace[k];
            dp->set_clock(p.time_ns);
            dp->run_xdp(synthesize_frame(p));
            auto got = dp->last_verdict();
            auto want = model.mark(p);
            ASSERT_EQ(got.policy_id, want.policy_id) << "packet " << k;
            if (!want.policy_id)
                continue;
            ASSERT_EQ(got.color, want.color) << "packet " << k;
            ASSERT_EQ(got.color, test::ref_mark(ref, p)) << "packet " << k;
        }
        EXPECT_EQ(ref.check_bounds(), "");
    }
}

// All or nothing: when the parent ends a packet red, the child's buckets are untouched (Linux
// `police ... pipe` and Cisco's child-first policing would have charged the child).
TEST_F(HierDatapathTest, AParentsRedLeavesTheChildsTokensUntouched) {
    apply({only_parent(level(1, "link", Algo::srtcm, 8, 1500, 0, 0, TCM_PER_AGGREGATE)),
           level(2, "user", Algo::srtcm, 8, 1000, 0, 0, TCM_PER_SRC, "link")});
    EXPECT_EQ(send("198.18.7.1", 1000).color, Color::green); // link keeps 500
    auto v = send("198.18.7.2", 1000);                       // user .2 green, link red
    EXPECT_EQ(v.color, Color::red);
    EXPECT_EQ(v.policy_id, 2u);
    tcm_flow child = flow_of(2, "198.18.7.2");
    EXPECT_EQ(child.meter.c_tokens, 1000 * kByte) << "the child was charged for a red packet";
    EXPECT_EQ(flow_of(1).meter.c_tokens, 500 * kByte);
    EXPECT_EQ(child.counters.packets[TCM_RED], 1u); // counted by its final colour
    // What the parent can still take passes, and both levels pay for it.
    EXPECT_EQ(send("198.18.7.2", 500).color, Color::green);
    EXPECT_EQ(flow_of(2, "198.18.7.2").meter.c_tokens, 500 * kByte);
    EXPECT_EQ(flow_of(1).meter.c_tokens, 0u);
    // Counters: every level counts every packet that passed through it, by final colour.
    auto c = dp->policy_counters();
    EXPECT_EQ(c[1].bytes[TCM_GREEN], 1500u);
    EXPECT_EQ(c[1].bytes[TCM_RED], 1000u);
    EXPECT_EQ(c[2].bytes[TCM_GREEN], 1500u);
    EXPECT_EQ(c[2].bytes[TCM_RED], 1000u);
}

// Every pair of algorithms, child colour-blind and colour-aware: the parent meters the colour
// from below, a colour never improves, and the result is the reference's.
TEST_F(HierDatapathTest, EveryAlgorithmPairBlindAndAware) {
    uint32_t id = 10;
    for (const AlgoInfo &c : algorithms())
        for (const AlgoInfo &p : algorithms())
            for (bool aware : {false, true}) {
                const Algo child = c.algo, parent = p.algo;
                SCOPED_TRACE(fmt::format("{} under {}, {}", to_string(child), to_string(parent),
                                         aware ? "aware" : "blind"));
                auto mk = [&](uint32_t i, const char *name, Algo a, uint64_t rate, tcm_per per,
                              std::string par) {
                    uint64_t second = info(a).second == SecondBucket::peak ? rate * 2 : rate;
                    return level(i, name, a, rate, 3000, second, 3000, per, std::move(par));
                };
                std::vector<Policy> set = {
                    only_parent(mk(id, "p", parent, 400000, TCM_PER_AGGREGATE, "")),
                    mk(id + 1, "c", child, 160000, TCM_PER_SRC, "p")};
                set[1].meter.color_aware = aware;
                set[1].match.proto = 17;
                id += 2;
                apply(set);
                HierModelEngine model(set);
                std::vector<test::RefLevel> ref_levels;
                for (int i : {1, 0}) {
                    test::RefLevel l;
                    const auto &m = set[i].meter;
                    l.algo = m.algo;
                    l.cir = m.cir;
                    l.cbs = m.cbs;
                    l.second_rate = second_rate(m);
                    l.second_size = second_size(m);
                    l.aware = m.color_aware;
                    l.per = set[i].per;
                    ref_levels.push_back(l);
                }
                test::RefChain ref(ref_levels);
                std::mt19937_64 rng(id);
                uint64_t t = 5000000000ull * id;
                size_t seen[3] = {};
                for (int k = 0; k < 400; ++k) {
                    FlowTracePacket p;
                    t += rng() % 3 == 0 ? 0 : rng() % 6000000;
                    p.time_ns = t;
                    p.bytes = 28 + rng() % 1473;
                    p.color = static_cast<Color>(rng() % 3);
                    uint32_t src = htonl(0xc6120701 + rng() % 3), dst = htonl(0xc6120909);
                    std::memcpy(p.src.data(), &src, 4);
                    std::memcpy(p.dst.data(), &dst, 4);
                    p.proto = 17;
                    p.ports = true;
                    p.sport = 1000;
                    p.dport = 7000;
                    dp->set_clock(t);
                    dp->run_xdp(synthesize_frame(p));
                    auto got = dp->last_verdict();
                    ASSERT_EQ(got.policy_id, id - 1);
                    ASSERT_EQ(got.color, model.mark(p).color) << "packet " << k;
                    Color want = test::ref_mark(ref, p);
                    ASSERT_EQ(got.color, want) << "packet " << k;
                    if (aware) {
                        EXPECT_GE(static_cast<int>(got.color), static_cast<int>(p.color));
                    }
                    ++seen[static_cast<int>(got.color)];
                }
                EXPECT_GT(seen[0], 0u);
                EXPECT_GT(seen[2], 0u);
            }
}

// A live change of a parent keeps every level's tokens and counters.
TEST_F(HierDatapathTest, LiveUpdateOfAParentKeepsEveryLevel) {
    auto link = only_parent(level(1, "link", Algo::srtcm, 8, 5000, 0, 0, TCM_PER_AGGREGATE));
    auto user = level(2, "user", Algo::srtcm, 8, 3000, 0, 0, TCM_PER_SRC, "link");
    apply({link, user});
    EXPECT_EQ(send("198.18.7.1", 1000).color, Color::green);
    link.meter.cir = 16; // a new rate; the same sizes
    ASSERT_TRUE(dp->upsert(link));
    EXPECT_EQ(flow_of(1).meter.c_tokens, 4000 * kByte);
    EXPECT_EQ(flow_of(2, "198.18.7.1").meter.c_tokens, 2000 * kByte);
    EXPECT_EQ(dp->policy_counters()[1].bytes[TCM_GREEN], 1000u);
    EXPECT_EQ(send("198.18.7.1", 1000).color, Color::green);
    EXPECT_EQ(dp->policy_counters()[2].bytes[TCM_GREEN], 2000u);
    // Deleting the parent under its child is refused, naming both; nothing changes.
    auto r = dp->remove(1);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), ::testing::HasSubstr("policy 'user': its parent 'link' does not exist"));
    EXPECT_EQ(dp->policies().size(), 2u);
}

// A lock timeout at the parent releases the child's lock it already took: held by the test
// (as by a stalled holder), the parent's lock turns the packet red and counts a timeout; once
// it is free, both levels are free and the next packet passes. A leaked child lock would leave
// that flow red until reclaimed.
TEST_F(HierDatapathTest, ALockTimeoutAtTheParentReleasesTheChildsLock) {
    apply({level(1, "site", Algo::srtcm, 8000000, 100000, 0, 0, TCM_PER_SRC),
           level(2, "conn", Algo::srtcm, 8000000, 100000, 0, 0, TCM_PER_5TUPLE, "site")});
    ASSERT_EQ(send("198.18.7.1", 100).color, Color::green);
    int fd = test::map_of_prog(dp->xdp_prog_fd(), "tcm_flow_slots");
    ASSERT_GE(fd, 0) << "no tcm_flow_slots map on the XDP program";
    auto parent_slot = [&]() {
        for (const auto &f : dp->flows())
            if (f.key.policy_id == 1)
                return f.slot;
        ADD_FAILURE() << "no flow of the parent";
        return uint32_t{0};
    };
    auto set_lock = [&](uint32_t held) {
        uint32_t k = parent_slot();
        tcm_flow_slot v{};
        ASSERT_EQ(bpf_map_lookup_elem(fd, &k, &v), 0);
        v.flow.lock = held;
        ASSERT_EQ(bpf_map_update_elem(fd, &k, &v, BPF_EXIST), 0);
    };
    uint64_t timeouts = dp->global_counters().lock_timeouts;
    set_lock(1);
    EXPECT_EQ(send("198.18.7.1", 100).color, Color::red);
    EXPECT_EQ(dp->global_counters().lock_timeouts, timeouts + 1);
    set_lock(0);
    size_t seen = 0;
    for (const auto &f : dp->flows()) {
        EXPECT_EQ(f.state.lock, 0u) << "policy " << f.key.policy_id << "'s flow left locked";
        ++seen;
    }
    EXPECT_EQ(seen, 2u);
    EXPECT_EQ(send("198.18.7.1", 100).color, Color::green);
    close(fd);
}

// docs/spec.md §9 with §14: a quota given to the top of a running 3-level chain reaches the
// chains below it (the leaf's packets now go the data path's way for a warm-up or quota, which
// the daemon marks on every policy under it), counts what passes every level, stops the chain
// once used; and taken away it goes with it. A packet the quota stops takes no leaf tokens.
TEST_F(HierDatapathTest, AQuotaGivenToTheTopReachesEveryChainBelowItAndGoesWithIt) {
    auto top = only_parent(level(1, "top", Algo::srtcm, 8000000, 100000, 0, 0, TCM_PER_AGGREGATE));
    auto mid = only_parent(level(2, "mid", Algo::srtcm, 8000000, 100000, 0, 0, TCM_PER_SRC, "top"));
    auto leaf = level(3, "leaf", Algo::srtcm, 8000000, 100000, 0, 0, TCM_PER_5TUPLE, "mid");
    apply({top, mid, leaf});
    ASSERT_EQ(send("198.18.7.1", 1000).color, Color::green);
    top.meter.quota_bytes = 2500;
    top.meter.quota_period_ns = 86400ull * 1000000000;
    ASSERT_TRUE(dp->upsert(top));
    // 1000 and 2000 bytes are under 2500; the third packet crosses it and counts whole.
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(send("198.18.7.1", 1000, 1000 + i).color, Color::green) << i;
    auto use = dp->quota_use(1);
    ASSERT_TRUE(use);
    EXPECT_EQ(use->used, 3000u);
    const tcm_meter_state mid_before = flow_of(2, "198.18.7.1").meter;
    EXPECT_EQ(send("198.18.7.1", 1000, 1002).color, Color::red);
    const tcm_meter_state mid_after = flow_of(2, "198.18.7.1").meter;
    EXPECT_EQ(mid_after.c_tokens, mid_before.c_tokens); // nothing taken below the quota
    EXPECT_EQ(mid_after.last_ns, mid_before.last_ns);
    EXPECT_EQ(dp->quota_use(1)->used, 3000u);
    const auto counters = dp->policy_counters();
    for (uint32_t id : {1u, 2u, 3u}) {
        EXPECT_EQ(counters.at(id).packets[TCM_GREEN], 4u) << id;
        EXPECT_EQ(counters.at(id).packets[TCM_RED], 1u) << id;
    }
    top.meter.quota_bytes = 0;
    top.meter.quota_period_ns = 0;
    ASSERT_TRUE(dp->upsert(top));
    EXPECT_EQ(send("198.18.7.1", 1000, 1002).color, Color::green);
    EXPECT_FALSE(dp->quota_use(1));
}

// Two CPUs on one 3-level chain (5-tuple under per-source under aggregate), frozen clock: every
// level gives out exactly what its buckets held, never a byte more, whatever the interleaving.
TEST_F(HierDatapathTest, TwoCpusOnAThreeLevelChainNeverOverAdmit) {
    if (std::thread::hardware_concurrency() < 2)
        GTEST_SKIP() << "needs two CPUs";
    apply({only_parent(level(1, "link", Algo::rfc4115, 8, 25000, 8, 10000, TCM_PER_AGGREGATE)),
           only_parent(level(2, "user", Algo::trtcm, 8, 15000, 16, 30000, TCM_PER_SRC, "link")),
           level(3, "conn", Algo::srtcm, 8, 20000, 0, 20000, TCM_PER_5TUPLE, "user")});
    auto a = Packet().ipv4("198.18.7.1", "198.18.9.9").udp(1, 2).l3_size(100).build();
    auto b = Packet().ipv4("198.18.7.2", "198.18.9.9").udp(1, 2).l3_size(100).build();
    // CPU 0 sends from .1, CPU 1 first from .1 (one flow at every level), then from .2 (own
    // child and user, shared link).
    for (const auto *second : {&a, &b}) {
        std::atomic<bool> go{false};
        auto hammer = [&](int cpu, const std::vector<uint8_t> &frame) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
            while (!go)
                ;
            LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                        .data_size_in = static_cast<uint32_t>(frame.size()), .repeat = 100000);
            bpf_prog_test_run_opts(dp->xdp_prog_fd(), &opts);
        };
        std::thread t0(hammer, 0, std::cref(a)), t1(hammer, 1, std::cref(*second));
        go = true;
        t0.join();
        t1.join();
    }
    auto c = dp->policy_counters();
    auto passed = [](const tcm_counters &x) { return x.bytes[TCM_GREEN] + x.bytes[TCM_YELLOW]; };
    // Conservation at every level: what passed is exactly what left its buckets.
    tcm_flow link = dp->policy_state(1);
    EXPECT_EQ(passed(c[1]) * kByte,
              (25000 + 10000) * kByte - link.meter.c_tokens - link.meter.e_tokens);
    EXPECT_LE(passed(c[1]), 35000u);
    uint64_t users = 0, conns = 0;
    for (const auto &f : dp->flows()) {
        uint64_t through = f.state.counters.bytes[TCM_GREEN] + f.state.counters.bytes[TCM_YELLOW];
        if (f.key.policy_id == 2) {
            // trtcm: every packet that passed took P.
            EXPECT_EQ(through * kByte, 30000 * kByte - f.state.meter.e_tokens);
            EXPECT_LE(through, 30000u);
            users += through;
        } else if (f.key.policy_id == 3) {
            EXPECT_EQ(through * kByte,
                      40000 * kByte - f.state.meter.c_tokens - f.state.meter.e_tokens);
            EXPECT_LE(through, 40000u);
            conns += through;
        }
    }
    auto g = dp->global_counters();
    // Two CPUs creating one flow at once: the loser finds the winner's (no table-full path).
    EXPECT_EQ(g.table_full, 0u);
    // A creator that could not have the home slot's guard in time (a slow vCPU under emulation
    // holds it) meters its packet in the policy's aggregate bucket, counted as a lock timeout:
    // what passed there is part of the level's total, and only a timeout puts it there.
    const uint64_t user_agg = passed(dp->policy_state(2).counters);
    const uint64_t conn_agg = passed(dp->policy_state(3).counters);
    if (g.lock_timeouts == 0) {
        EXPECT_EQ(user_agg, 0u);
        EXPECT_EQ(conn_agg, 0u);
    }
    users += user_agg;
    conns += conn_agg;
    EXPECT_EQ(users, passed(c[1]))
        << "table_full " << g.table_full << " lock_timeouts " << g.lock_timeouts << " user agg "
        << user_agg << " flows " << dp->flows().size();
    EXPECT_EQ(conns, passed(c[1]))
        << "lock_timeouts " << g.lock_timeouts << " conn agg " << conn_agg;
    EXPECT_EQ(passed(c[2]), passed(c[1]));
    EXPECT_EQ(passed(c[3]), passed(c[1]));
    uint64_t total = c[3].packets[0] + c[3].packets[1] + c[3].packets[2];
    EXPECT_EQ(total, 400000u);
    // Nothing short of the link's 35000 but what lock timeouts coloured red: the .2 user's
    // 30000 alone could fill it.
    uint64_t timeouts = dp->global_counters().lock_timeouts;
    EXPECT_GE(passed(c[1]) + 100 * timeouts, 35000u);
}

} // namespace
