// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Per-flow state and updates in the data path (bpf/tricolor.bpf.c) through BPF_PROG_TEST_RUN:
// per-key modes, a full table, listing, policy updates that keep tokens and counters, refused
// applies, table limits, two CPUs on one flow, and pinning across a restart.
#include "datapath_fixture.hpp"
#include "tricolor/policy_sets.hpp"
#include "tricolor/rule_table.hpp"
#include "tricolor/text.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

using namespace tricolor;
using namespace tricolor::test; // DatapathTest, Packet, policy(), prefix(), v4udp()

namespace {

// ---- per-flow state, updates ------------------------------------------------------------------

TEST_F(DatapathTest, PerSourceKeysGiveOneFlowPerSender) {
    Policy p = policy(1, "per-src", Algo::srtcm, 8000, 1000, 0);
    p.per = TCM_PER_SRC;
    apply({p});
    for (int rep = 0; rep < 2; ++rep)
        for (const char *src : {"198.18.0.1", "198.18.0.2", "198.18.0.3"})
            dp->run_xdp(Packet().ipv4(src, "198.19.0.1").udp(rep, 2).l3_size(600).build());
    auto flows = dp->flows();
    ASSERT_EQ(flows.size(), 3u);
    for (const auto &f : flows) {
        EXPECT_EQ(f.key.policy_id, 1u);
        EXPECT_EQ(f.state.counters.packets[TCM_GREEN], 1u); // 1000-byte bucket: one 600-byte packet
        EXPECT_EQ(f.state.counters.packets[TCM_RED], 1u);
    }
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[TCM_GREEN], 3u);
    EXPECT_EQ(c.packets[TCM_RED], 3u);
    // An update keeps the flows; removing the policy takes them away.
    apply({p});
    EXPECT_EQ(dp->flows().size(), 3u);
    apply({});
    EXPECT_TRUE(dp->flows().empty());
}

TEST_F(DatapathTest, PolicyUpdateKeepsTokensCappedAndCounters) {
    Policy p = policy(1, "p", Algo::srtcm, 8000, 3000, 0);
    apply({p});
    auto frame = Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(1000).build();
    dp->run_xdp(frame); // 2000 tokens left
    p.meter.cbs = 1500; // shrink: tokens are capped to 1500
    apply({p});
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_PASS); // 1500 -> 500
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_DROP); // 500 < 1000
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[TCM_GREEN], 2u); // counters kept across the update
    EXPECT_EQ(c.packets[TCM_RED], 1u);
    EXPECT_EQ(dp->policy_state(1).meter.c_tokens, 500 * TCM_TOKENS_PER_BYTE);
    // A policy removed and added again is new: full buckets, zero counters.
    apply({});
    apply({p});
    EXPECT_EQ(packets(1), 0u);
    EXPECT_EQ(dp->run_xdp(frame).retval, XDP_PASS);
}

TEST_F(DatapathTest, RefusedApplyChangesNothing) {
    Policy good = policy(1, "good");
    apply({good});
    uint32_t set = dp->active_set();
    Policy bad = policy(2, "bad");
    bad.meter.cbs = 0;
    Policy dup = policy(1, "dup-id");
    auto r = dp->apply({good, bad, dup});
    ASSERT_FALSE(r.has_value());
    EXPECT_THAT(r.error(), ::testing::HasSubstr("policy 'bad': CBS 0 bytes"));
    EXPECT_THAT(r.error(), ::testing::HasSubstr("policy 'dup-id': id 1 is used twice"));
    EXPECT_EQ(dp->active_set(), set);
    dp->run_xdp(v4udp().build());
    EXPECT_EQ(packets(1), 1u);
}

TEST_F(DatapathTest, TooManyShapesIsRefused) {
    std::vector<Policy> ps;
    for (uint32_t i = 0; i < 70; ++i) {
        Policy p = policy(i, "p" + std::to_string(i));
        p.match.dst = Prefix{false, {198, 18, 0, 0}, static_cast<uint8_t>(i % 33)};
        p.match.dport = PortRange{uint16_t(i), uint16_t(i)};
        p.match.src = Prefix{false, {}, static_cast<uint8_t>(i / 33)};
        ps.push_back(p);
    }
    auto r = dp->apply(ps);
    ASSERT_FALSE(r.has_value());
    EXPECT_THAT(r.error(), ::testing::HasSubstr("distinct match shapes"));
}

TEST_F(DatapathTest, SixteenThousandPoliciesClassify) {
    std::vector<Policy> ps;
    for (uint32_t i = 0; i < TCM_MAX_POLICIES; ++i) {
        Policy p = policy(i, "p" + std::to_string(i));
        p.match.dst = Prefix{false, {198, 18, uint8_t(i >> 8), uint8_t(i & 0xff)}, 32};
        ps.push_back(p);
    }
    apply(ps);
    dp->run_xdp(Packet().ipv4("198.18.0.1", "198.18.12.34").udp(1, 2).build());
    EXPECT_EQ(packets(12 * 256 + 34), 1u);
}

// ---- concurrency --------------------------------------------------------------------------------

// Two threads on different CPUs hammer one aggregate flow with the clock stopped: the meter
// may admit at most what the buckets hold, exactly, however the runs interleave.
TEST_F(DatapathTest, TwoCpusOnOneFlowNeverOverAdmit) {
    if (std::thread::hardware_concurrency() < 2)
        GTEST_SKIP() << "needs two CPUs";
    Policy p = policy(1, "shared", Algo::srtcm, 8, 64 * 1000, 64 * 1000); // 1 B/s
    apply({p});
    auto frame = Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(100).build();
    test::run_on_two_cpus(dp->xdp_prog_fd(), frame, 200000);
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[0] + c.packets[1] + c.packets[2], 400000u);
    EXPECT_LE(c.bytes[TCM_GREEN], 64000u);  // never more than CBS...
    EXPECT_LE(c.bytes[TCM_YELLOW], 64000u); // ...or EBS
    // ...and nothing short of them but what a lock timeout coloured red (each could have
    // taken 100 bytes): with no timeouts, exactly CBS and EBS.
    uint64_t timeouts = dp->global_counters().lock_timeouts;
    EXPECT_GE(c.bytes[TCM_GREEN] + c.bytes[TCM_YELLOW] + 100 * timeouts, 128000u);
    EXPECT_EQ(dp->policy_state(1).counters.bytes[TCM_GREEN], c.bytes[TCM_GREEN]);
}

class SmallTableTest : public DatapathTest {
  protected:
    uint32_t flow_capacity() const override { return 4; }
};

// A full table never hands out a fresh burst: new flows are metered in the policy's aggregate
// bucket and counted; flows whose buckets are full can be reclaimed without changing a colour.
TEST_F(SmallTableTest, FullTableFallsBackToTheAggregateBucketAndReclaimsIdleFlows) {
    Policy p = policy(1, "per-src", Algo::srtcm, 8000, 1000, 0); // 1000 B/s, 1000 B buckets
    p.per = TCM_PER_SRC;
    apply({p});
    auto from = [](int i) {
        return Packet()
            .ipv4("198.18.0." + std::to_string(i), "198.19.0.1")
            .udp(1, 2)
            .l3_size(600)
            .build();
    };
    for (int i = 1; i <= 4; ++i)
        EXPECT_EQ(dp->run_xdp(from(i)).retval, XDP_PASS);
    EXPECT_EQ(dp->flows().size(), 4u);
    // Sources 5 and 6 find no room: they share the aggregate bucket (1000 bytes: one passes).
    EXPECT_EQ(dp->run_xdp(from(5)).retval, XDP_PASS);
    EXPECT_EQ(dp->run_xdp(from(6)).retval, XDP_DROP);
    EXPECT_EQ(dp->global_counters().table_full, 2u);
    EXPECT_EQ(dp->flows().size(), 4u);
    EXPECT_EQ(dp->policy_state(1).counters.packets[TCM_GREEN], 1u);

    // 0.4 s later each flow holds 400 + 400 = 800 of 1000 bytes: not idle, nothing reclaimed.
    dp->set_clock(1400000000);
    EXPECT_EQ(dp->reclaim_idle_flows(), 0u);
    // At 0.6 s they are full again: all four go, and a new source gets a flow of its own.
    dp->set_clock(1600000000);
    EXPECT_EQ(dp->reclaim_idle_flows(), 4u);
    EXPECT_EQ(dp->flows().size(), 0u);
    EXPECT_EQ(dp->run_xdp(from(7)).retval, XDP_PASS);
    EXPECT_EQ(dp->flows().size(), 1u);
    EXPECT_EQ(dp->global_counters().table_full, 2u);
}

TEST_F(DatapathTest, PerKeyModes) {
    struct Mode {
        const char *name;
        tcm_per per;
        uint8_t prefix4;
        size_t flows; // from the six packets below
    };
    // Sources .1 .2 in 198.18.0.0/24 and .1 in 198.18.1.0/24, each to two destinations.
    for (const Mode &m : {Mode{"src", TCM_PER_SRC, 32, 3}, Mode{"src/24", TCM_PER_SRC, 24, 2},
                          Mode{"dst", TCM_PER_DST, 32, 2}, Mode{"dst/8", TCM_PER_DST, 8, 1},
                          Mode{"5tuple", TCM_PER_5TUPLE, 32, 6}}) {
        SCOPED_TRACE(m.name);
        Policy p = policy(1, m.name, Algo::srtcm, 8000, 100000, 0);
        p.per = m.per;
        p.prefix4 = m.prefix4;
        apply({});
        apply({p});
        for (const char *src : {"198.18.0.1", "198.18.0.2", "198.18.1.1"})
            for (const char *dst : {"198.19.0.1", "198.19.0.2"})
                dp->run_xdp(Packet().ipv4(src, dst).udp(1, 2).build());
        EXPECT_EQ(dp->flows().size(), m.flows);
    }
}

// An IPv6 5-tuple does not fit the flow table's 20-byte key (tcm_flow_id in tricolor_abi.h): its
// key is a keyed hash, and the tuple is kept beside it for listing. Tuples that differ in any
// one field are flows apart, each listed whole under the key the header describes (the hash of
// its tuple under the secret the map holds); reclaiming a flow and removing its policy take its
// tuple too. IPv4 5-tuples, addresses and cgroups fit, and keep no tuple.
TEST_F(DatapathTest, Ipv6FiveTuplesAreFlowsApartAndListedWhole) {
    Policy p = policy(1, "5tuple", Algo::srtcm, 8000, 100000, 0);
    p.per = TCM_PER_5TUPLE;
    apply({p});
    struct Tuple {
        const char *src, *dst;
        uint16_t sport, dport;
        uint8_t proto;
    };
    const Tuple tuples[] = {{"2001:db8::1", "2001:db8:1::1", 1000, 2000, IPPROTO_UDP},
                            {"2001:db8::2", "2001:db8:1::1", 1000, 2000, IPPROTO_UDP},
                            {"2001:db8::1", "2001:db8:1::2", 1000, 2000, IPPROTO_UDP},
                            {"2001:db8::1", "2001:db8:1::1", 1001, 2000, IPPROTO_UDP},
                            {"2001:db8::1", "2001:db8:1::1", 1000, 2001, IPPROTO_UDP},
                            {"2001:db8::1", "2001:db8:1::1", 1000, 2000, IPPROTO_TCP}};
    auto text = [](const uint32_t src[4], const uint32_t dst[4], unsigned sport, unsigned dport,
                   unsigned proto) {
        char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, src, a, sizeof(a));
        inet_ntop(AF_INET6, dst, b, sizeof(b));
        return fmt::format("{} {} {} {} {}", a, b, sport, dport, proto);
    };
    std::set<std::string> sent;
    for (int rep = 0; rep < 2; ++rep)
        for (const Tuple &t : tuples) {
            Packet pk;
            pk.ipv6(t.src, t.dst);
            if (t.proto == IPPROTO_TCP)
                pk.tcp(t.sport, t.dport);
            else
                pk.udp(t.sport, t.dport);
            EXPECT_EQ(dp->run_xdp(pk.build()).retval, XDP_PASS);
            uint32_t s[4], d[4];
            ASSERT_EQ(inet_pton(AF_INET6, t.src, s), 1);
            ASSERT_EQ(inet_pton(AF_INET6, t.dst, d), 1);
            sent.insert(text(s, d, t.sport, t.dport, t.proto));
        }
    // One IPv4 5-tuple beside them: its key holds the tuple itself.
    dp->run_xdp(Packet().ipv4("198.18.0.1", "198.19.0.1").udp(1, 2).build());
    auto flows = dp->flows();
    ASSERT_EQ(flows.size(), 7u);
    const tcm_flow_seed seed = dp->flow_seed();
    EXPECT_TRUE(std::ranges::any_of(seed.k, [](uint32_t w) { return w != 0; })) << "no secret";
    std::set<std::string> listed;
    for (const auto &f : flows) {
        EXPECT_EQ(TCM_FLOW_POLICY(f.id.head), 1u);
        EXPECT_EQ(f.key.policy_id, 1u);
        if (TCM_FLOW_KIND(f.id.head) == TCM_FLOW_5TUPLE4) {
            EXPECT_EQ(f.id.w[0], f.key.src[3]);
            continue;
        }
        ASSERT_EQ(TCM_FLOW_KIND(f.id.head), TCM_FLOW_5TUPLE6);
        EXPECT_EQ(f.state.counters.packets[TCM_GREEN], 2u);
        uint32_t w[4];
#define TUPLE_WORD(i) TCM_FLOW_TUPLE_WORD(&f.key, i)
        tcm_flow_hash6(TUPLE_WORD, seed.k, w);
#undef TUPLE_WORD
        EXPECT_EQ(std::memcmp(w, f.id.w, sizeof(w)), 0) << "the key is not the tuple's hash";
        listed.insert(text(f.key.src, f.key.dst, f.key.sport, f.key.dport, f.key.proto));
    }
    EXPECT_EQ(listed, sent);
    EXPECT_EQ(dp->flow_tuple_entries(), 6u);
    // Full buckets a second later: reclaimed, tuples and all; the policy's removal takes the rest.
    dp->set_clock(2000000000);
    EXPECT_EQ(dp->reclaim_idle_flows(), 7u);
    EXPECT_EQ(dp->flow_tuple_entries(), 0u);
    dp->run_xdp(Packet().ipv6("2001:db8::1", "2001:db8:1::1").udp(1000, 2000).build());
    EXPECT_EQ(dp->flow_tuple_entries(), 1u);
    apply({});
    EXPECT_TRUE(dp->flows().empty());
    EXPECT_EQ(dp->flow_tuple_entries(), 0u);
}

TEST_F(DatapathTest, ListsMoreFlowsThanOneBatch) {
    Policy p = policy(1, "5tuple", Algo::srtcm, 8000, 100000, 0);
    p.per = TCM_PER_5TUPLE;
    apply({p});
    for (uint16_t port = 1; port <= 5000; ++port)
        dp->run_xdp(Packet().ipv4("198.18.0.1", "198.19.0.1").udp(port, 2).build());
    auto flows = dp->flows();
    ASSERT_EQ(flows.size(), 5000u);
    std::set<uint16_t> ports;
    for (const auto &f : flows)
        ports.insert(f.key.sport);
    EXPECT_EQ(ports.size(), 5000u); // each once, across batches of 4096
}

TEST_F(DatapathTest, UpsertAndRemoveOnePolicyAtATime) {
    ASSERT_TRUE(dp->upsert(policy(1, "a")).has_value());
    ASSERT_TRUE(dp->upsert(policy(2, "b")).has_value());
    EXPECT_EQ(dp->policies().size(), 2u);
    dp->run_xdp(v4udp().build());
    Policy changed = policy(1, "a", Algo::srtcm, 16000000);
    ASSERT_TRUE(dp->upsert(changed).has_value());
    EXPECT_EQ(dp->policies().size(), 2u);
    EXPECT_EQ(dp->policies()[0].meter.cir, 16000000u);
    EXPECT_EQ(packets(1) + packets(2), 1u); // counters kept across the update
    auto bad = policy(3, "b");              // a second "b"
    EXPECT_THAT(dp->upsert(bad).error(), ::testing::HasSubstr("the name is used twice"));
    EXPECT_EQ(dp->policies().size(), 2u);
    ASSERT_TRUE(dp->remove(2).has_value());
    EXPECT_EQ(dp->policies().size(), 1u);
    EXPECT_THAT(dp->remove(2).error(), ::testing::HasSubstr("no policy with id 2"));
}

// The info of the map pinned at @path, if one is.
std::optional<bpf_map_info> pinned_map_info(const std::string &path) {
    int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        return std::nullopt;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    const bool got = bpf_obj_get_info_by_fd(fd, &info, &len) == 0;
    close(fd);
    return got ? std::optional(info) : std::nullopt;
}

// A pin directory of its own, and a first Datapath on it that applied policy 3 (srTCM, CBS 3000)
// and passed one 1000-byte packet: what a later one adopts.
class DatapathPinning : public ::testing::Test {
  protected:
    void SetUp() override {
        TRICOLOR_REQUIRE_ROOT();
        quiet_libbpf_logging();
        Datapath::remove_pins(pin);
        o.testing = true;
        o.flow_capacity = 64;
        o.pin_dir = pin;
        o.programs = DatapathOptions::kXdpProgram; // what these cases run
        Datapath a(o);
        EXPECT_FALSE(a.adopted());
        ASSERT_TRUE(a.apply({p}).has_value());
        a.set_clock(5000000000);
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_PASS); // 2000 left
    }
    void TearDown() override { Datapath::remove_pins(pin); }
    // A per-source policy's three flows, 2000 of 3000 tokens left each (the tests of the flow
    // tables of before make those tables of them).
    static std::vector<uint8_t> from(const char *src) {
        return Packet().ipv4(src, "198.19.0.1").udp(1, 2).l3_size(1000).build();
    }
    std::vector<Flow> three_flows() {
        Policy ps = policy(4, "per-src", Algo::srtcm, 8000, 3000, 0);
        ps.per = TCM_PER_SRC;
        Datapath a(o);
        EXPECT_TRUE(a.apply({ps}).has_value());
        a.set_clock(5000000000);
        for (const char *src : {"198.18.0.1", "198.18.0.2", "198.18.0.3"})
            EXPECT_EQ(a.run_xdp(from(src)).retval, XDP_PASS);
        return a.flows();
    }
    // Pins at @dir/tcm_flows a hash map as a daemon of before pinned its flow table: @flows'
    // states keyed by @key_of(flow), @key_size bytes.
    template <typename KeyOf>
    void pin_table_of_before(const std::string &dir, uint32_t key_size, KeyOf key_of,
                             const std::vector<Flow> &flows) {
        LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_NO_PREALLOC);
        int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "tcm_flows", key_size, sizeof(tcm_flow),
                                o.flow_capacity, &opts);
        ASSERT_GE(fd, 0) << errno_text(errno);
        for (const auto &f : flows)
            ASSERT_EQ(bpf_map_update_elem(fd, key_of(f), &f.state, BPF_NOEXIST), 0);
        ASSERT_EQ(bpf_obj_pin(fd, (dir + "/tcm_flows").c_str()), 0) << errno_text(errno);
        close(fd);
    }
    std::string pin = "/sys/fs/bpf/tricolor-test-" + std::to_string(getpid());
    DatapathOptions o;
    Policy p = policy(3, "kept", Algo::srtcm, 8000, 3000, 0);
    std::vector<uint8_t> frame =
        Packet().ipv4("198.18.0.1", "198.18.0.2").udp(1, 2).l3_size(1000).build();
};

// What a daemon restart relies on: a new Datapath on the same pin directory finds the active
// set, every counter and every token where the old one left them.
TEST_F(DatapathPinning, ANewDatapathAdoptsBucketsCountersAndTheActiveSet) {
    {
        Datapath b(o);
        EXPECT_TRUE(b.adopted());
        ASSERT_EQ(b.policies().size(), 1u);
        EXPECT_EQ(b.policies()[0].id, 3u);
        EXPECT_EQ(b.policies()[0].name, "kept");
        b.set_clock(5000000000);
        // Still policing before any apply: the pinned set is the active one.
        EXPECT_EQ(b.run_xdp(frame).retval, XDP_PASS); // 1000 left
        ASSERT_TRUE(b.apply({p}).has_value());        // same id: kept
        EXPECT_EQ(b.run_xdp(frame).retval, XDP_PASS); // 0 left
        EXPECT_EQ(b.run_xdp(frame).retval, XDP_DROP);
        auto c = b.policy_counters()[3];
        EXPECT_EQ(c.packets[TCM_GREEN], 3u); // one counted by a, two by b
        EXPECT_EQ(c.packets[TCM_RED], 1u);
    }
    Datapath::remove_pins(pin);
    EXPECT_FALSE(std::filesystem::exists(pin));
}

// Another capacity than the pinned table's (--flows changed at a restart): the table becomes
// the table of before and a new one of the new size is made; a flow moves into it at its next
// packet, or when user space moves the rest, with its tokens and counters: a flow that had 2000
// of 3000 tokens passes two more 1000-byte packets, not three, whichever moved it. The table of
// before is listed meanwhile and dropped, pins and all, once empty.
TEST_F(DatapathPinning, AnotherCapacityResizesTheTableAndEveryFlowMovesWhole) {
    const std::string dir = fmt::format("{}/abi{}", pin, TCM_ABI_VERSION);
    ASSERT_EQ(three_flows().size(), 3u);
    DatapathOptions bigger = o;
    bigger.flow_capacity = 256;
    Datapath b(bigger);
    EXPECT_TRUE(b.adopted());
    EXPECT_TRUE(b.moving_flows_of_before());
    for (const char *name : {"tcm_flow_slots_prev", "tcm_flow_meta_prev", "tcm_flow_slots"})
        EXPECT_TRUE(std::filesystem::exists(dir + "/" + name)) << name;
    b.set_clock(5000000000);
    auto flows = b.flows();
    ASSERT_EQ(flows.size(), 3u);
    for (const auto &f : flows)
        EXPECT_FALSE(Flow::in_table(f.slot)) << "not moved yet: listed from the table of before";
    // Source 1 moves at its next packet: 2000 tokens, two packets.
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_PASS);
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_PASS);
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_DROP);
    flows = b.flows();
    ASSERT_EQ(flows.size(), 3u) << "a flow moved is listed once";
    EXPECT_EQ(std::ranges::count_if(flows, [](const Flow &f) { return Flow::in_table(f.slot); }),
              1);
    // User space moves the other two, and drops the table of before: no program of before is
    // left to make a flow there once their pins go (as the daemon's start releases them).
    auto moved = b.move_flows_of_before();
    EXPECT_EQ(moved.moved, 2u);
    EXPECT_FALSE(moved.dropped) << "the programs of before are pinned under progs/";
    EXPECT_TRUE(b.moving_flows_of_before());
    EXPECT_EQ(b.flows().size(), 3u) << "a flow moved by user space is listed once";
    b.release_previous_programs({});
    moved = b.move_flows_of_before();
    EXPECT_EQ(moved.moved, 0u);
    EXPECT_EQ(moved.left, 0u);
    EXPECT_TRUE(moved.dropped);
    EXPECT_FALSE(b.moving_flows_of_before());
    for (const char *name : {"tcm_flow_slots_prev", "tcm_flow_meta_prev", "tcm_flow_tuples_prev"})
        EXPECT_FALSE(std::filesystem::exists(dir + "/" + name)) << name;
    flows = b.flows();
    ASSERT_EQ(flows.size(), 3u);
    for (const auto &f : flows) {
        EXPECT_TRUE(Flow::in_table(f.slot));
        EXPECT_EQ(f.state.lock, 0u);
        const bool one = f.key.src[3] == inet_addr("198.18.0.1");
        EXPECT_EQ(f.state.counters.packets[TCM_GREEN], one ? 3u : 1u);
        EXPECT_EQ(f.state.counters.packets[TCM_RED], one ? 1u : 0u);
    }
    // Source 2, moved by user space, kept its 2000 tokens too.
    EXPECT_EQ(b.run_xdp(from("198.18.0.2")).retval, XDP_PASS);
    EXPECT_EQ(b.run_xdp(from("198.18.0.2")).retval, XDP_PASS);
    EXPECT_EQ(b.run_xdp(from("198.18.0.2")).retval, XDP_DROP);
    // The new table holds 256 flows: 300 sources make 253 beside the three, and the rest are
    // metered in the policy's bucket (counted as table full).
    Policy ps = policy(4, "per-src", Algo::srtcm, 8000, 3000, 0);
    ps.per = TCM_PER_SRC;
    Policy wide = policy(5, "wide", Algo::srtcm, 8000000, 3000, 0);
    wide.per = TCM_PER_SRC;
    wide.match.dst = Prefix{false, {198, 19, 0, 2}, 32};
    ASSERT_TRUE(b.apply({ps, wide}).has_value());
    ASSERT_EQ(b.flows().size(), 3u) << "policy 4 unchanged: its flows stay";
    for (uint32_t i = 0; i < 300; ++i) {
        auto f =
            Packet()
                .ipv4(fmt::format("198.18.{}.{}", 10 + i / 200, i % 200 + 1).c_str(), "198.19.0.2")
                .udp(1, 2)
                .l3_size(100)
                .build();
        b.run_xdp(f);
    }
    EXPECT_EQ(b.flows().size(), 256u);
    EXPECT_EQ(b.global_counters().table_full, 300u - 253u);
}

// A flow moved at its packet and then reclaimed from the table (its buckets full again) is a
// new flow at its next packet: its slot of before stays, marked moved, and is not its flow any
// more (a packet that took it for one would wait on a lock no one releases).
TEST_F(DatapathPinning, AFlowMovedThenReclaimedIsANewFlowAtItsNextPacket) {
    ASSERT_EQ(three_flows().size(), 3u);
    DatapathOptions bigger = o;
    bigger.flow_capacity = 256;
    Datapath b(bigger);
    b.set_clock(5000000000);
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_PASS); // moved: 1000 left
    b.set_clock(8000000000);                                   // every bucket full again
    EXPECT_EQ(b.reclaim_idle_flows(), 3u) << "the one moved and the two of before";
    EXPECT_TRUE(b.flows().empty());
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_PASS);
    EXPECT_EQ(b.global_counters().lock_timeouts, 0u);
    EXPECT_EQ(b.global_counters().table_full, 0u);
    EXPECT_EQ(b.flows().size(), 1u);
}

// The same while the data path runs (grow): the programs loaded again over the same pins with
// a bigger table; a flow moves whole at its next packet or when user space moves it, once the
// programs of before are let go. A resize that cannot load changes nothing: the pins are as
// they were and the flows metered on.
// A growth under way (open_spill): flows that find the table at its capacity are made in the
// growth's own table, each with its own bucket, rather than metered in their policy's; a flow of
// the table stays there, and one made there is found there even once the table has room again.
// The growth takes that table as its table of before: its flows are listed, and move at their
// next packet with their tokens and counters.
TEST_F(DatapathPinning, FlowsBeyondAFullTableGoIntoTheGrowthsTableAndMoveWhole) {
    const std::string dir = fmt::format("{}/abi{}", pin, TCM_ABI_VERSION);
    Policy ps = policy(4, "per-src", Algo::srtcm, 8000, 3000, 0);
    ps.per = TCM_PER_SRC;
    auto src = [](int i) { return fmt::format("198.18.{}.{}", i / 200, i % 200 + 1); };
    auto send = [&](Datapath &d, int i) { return d.run_xdp(from(src(i).c_str())).retval; };
    Datapath a(o);
    ASSERT_TRUE(a.apply({ps}).has_value());
    a.set_clock(5000000000);
    ASSERT_EQ(a.flow_capacity(), 64u);
    for (int i = 0; i < 64; ++i)
        ASSERT_EQ(send(a, i), XDP_PASS) << i; // 2000 left each
    EXPECT_EQ(send(a, 64), XDP_PASS);         // no room: the policy's bucket
    EXPECT_EQ(a.global_counters().table_full, 1u);
    EXPECT_EQ(a.spilled_flows(), 0u);
    ASSERT_TRUE(a.open_spill(256));
    EXPECT_FALSE(a.open_spill(256)) << "one at a time";
    EXPECT_TRUE(std::filesystem::exists(dir + "/tcm_flows"));
    for (int i = 65; i < 100; ++i) {
        for (int k = 0; k < 3; ++k)
            EXPECT_EQ(send(a, i), XDP_PASS) << i << " " << k;
        EXPECT_EQ(send(a, i), XDP_DROP) << i << ": its own 3000 tokens";
    }
    EXPECT_EQ(a.global_counters().table_full, 1u) << "none metered in the policy's bucket";
    EXPECT_EQ(a.spilled_flows(), 35u);
    EXPECT_EQ(send(a, 0), XDP_PASS); // in the table: 1000 left
    // Room in the table again (source 1 reclaimed): source 65 stays where it was made.
    a.set_clock(6000000000);
    EXPECT_GE(a.reclaim_idle_flows(), 1u);
    a.set_clock(5000000000 + 1000000000 / 8); // 125 bytes more for each
    EXPECT_EQ(send(a, 65), XDP_DROP) << "found in the growth's table, not made anew";
    EXPECT_EQ(a.spilled_flows(), 35u);

    a.grow(256);
    // The cgroup ingress program finds the data path's maps by name: the growth's table too.
    EXPECT_GE(a.cgroup_in_prog_fd(), 0);
    EXPECT_FALSE(std::filesystem::exists(dir + "/tcm_flows"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/tcm_flows_prev"));
    ASSERT_TRUE(a.apply({ps}).has_value());
    a.release_previous_programs({});
    a.retire_previous();
    size_t in_prev = 0;
    for (const auto &f : a.flows())
        if (f.slot == Flow::kInPrev) {
            ++in_prev;
            EXPECT_EQ(f.state.counters.packets[TCM_GREEN], 3u);
            EXPECT_EQ(f.state.counters.packets[TCM_RED],
                      f.key.src[3] == inet_addr("198.18.0.66") ? 2u : 1u);
        }
    EXPECT_EQ(in_prev, 35u);
    a.set_clock(6000000000); // a second on: 1000 tokens more each
    for (int i = 66; i < 80; ++i) {
        EXPECT_EQ(send(a, i), XDP_PASS) << i;
        EXPECT_EQ(send(a, i), XDP_DROP) << i << ": moved at its packet with its tokens";
    }
    // The rest moved by user space (no program of before left), the growth's table dropped: a
    // next growth may open one again.
    EXPECT_FALSE(a.open_spill(1024)) << "flows of before still to move";
    a.move_flows_of_before();
    EXPECT_FALSE(std::filesystem::exists(dir + "/tcm_flows_prev"));
    EXPECT_FALSE(a.moving_flows_of_before());
    size_t spilled = 0; // (the table's own 64 were reclaimed, idle, above)
    for (const auto &f : a.flows()) {
        EXPECT_TRUE(Flow::in_table(f.slot)) << f.slot;
        const uint32_t s = ntohl(f.key.src[3]) & 0xffff;
        spilled += s >= 65 + 1 && s <= 99 + 1;
    }
    EXPECT_EQ(spilled, 35u);
    for (int i = 80; i < 100; ++i) {
        EXPECT_EQ(send(a, i), XDP_PASS) << i;
        EXPECT_EQ(send(a, i), XDP_DROP) << i << ": moved by user space with its tokens";
    }
    EXPECT_EQ(a.global_counters().table_full, 1u);
    EXPECT_TRUE(a.open_spill(1024));
}

// New flows that fill a grown table before the flows of before move in (faster than the growth
// sized it for): the flows of before that then find no room wait for a growth that does not
// start while they wait. spill_flows_of_before puts them in a table of the growth's own, whole:
// the table of before goes, each of them meters on in its own bucket, and the next growth moves
// them into its table.
TEST_F(DatapathPinning, FlowsOfBeforeWithNoRoomGoIntoTheGrowthsTableWhole) {
    Policy ps = policy(4, "per-src", Algo::srtcm, 8000, 3000, 0); // 1000 B/s, 3000 B
    ps.per = TCM_PER_SRC;
    auto src = [](int i) { return fmt::format("198.18.{}.{}", i / 200, i % 200 + 1); };
    auto send = [&](Datapath &d, int i) { return d.run_xdp(from(src(i).c_str())).retval; };
    Datapath a(o);
    ASSERT_TRUE(a.apply({ps}).has_value());
    a.grow(200); // 256 slots (the least)
    ASSERT_TRUE(a.apply({ps}).has_value());
    a.release_previous_programs({});
    a.retire_previous();
    a.move_flows_of_before();
    ASSERT_FALSE(a.moving_flows_of_before());
    a.set_clock(5000000000);
    for (int i = 0; i < 200; ++i)
        ASSERT_EQ(send(a, i), XDP_PASS) << i; // 2000 left each
    a.grow(201);                              // 256 slots, as before: room for 230 flows moved in
    ASSERT_TRUE(a.apply({ps}).has_value());
    a.release_previous_programs({});
    a.retire_previous();
    for (int i = 1000; i < 1201; ++i)
        ASSERT_EQ(send(a, i), XDP_PASS) << i; // 201 new flows: the table at its capacity
    const uint64_t full = a.global_counters().table_full;
    auto r = a.move_flows_of_before();
    EXPECT_GT(r.left, 100u) << r.moved << " moved";
    EXPECT_TRUE(a.moving_flows_of_before());
    EXPECT_EQ(a.spill_flows_of_before(64), r.left);
    EXPECT_EQ(a.spilled_flows(), r.left);
    r = a.move_flows_of_before();
    EXPECT_EQ(r.left, 0u);
    EXPECT_FALSE(a.moving_flows_of_before()) << "the table of before dropped";
    for (int i = 0; i < 200; ++i) {
        EXPECT_EQ(send(a, i), XDP_PASS) << i;
        EXPECT_EQ(send(a, i), XDP_PASS) << i;
        EXPECT_EQ(send(a, i), XDP_DROP) << i << ": its own tokens, not a fresh bucket";
    }
    EXPECT_EQ(a.global_counters().table_full, full) << "none in the policy's bucket";
    a.grow(1024);
    ASSERT_TRUE(a.apply({ps}).has_value());
    a.release_previous_programs({});
    a.retire_previous();
    a.move_flows_of_before();
    EXPECT_FALSE(a.moving_flows_of_before());
    size_t ours = 0;
    for (const auto &f : a.flows()) {
        EXPECT_TRUE(Flow::in_table(f.slot)) << f.slot;
        if ((ntohl(f.key.src[3]) & 0xffff) <= 200) {
            ++ours;
            EXPECT_EQ(f.state.counters.packets[TCM_GREEN], 3u);
            EXPECT_EQ(f.state.counters.packets[TCM_RED], 1u);
        }
    }
    EXPECT_EQ(ours, 200u);
}

TEST_F(DatapathPinning, ARunningDataPathGrowsItsTableAndEveryFlowMovesWhole) {
    const std::string dir = fmt::format("{}/abi{}", pin, TCM_ABI_VERSION);
    Policy ps = policy(4, "per-src", Algo::srtcm, 8000, 3000, 0);
    ps.per = TCM_PER_SRC;
    Datapath a(o);
    ASSERT_TRUE(a.apply({ps}).has_value());
    a.set_clock(5000000000);
    for (const char *src : {"198.18.0.1", "198.18.0.2", "198.18.0.3"})
        EXPECT_EQ(a.run_xdp(from(src)).retval, XDP_PASS); // 2000 left each
    EXPECT_EQ(a.flow_capacity(), 64u);
    EXPECT_EQ(a.live_flows(), 3u);
    try {
        a.grow(1u << 31);
        ADD_FAILURE() << "a table of 2^31 flows must be refused";
    } catch (const std::runtime_error &e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("more than"));
    }
    EXPECT_TRUE(std::filesystem::exists(dir + "/tcm_flow_slots"));
    EXPECT_FALSE(std::filesystem::exists(dir + "/tcm_flow_slots_prev"));
    EXPECT_FALSE(a.moving_flows_of_before());
    EXPECT_EQ(a.flows().size(), 3u);

    a.grow(256);
    EXPECT_EQ(a.flow_capacity(), 256u);
    EXPECT_EQ(a.live_flows(), 0u);
    EXPECT_TRUE(a.moving_flows_of_before());
    EXPECT_EQ(a.flows().size(), 3u);
    ASSERT_EQ(a.policies().size(), 1u) << "the active set, adopted";
    ASSERT_TRUE(a.apply({ps}).has_value());
    EXPECT_EQ(a.run_xdp(from("198.18.0.1")).retval, XDP_PASS);
    EXPECT_EQ(a.run_xdp(from("198.18.0.1")).retval, XDP_PASS);
    EXPECT_EQ(a.run_xdp(from("198.18.0.1")).retval, XDP_DROP);
    EXPECT_EQ(a.live_flows(), 1u);
    a.release_previous_programs({});
    a.retire_previous();
    auto moved = a.move_flows_of_before();
    EXPECT_EQ(moved.moved, 2u);
    EXPECT_TRUE(moved.dropped);
    EXPECT_FALSE(std::filesystem::exists(dir + "/tcm_flow_slots_prev"));
    EXPECT_EQ(a.live_flows(), 3u);
    for (const char *src : {"198.18.0.2", "198.18.0.3"}) {
        EXPECT_EQ(a.run_xdp(from(src)).retval, XDP_PASS);
        EXPECT_EQ(a.run_xdp(from(src)).retval, XDP_PASS);
        EXPECT_EQ(a.run_xdp(from(src)).retval, XDP_DROP) << src << " kept its 2000 tokens";
    }
    // Grown again at once: nothing of before is left in the way.
    a.grow(1024);
    a.release_previous_programs({});
    a.retire_previous();
    EXPECT_EQ(a.move_flows_of_before().moved, 3u);
    EXPECT_FALSE(a.moving_flows_of_before());
    for (const auto &f : a.flows())
        EXPECT_EQ(f.state.counters.packets[TCM_GREEN] + f.state.counters.packets[TCM_RED], 4u);
}

// A pin directory of a daemon whose flow table was keyed by the whole tcm_flow_key (44 bytes):
// that table is set aside (tcm_flows_old) and each flow moves into the new table at its next
// packet, under its lock, with its tokens and counters: a flow that had 2000 of 3000 tokens
// passes two more 1000-byte packets, not three. Until then the old flows are listed and
// reclaimed from there, and the old pin goes once it is empty.
TEST_F(DatapathPinning, FlowsKeyedByTheWholeKeyMoveAtTheirNextPacket) {
    const std::string dir = fmt::format("{}/abi{}", pin, TCM_ABI_VERSION);
    std::vector<Flow> before = three_flows();
    ASSERT_EQ(before.size(), 3u);
    // The daemon of before: its table keyed by the whole key (what flows() lists), and no
    // tcm_flow_seed or tcm_flow_tuples.
    for (const char *gone : {"tcm_flow_slots", "tcm_flow_meta", "tcm_flow_seed", "tcm_flow_tuples"})
        ASSERT_EQ(unlink((dir + "/" + gone).c_str()), 0) << gone;
    pin_table_of_before(
        dir, sizeof(tcm_flow_key), [](const Flow &f) { return &f.key; }, before);
    ASSERT_FALSE(HasFatalFailure());

    Datapath b(o);
    EXPECT_TRUE(b.adopted());
    EXPECT_TRUE(std::filesystem::exists(dir + "/tcm_flows_old"));
    b.set_clock(5000000000);
    auto flows = b.flows();
    ASSERT_EQ(flows.size(), 3u);
    for (const auto &f : flows) {
        EXPECT_EQ(f.id.head, 0u) << "not moved yet: listed from the table of before";
        EXPECT_EQ(f.state.counters.packets[TCM_GREEN], 1u);
    }
    // Source 1 moves at its next packet: 2000 tokens, two packets.
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_PASS);
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_PASS);
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_DROP);
    flows = b.flows();
    ASSERT_EQ(flows.size(), 3u);
    size_t moved = 0;
    for (const auto &f : flows) {
        if (f.id.head == 0)
            continue;
        ++moved;
        EXPECT_EQ(TCM_FLOW_KIND(f.id.head), TCM_FLOW_SRC);
        EXPECT_EQ(f.key.src[3], inet_addr("198.18.0.1"));
        EXPECT_EQ(f.state.counters.packets[TCM_GREEN], 3u) << "one counted before, two after";
        EXPECT_EQ(f.state.counters.packets[TCM_RED], 1u);
        EXPECT_EQ(f.state.lock, 0u);
    }
    EXPECT_EQ(moved, 1u);
    // A second later every bucket is full: reclaimed from both tables, and the old pin goes.
    b.set_clock(6000000000);
    EXPECT_EQ(b.reclaim_idle_flows(), 3u);
    EXPECT_TRUE(b.flows().empty());
    EXPECT_FALSE(std::filesystem::exists(dir + "/tcm_flows_old"));
    EXPECT_EQ(b.run_xdp(from("198.18.0.2")).retval, XDP_PASS);
    EXPECT_EQ(b.flows().size(), 1u);
}

// A pin directory of a daemon whose flows were in a hash map keyed by tcm_flow_id (tcm_flows,
// before tcm_flow_slots): that table is set aside (tcm_flows_prev) and each flow moves into the
// slots at its next packet, under its lock, with its tokens and counters, as above; an IPv6
// 5-tuple keeps its tuple (tcm_flow_tuples is kept). Until then the flows are listed from there
// with their ids, and the pin goes once the table is empty.
TEST_F(DatapathPinning, FlowsOfTheHashTableMoveAtTheirNextPacket) {
    const std::string dir = fmt::format("{}/abi{}", pin, TCM_ABI_VERSION);
    std::vector<Flow> before = three_flows();
    ASSERT_EQ(before.size(), 3u);
    for (const char *gone : {"tcm_flow_slots", "tcm_flow_meta"})
        ASSERT_EQ(unlink((dir + "/" + gone).c_str()), 0) << gone;
    pin_table_of_before(
        dir, sizeof(tcm_flow_id), [](const Flow &f) { return &f.id; }, before);
    ASSERT_FALSE(HasFatalFailure());

    Datapath b(o);
    EXPECT_TRUE(b.adopted());
    EXPECT_TRUE(std::filesystem::exists(dir + "/tcm_flows_prev"));
    EXPECT_FALSE(std::filesystem::exists(dir + "/tcm_flows"));
    b.set_clock(5000000000);
    auto flows = b.flows();
    ASSERT_EQ(flows.size(), 3u);
    for (const auto &f : flows) {
        EXPECT_EQ(f.slot, Flow::kInPrev) << "not moved yet: listed from the table of before";
        EXPECT_EQ(TCM_FLOW_KIND(f.id.head), TCM_FLOW_SRC);
        EXPECT_EQ(f.state.counters.packets[TCM_GREEN], 1u);
    }
    // Source 1 moves at its next packet: 2000 tokens, two packets.
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_PASS);
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_PASS);
    EXPECT_EQ(b.run_xdp(from("198.18.0.1")).retval, XDP_DROP);
    flows = b.flows();
    ASSERT_EQ(flows.size(), 3u);
    size_t moved = 0;
    for (const auto &f : flows) {
        if (f.slot == Flow::kInPrev)
            continue;
        ++moved;
        EXPECT_EQ(f.key.src[3], inet_addr("198.18.0.1"));
        EXPECT_EQ(f.state.counters.packets[TCM_GREEN], 3u) << "one counted before, two after";
        EXPECT_EQ(f.state.counters.packets[TCM_RED], 1u);
        EXPECT_EQ(f.state.lock, 0u);
    }
    EXPECT_EQ(moved, 1u);
    // A second later every bucket is full: reclaimed from both tables, and the old pin goes.
    b.set_clock(6000000000);
    EXPECT_EQ(b.reclaim_idle_flows(), 3u);
    EXPECT_TRUE(b.flows().empty());
    EXPECT_FALSE(std::filesystem::exists(dir + "/tcm_flows_prev"));
    EXPECT_EQ(b.run_xdp(from("198.18.0.2")).retval, XDP_PASS);
    EXPECT_EQ(b.flows().size(), 1u);
}

// A pin directory of a daemon whose tcm_fleet held the token grants of before (another value
// size; libbpf would refuse to reuse it): that map alone is replaced at adoption, its leases are
// renewed at the next exchange; the policies and counters are adopted as ever.
TEST_F(DatapathPinning, AFleetMapOfAnotherLayoutIsReplacedAndTheRestAdopted) {
    const std::string fleet = fmt::format("{}/abi{}/tcm_fleet", pin, TCM_ABI_VERSION);
    auto value_size = [&] {
        auto info = pinned_map_info(fleet);
        return std::pair{info ? info->value_size : 0, info.value_or(bpf_map_info{})};
    };
    auto [size, info] = value_size();
    ASSERT_EQ(size, sizeof(tcm_fleet_lease));
    // The older daemon's map: the same array, entries of another size.
    ASSERT_EQ(unlink(fleet.c_str()), 0);
    LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = info.map_flags);
    int old =
        bpf_map_create(BPF_MAP_TYPE_ARRAY, "tcm_fleet", info.key_size, 64, info.max_entries, &opts);
    ASSERT_GE(old, 0) << errno_text(errno);
    ASSERT_EQ(bpf_obj_pin(old, fleet.c_str()), 0) << errno_text(errno);
    close(old);
    ASSERT_EQ(value_size().first, 64u);
    {
        Datapath b(o);
        EXPECT_TRUE(b.adopted());
        ASSERT_EQ(b.policies().size(), 1u);
        EXPECT_EQ(b.policy_counters()[3].packets[TCM_GREEN], 1u);
        EXPECT_EQ(value_size().first, sizeof(tcm_fleet_lease));
    }
}

namespace {
// Policy @id's packets of every colour (0 if it has no counters).
uint64_t packets_of(const Datapath &d, uint32_t id) {
    auto c = d.policy_counters();
    auto it = c.find(id);
    return it == c.end() ? uint64_t{0}
                         : it->second.packets[TCM_GREEN] + it->second.packets[TCM_YELLOW] +
                               it->second.packets[TCM_RED];
}

// The policy tables' cases: "parent" (id 1, only a parent), "child" (id 3, under it, from
// 198.18.0.0/24), and 40 more, q4 to q43, one rule each (to 198.19.<i>.0/24): ids to 43 and 42
// rules, beyond 4 slots and half of 64.
std::vector<Policy> parent_child_and_forty() {
    Policy parent = test::policy(1, "parent", Algo::srtcm, 8000, 100000, 0);
    parent.only_parent = true;
    Policy child = test::policy(3, "child", Algo::srtcm, 8000, 100000, 0);
    child.parent = "parent";
    child.match.src = prefix("198.18.0.0/24");
    std::vector<Policy> all = {parent, child};
    for (uint32_t i = 4; i < 44; ++i) {
        Policy q = test::policy(i, fmt::format("q{}", i));
        q.match.dst = prefix(fmt::format("198.19.{}.0/24", i).c_str());
        all.push_back(q);
    }
    return all;
}
} // namespace

// The policy tables grow while the data path runs (resize_tables): the configs and rules of both
// sets carried into bigger tables, a child's parent found at its new place, the buckets and
// counters (in tables of their own) untouched; a set that did not fit fits after, and a later
// data path on the pins adopts the sizes they have.
TEST_F(DatapathPinning, ThePolicyTablesGrowAndTheSetClassifiesOnWithItsCounters) {
    Datapath::remove_pins(pin);
    DatapathOptions small = o;
    small.tables = {4, 64};
    const std::vector<Policy> more = parent_child_and_forty();
    const Policy &parent = more[0], &child = more[1];
    const auto to_child =
        Packet().ipv4("198.18.0.1", "198.19.200.1").udp(1, 2).l3_size(100).build();
    const auto to_q7 = Packet().ipv4("198.18.9.1", "198.19.7.1").udp(1, 2).l3_size(100).build();
    {
        Datapath a(small);
        EXPECT_EQ(a.table_sizes(), (TableSizes{4, 64}));
        ASSERT_TRUE(a.apply({parent, child}).has_value());
        a.set_clock(5000000000);
        EXPECT_EQ(a.run_xdp(to_child).retval, XDP_PASS);
        EXPECT_THAT(a.apply(more).error(), ::testing::HasSubstr("grown first"));
        const TableSizes need = Datapath::tables_needed(more, a.table_sizes());
        EXPECT_EQ(need, (TableSizes{64, 256}));
        // One change at a time, from what the set holds: an id beyond the slots grows them, a
        // removal does not.
        SetChange add, del;
        add.upserts = {more[40]};
        del.removes = {3};
        EXPECT_EQ(a.tables_needed(add), (TableSizes{64, 64}));
        EXPECT_EQ(a.tables_needed(del), (TableSizes{4, 64}));
        a.resize_tables(need);
        a.retire_previous();
        EXPECT_EQ(a.table_sizes(), need);
        EXPECT_EQ(a.run_xdp(to_child).retval, XDP_PASS); // the set as it was
        EXPECT_EQ(packets_of(a, 3), 2u);
        EXPECT_EQ(packets_of(a, 1), 2u) << "the parent, at its new place";
        ASSERT_TRUE(a.apply(more).has_value());
        EXPECT_EQ(a.run_xdp(to_child).retval, XDP_PASS);
        EXPECT_EQ(a.run_xdp(to_q7).retval, XDP_PASS);
        EXPECT_EQ(packets_of(a, 3), 3u);
        EXPECT_EQ(packets_of(a, 1), 3u);
        EXPECT_EQ(packets_of(a, 7), 1u);
        EXPECT_EQ(a.global_counters().unclassified_packets, 0u);
    }
    Datapath b(o); // asks for the largest: the pins' sizes hold
    EXPECT_TRUE(b.adopted());
    EXPECT_EQ(b.table_sizes(), (TableSizes{64, 256}));
    b.set_clock(6000000000);
    EXPECT_EQ(b.run_xdp(to_q7).retval, XDP_PASS);
    EXPECT_EQ(packets_of(b, 7), 2u);
}

// Policies gone, the tables shrink (resize_tables to tables_for_shrink: room for twice the set's
// highest id and rules, from the sizes first asked for): the active set carried whole, its
// counters read on and carried, the other set written whole by the next change; smaller tables
// that would not hold the set are refused, changing nothing; the warm-up and quota states go
// once no policy has either.
TEST_F(DatapathPinning, PoliciesGoneShrinkTheTablesAndTheSetClassifiesOnWithItsCounters) {
    Datapath::remove_pins(pin);
    DatapathOptions small = o;
    small.tables = {4, 64, false};
    const std::string states = fmt::format("{}/abi{}/tcm_meter_ext", pin, TCM_ABI_VERSION);
    std::vector<Policy> more = parent_child_and_forty();
    more.back().meter.quota_bytes = 1u << 30; // q43: the warm-up and quota states made
    more.back().meter.quota_period_ns = 3600ull * 1000000000;
    const Policy &parent = more[0], &child = more[1];
    const auto to_child =
        Packet().ipv4("198.18.0.1", "198.19.200.1").udp(1, 2).l3_size(100).build();
    const auto to_q7 = Packet().ipv4("198.18.9.1", "198.19.7.1").udp(1, 2).l3_size(100).build();
    const auto to_q5 = Packet().ipv4("198.18.9.1", "198.19.5.1").udp(1, 2).l3_size(100).build();
    {
        Datapath a(small);
        a.resize_tables(Datapath::tables_needed(more, a.table_sizes()));
        a.retire_previous();
        a.fold_counters_of_before();
        ASSERT_EQ(a.table_sizes(), (TableSizes{64, 256, true}));
        ASSERT_TRUE(a.apply(more).has_value());
        EXPECT_EQ(a.tables_for_shrink(), a.table_sizes()) << "the set needs them";
        a.set_clock(5000000000);
        EXPECT_EQ(a.run_xdp(to_child).retval, XDP_PASS);
        EXPECT_EQ(a.run_xdp(to_q7).retval, XDP_PASS);
        ASSERT_TRUE(a.apply({parent, child}).has_value());
        const TableSizes want = a.tables_for_shrink();
        EXPECT_EQ(want, (TableSizes{16, 64, false})) << "ids to 3 and one rule, twice over";
        EXPECT_THAT(
            [&] {
                a.resize_tables({2, 64, false});
            },
            ::testing::ThrowsMessage<std::runtime_error>(
                ::testing::HasSubstr("policy id 3 is held")));
        EXPECT_EQ(a.table_sizes(), (TableSizes{64, 256, true})) << "refused: nothing changed";
        a.resize_tables(want);
        a.retire_previous();
        EXPECT_EQ(a.table_sizes(), want);
        EXPECT_FALSE(std::filesystem::exists(states)) << "no policy has a warm-up or quota";
        EXPECT_EQ(packets_of(a, 3), 1u) << "the counters of before read";
        EXPECT_EQ(a.run_xdp(to_child).retval, XDP_PASS); // the active set, carried
        EXPECT_EQ(packets_of(a, 3), 2u);
        EXPECT_EQ(packets_of(a, 1), 2u) << "the parent, at its place in the smaller table";
        EXPECT_EQ(a.fold_counters_of_before(), 2u);
        EXPECT_EQ(packets_of(a, 3), 2u) << "carried: neither lost nor twice";
        const uint64_t unclassified = a.global_counters().unclassified_packets;
        EXPECT_EQ(a.run_xdp(to_q7).retval, XDP_PASS);
        EXPECT_EQ(a.global_counters().unclassified_packets, unclassified + 1) << "q7 is gone";
        // A change after the shrink: the other set, not carried, written whole.
        ASSERT_TRUE(a.apply({parent, child, more[3]}).has_value()); // q5
        EXPECT_EQ(a.run_xdp(to_q5).retval, XDP_PASS);
        EXPECT_EQ(packets_of(a, 5), 1u);
        EXPECT_EQ(a.run_xdp(to_child).retval, XDP_PASS);
        EXPECT_EQ(packets_of(a, 3), 3u);
        EXPECT_EQ(a.global_counters().unclassified_packets, unclassified + 1);
        // The set back to its size: refused until grown again, as before.
        EXPECT_THAT(a.apply(more).error(), ::testing::HasSubstr("grown first"));
    }
    Datapath b(small); // the pins' sizes hold
    EXPECT_TRUE(b.adopted());
    EXPECT_EQ(b.table_sizes(), (TableSizes{16, 64, false}));
    b.set_clock(6000000000);
    EXPECT_EQ(b.run_xdp(to_child).retval, XDP_PASS);
    EXPECT_EQ(packets_of(b, 3), 4u);
}

// The per-CPU counter arrays are sized by the policy slots. A growth makes new ones: the arrays of
// before (pinned _prev) are read with them until folded into the carried counts (pinned
// _carried), once; a second growth before that fold is refused, changing nothing; a reused id
// starts at zero.
TEST_F(DatapathPinning, TheCountersOfBeforeAGrowthAreReadUntilCarriedAndCarriedOnce) {
    Datapath::remove_pins(pin);
    DatapathOptions small = o;
    small.tables = {4, 64};
    const std::string dir = fmt::format("{}/abi{}", pin, TCM_ABI_VERSION);
    const std::string stats = dir + "/tcm_policy_stats", prev = stats + "_prev",
                      carried = stats + "_carried";
    int kept = -1;
    {
        Datapath a(small);
        ASSERT_EQ(pinned_map_info(stats)->max_entries, 4u) << "sized by the policy slots";
        ASSERT_EQ(pinned_map_info(dir + "/tcm_tcp_stats")->max_entries, 4u);
        EXPECT_FALSE(a.holds_counters_of_before());
        ASSERT_TRUE(a.apply({p}).has_value());
        a.set_clock(5000000000);
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_PASS);
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_PASS);
        a.resize_tables({16, 64});
        EXPECT_EQ(pinned_map_info(stats)->max_entries, 16u);
        EXPECT_EQ(pinned_map_info(dir + "/tcm_tcp_stats")->max_entries, 16u);
        ASSERT_TRUE(pinned_map_info(prev));
        EXPECT_EQ(pinned_map_info(prev)->max_entries, 4u);
        EXPECT_TRUE(a.holds_counters_of_before());
        EXPECT_EQ(packets_of(a, 3), 2u) << "the array of before read";
        a.retire_previous();
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_PASS); // 0 left
        EXPECT_EQ(packets_of(a, 3), 3u);
        EXPECT_THAT(
            [&] {
                a.resize_tables({64, 64});
            },
            ::testing::ThrowsMessage<std::runtime_error>(
                ::testing::HasSubstr("are not carried over yet")));
        EXPECT_EQ(a.table_sizes(), (TableSizes{16, 64})) << "the refused growth changed nothing";
        EXPECT_EQ(pinned_map_info(stats)->max_entries, 16u);
        EXPECT_EQ(packets_of(a, 3), 3u);
        EXPECT_EQ(a.fold_counters_of_before(), 1u);
        EXPECT_FALSE(a.holds_counters_of_before());
        EXPECT_FALSE(std::filesystem::exists(prev));
        EXPECT_TRUE(std::filesystem::exists(carried));
        EXPECT_EQ(packets_of(a, 3), 3u) << "carried: neither lost nor twice";
        EXPECT_EQ(a.policy_counter(3).packets[TCM_GREEN], 3u);
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_DROP);
        EXPECT_EQ(packets_of(a, 3), 4u);
        a.resize_tables({64, 64}); // folded: it may grow again
        a.retire_previous();
        EXPECT_EQ(packets_of(a, 3), 4u);
        kept = bpf_obj_get(prev.c_str());
        ASSERT_GE(kept, 0);
        EXPECT_EQ(a.fold_counters_of_before(), 1u);
        EXPECT_EQ(packets_of(a, 3), 4u);
    }
    // A daemon killed after the carried counts took their pin and before the array of before's
    // pin went (the last fold's array pinned back): that array is not carried twice.
    ASSERT_EQ(bpf_obj_pin(kept, prev.c_str()), 0) << errno_text(errno);
    close(kept);
    Datapath b(small);
    EXPECT_TRUE(b.adopted());
    EXPECT_FALSE(std::filesystem::exists(prev));
    EXPECT_FALSE(b.holds_counters_of_before());
    EXPECT_EQ(packets_of(b, 3), 4u);
    // Id 3 given to another policy starts at zero: nothing carried for it.
    ASSERT_TRUE(b.apply({policy(5, "other")}).has_value());
    ASSERT_TRUE(b.apply({policy(3, "again")}).has_value());
    EXPECT_EQ(packets_of(b, 3), 0u);
}

// Pins of a daemon whose counter arrays were made for TCM_MAX_POLICIES beside smaller policy
// tables (the layout before they were sized by the slots): set aside, read, and carried into
// the arrays of the tables' size once folded.
TEST_F(DatapathPinning, CounterArraysOfTheWholeIdRangeAreSetAsideAndCarried) {
    Datapath::remove_pins(pin);
    DatapathOptions small = o;
    small.tables = {4, 64};
    const std::string dir = fmt::format("{}/abi{}", pin, TCM_ABI_VERSION);
    const std::string stats = dir + "/tcm_policy_stats";
    const size_t ncpus = static_cast<size_t>(libbpf_num_possible_cpus());
    std::vector<tcm_counters> per_cpu(ncpus);
    {
        Datapath a(small);
        ASSERT_TRUE(a.apply({p}).has_value());
        a.set_clock(5000000000);
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_PASS);
        int fd = bpf_obj_get(stats.c_str());
        uint32_t id = 3;
        ASSERT_EQ(bpf_map_lookup_elem(fd, &id, per_cpu.data()), 0);
        close(fd);
    }
    ASSERT_EQ(unlink(stats.c_str()), 0);
    int old = bpf_map_create(BPF_MAP_TYPE_PERCPU_ARRAY, "tcm_policy_stat", 4, sizeof(tcm_counters),
                             TCM_MAX_POLICIES, nullptr);
    ASSERT_GE(old, 0) << errno_text(errno);
    uint32_t id = 3;
    ASSERT_EQ(bpf_map_update_elem(old, &id, per_cpu.data(), 0), 0);
    ASSERT_EQ(bpf_obj_pin(old, stats.c_str()), 0) << errno_text(errno);
    close(old);
    Datapath b(small);
    EXPECT_TRUE(b.adopted());
    EXPECT_EQ(pinned_map_info(stats)->max_entries, 4u);
    EXPECT_EQ(pinned_map_info(stats + "_prev")->max_entries, uint32_t{TCM_MAX_POLICIES});
    EXPECT_TRUE(b.holds_counters_of_before());
    EXPECT_EQ(b.policy_counters()[3].packets[TCM_GREEN], 1u);
    b.set_clock(5000000000);
    EXPECT_EQ(b.run_xdp(frame).retval, XDP_PASS);
    EXPECT_EQ(b.policy_counters()[3].packets[TCM_GREEN], 2u);
    EXPECT_EQ(b.fold_counters_of_before(), 1u);
    EXPECT_FALSE(std::filesystem::exists(stats + "_prev"));
    EXPECT_EQ(b.policy_counters()[3].packets[TCM_GREEN], 2u);
}

// The warm-up and quota states (a hash map whose bucket array alone is 64 MiB) are made with the
// first policy that has either, by a growth; until then the data path holds a map of one entry,
// not pinned. Kept at a restart while anything is in them; pins of an earlier daemon that made
// them for every host, with nothing in them, are dropped.
TEST_F(DatapathPinning, TheWarmUpAndQuotaStatesAreMadeWithTheFirstPolicyThatHasOne) {
    Datapath::remove_pins(pin);
    const std::string states = fmt::format("{}/abi{}/tcm_meter_ext", pin, TCM_ABI_VERSION);
    DatapathOptions small = o;
    small.tables = {4, 64, false};
    Policy q = policy(3, "q", Algo::srtcm, 8000, 3000, 0);
    q.meter.quota_bytes = 1500;
    q.meter.quota_period_ns = 3600ull * 1000000000;
    {
        Datapath a(small);
        EXPECT_FALSE(a.table_sizes().ext_states);
        EXPECT_FALSE(std::filesystem::exists(states));
        ASSERT_TRUE(a.apply({p}).has_value()); // no warm-up or quota: nothing to make
        EXPECT_THAT(a.apply({q}).error(), ::testing::HasSubstr("and warm-up/quota states"));
        const TableSizes need = Datapath::tables_needed({q}, a.table_sizes());
        EXPECT_EQ(need, (TableSizes{4, 64, true}));
        SetChange add;
        add.upserts = {q};
        EXPECT_EQ(a.tables_needed(add), need);
        a.resize_tables(need);
        a.retire_previous();
        ASSERT_TRUE(pinned_map_info(states));
        EXPECT_EQ(pinned_map_info(states)->max_entries, uint32_t{TCM_EXT_STATES});
        ASSERT_TRUE(a.apply({q}).has_value());
        a.set_clock(5000000000);
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_PASS);
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_PASS); // 2000 of 1500: counted whole
        EXPECT_EQ(a.run_xdp(frame).retval, XDP_DROP) << "over its quota, with tokens left";
    }
    {
        Datapath b(small); // the states hold a use: kept
        EXPECT_TRUE(b.adopted());
        EXPECT_TRUE(b.table_sizes().ext_states);
        b.set_clock(5000000000);
        EXPECT_EQ(b.run_xdp(frame).retval, XDP_DROP) << "the quota's use kept";
    }
    Datapath::remove_pins(pin);
    { Datapath c(o); } // made whole, as a daemon of before did, and left empty
    ASSERT_TRUE(std::filesystem::exists(states));
    Datapath d(small);
    EXPECT_FALSE(d.table_sizes().ext_states);
    EXPECT_FALSE(std::filesystem::exists(states));
}

// A daemon killed while it grew its policy tables: the tables of before set aside (their pins
// with _prev), the new ones pinned and not yet filled. The next start takes the ones of before
// back, so the active set classifies as it did.
TEST_F(DatapathPinning, APolicyTableGrowthCutShortIsUndoneAtTheNextStart) {
    const std::string dir = fmt::format("{}/abi{}", pin, TCM_ABI_VERSION);
    // The counter arrays set aside with them, new ones (empty) pinned too.
    const std::pair<const char *, uint32_t> tables[] = {
        {"tcm_policy_cfg", sizeof(tcm_policy)},
        {"tcm_rule_table", sizeof(tcm_rule_slot)},
        {"tcm_policy_stats", sizeof(tcm_counters)},
        {"tcm_tcp_stats", sizeof(tcm_tcp_counters)}};
    for (const auto &[name, size] : tables) {
        const std::string at = dir + "/" + name;
        const bool counters = std::string(name).ends_with("_stats");
        ASSERT_EQ(rename(at.c_str(), (at + "_prev").c_str()), 0) << errno_text(errno);
        LIBBPF_OPTS(bpf_map_create_opts, opts,
                    .map_flags =
                        std::string(name) == "tcm_rule_table" ? uint32_t{BPF_F_MMAPABLE} : 0u);
        int fd = bpf_map_create(counters ? BPF_MAP_TYPE_PERCPU_ARRAY : BPF_MAP_TYPE_ARRAY, name, 4,
                                size, 4 * TCM_RULE_PROBES, &opts);
        ASSERT_GE(fd, 0) << errno_text(errno);
        ASSERT_EQ(bpf_obj_pin(fd, at.c_str()), 0) << errno_text(errno);
        close(fd);
    }
    Datapath b(o);
    EXPECT_TRUE(b.adopted());
    for (const auto &[name, size] : tables)
        EXPECT_FALSE(std::filesystem::exists(dir + "/" + name + "_prev")) << name;
    EXPECT_FALSE(b.holds_counters_of_before());
    b.set_clock(5000000000);
    EXPECT_EQ(b.run_xdp(frame).retval, XDP_PASS);
    EXPECT_EQ(b.policy_counters()[3].packets[TCM_GREEN], 2u) << "classified as before";
}

// A pin directory of a daemon whose cgroup rules were preallocated (6 MiB whatever they held):
// its rules are carried into a map without preallocation before the new program runs, and the
// pin is the new map's.
TEST_F(DatapathPinning, APreallocatedCgroupRuleMapOfBeforeIsCarriedOver) {
    const std::string path = fmt::format("{}/abi{}/tcm_cgroup_rules", pin, TCM_ABI_VERSION);
    auto flags = [&] {
        auto info = pinned_map_info(path);
        return info ? info->map_flags : ~0u;
    };
    ASSERT_EQ(flags(), BPF_F_NO_PREALLOC);
    ASSERT_EQ(unlink(path.c_str()), 0);
    int old = bpf_map_create(BPF_MAP_TYPE_HASH, "tcm_cgroup_rule", sizeof(tcm_cgroup_rule_key),
                             sizeof(tcm_cgroup_rule), TCM_MAX_CGROUP_RULES, nullptr);
    ASSERT_GE(old, 0) << errno_text(errno);
    const tcm_cgroup_rule_key k{1, TCM_CGROUP_INGRESS, 4242};
    const tcm_cgroup_rule rule{3, 7, 4242};
    ASSERT_EQ(bpf_map_update_elem(old, &k, &rule, 0), 0) << errno_text(errno);
    ASSERT_EQ(bpf_obj_pin(old, path.c_str()), 0) << errno_text(errno);
    close(old);
    ASSERT_EQ(flags(), 0u);
    {
        Datapath b(o);
        EXPECT_TRUE(b.adopted());
        EXPECT_EQ(flags(), BPF_F_NO_PREALLOC);
        int fd = bpf_obj_get(path.c_str());
        ASSERT_GE(fd, 0);
        tcm_cgroup_rule got{};
        EXPECT_EQ(bpf_map_lookup_elem(fd, &k, &got), 0) << errno_text(errno);
        EXPECT_EQ(std::memcmp(&got, &rule, sizeof(rule)), 0);
        close(fd);
        EXPECT_EQ(b.policy_counters()[3].packets[TCM_GREEN], 1u); // the rest adopted
    }
}

// A pin directory of a daemon whose classifier was a hash map, tcm_rules (same keys and values):
// its rules go into tcm_rule_table before the new program runs, so the active set classifies
// before anything is applied, and the old pin goes.
TEST_F(DatapathPinning, AClassifierHashOfBeforeIsCarriedIntoTheTable) {
    const std::string dir = fmt::format("{}/abi{}", pin, TCM_ABI_VERSION);
    std::vector<std::pair<tcm_rule_key, tcm_rule>> rules;
    {
        int fd = bpf_obj_get((dir + "/tcm_rule_table").c_str());
        ASSERT_GE(fd, 0);
        RuleTable table(fd);
        for (uint32_t set = 0; set < TCM_NR_SETS; ++set)
            for (const auto &k : table.keys(set))
                rules.emplace_back(k, *table.find(k));
        close(fd);
    }
    ASSERT_FALSE(rules.empty());
    ASSERT_EQ(unlink((dir + "/tcm_rule_table").c_str()), 0);
    int old = bpf_map_create(BPF_MAP_TYPE_HASH, "tcm_rules", sizeof(tcm_rule_key), sizeof(tcm_rule),
                             TCM_MAX_RULES, nullptr);
    ASSERT_GE(old, 0) << errno_text(errno);
    for (const auto &[k, r] : rules)
        ASSERT_EQ(bpf_map_update_elem(old, &k, &r, 0), 0);
    ASSERT_EQ(bpf_obj_pin(old, (dir + "/tcm_rules").c_str()), 0) << errno_text(errno);
    close(old);
    {
        Datapath b(o);
        EXPECT_TRUE(b.adopted());
        EXPECT_FALSE(std::filesystem::exists(dir + "/tcm_rules"));
        b.set_clock(5000000000);
        EXPECT_EQ(b.run_xdp(frame).retval, XDP_PASS);             // 1000 left
        EXPECT_EQ(b.policy_counters()[3].packets[TCM_GREEN], 2u); // classified, not passed over
        EXPECT_EQ(b.global_counters().unclassified_packets, 0u);
    }
}

} // namespace
