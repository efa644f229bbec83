// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// --match cgroup in the data path (docs/spec.md §11) through BPF_PROG_TEST_RUN: the tc program
// finds the socket's cgroup, which for a test run is the cgroup of the process that runs it, so
// each case moves this process into cgroups made for it.
#include "datapath_fixture.hpp"
#include "hier_reference.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <random>

#include <cstdio>
#include <sys/utsname.h>

using namespace tricolor;
using namespace tricolor::test;

namespace {

class CgroupTest : public DatapathTest {
  protected:
    // Egress cgroup rules are matched by the tc program.
    void configure(DatapathOptions &o) const override { o.programs |= DatapathOptions::kTcProgram; }
    void SetUp() override {
        DatapathTest::SetUp();
        if (IsSkipped())
            return;
        if (cgroup2_mount_or_empty().empty())
            GTEST_SKIP() << "no cgroup v2 mount";
        base = fmt::format("tricolor-test-{}", getpid());
    }
    // The policy (id) that counted one tc frame sent from here (0: none).
    uint32_t tc_policy(const std::vector<uint32_t> &ids) {
        auto before = dp->policy_counters();
        dp->run_tc(v4udp().build());
        auto after = dp->policy_counters();
        uint32_t got = 0;
        for (uint32_t id : ids) {
            auto sum = [](const tcm_counters &c) {
                return c.packets[0] + c.packets[1] + c.packets[2];
            };
            if (sum(after[id]) != sum(before[id])) {
                EXPECT_EQ(got, 0u) << "counted twice";
                got = id;
            }
        }
        return got;
    }
    std::string base;
};

TEST_F(CgroupTest, TcMatchesTheSendersCgroupAndEveryCgroupBelowItInRankOrder) {
    TestCgroup a(base + "/a"), deep(base + "/a/x/y"), b(base + "/b");
    Policy cg = policy(1, "cg");
    cg.match.cgroup = base + "/a";
    cg.priority = 10;
    Policy addr = policy(2, "addr"); // matches the frame's destination, worse priority
    addr.match.dst = prefix("198.19.0.0/16");
    addr.priority = 20;
    apply({cg, addr});
    {
        InCgroup in(a);
        EXPECT_EQ(tc_policy({1, 2}), 1u) << "the cgroup's policy ranks first";
        EXPECT_EQ(dp->run_xdp(v4udp().build()).retval, XDP_PASS);
    }
    {
        InCgroup in(deep);
        EXPECT_EQ(tc_policy({1, 2}), 1u) << "a cgroup below the pattern's";
    }
    {
        InCgroup in(b);
        EXPECT_EQ(tc_policy({1, 2}), 2u) << "another cgroup: the address policy";
    }
    EXPECT_EQ(tc_policy({1, 2}), 2u) << "this process where it was";
    // XDP sees no socket: the frame sent on XDP from cgroup a went to the address policy, with
    // the two tc frames from b and from here.
    EXPECT_EQ(packets(2), 3u);

    // An address policy of better priority wins over the cgroup's, as between address rules.
    addr.priority = 5;
    apply({cg, addr});
    InCgroup in(a);
    EXPECT_EQ(tc_policy({1, 2}), 2u);
}

TEST_F(CgroupTest, ACgroupMadeAfterThePolicyIsMatchedOnceFollowed) {
    Policy cg = policy(1, "cg");
    cg.match.cgroup = base + "/svc-*";
    apply({cg});
    EXPECT_EQ(dp->follow_cgroups().value(), false) << "nothing changed";
    TestCgroup late(base + "/svc-late");
    {
        InCgroup in(late);
        EXPECT_EQ(tc_policy({1}), 0u) << "not scanned yet";
    }
    uint32_t version = dp->active_set();
    EXPECT_EQ(dp->follow_cgroups().value(), true);
    EXPECT_EQ(dp->active_set(), version + 1) << "a switch of sets, as any change";
    EXPECT_EQ(dp->cgroup_buckets(1).size(), 1u);
    InCgroup in(late);
    EXPECT_EQ(tc_policy({1}), 1u);
}

// Per cgroup: a bucket for each cgroup the glob names (its descendants share it), each exact:
// at one instant, each admits its CBS of green and no more.
TEST_F(CgroupTest, PerCgroupKeepsOneExactBucketPerCgroupTheGlobNames) {
    TestCgroup c1(base + "/pod-1"), c1sub(base + "/pod-1/ctr"), c2(base + "/pod-2");
    const uint64_t cbs = 1280; // ten of v4udp's 128-byte packets
    Policy pc = policy(1, "pods", Algo::srtcm, 8000000, cbs, 0);
    pc.match.cgroup = base + "/pod-*";
    pc.per = TCM_PER_CGROUP;
    apply({pc});
    auto send = [&](const TestCgroup &where, int n) {
        InCgroup in(where);
        for (int i = 0; i < n; ++i)
            dp->run_tc(v4udp().build());
    };
    send(c1, 8);
    send(c1sub, 8); // pod-1's bucket: 16 packets, 10 green
    send(c2, 12);   // pod-2's: 12, 10 green
    auto c = dp->policy_counters()[1];
    EXPECT_EQ(c.packets[TCM_GREEN], 20u);
    EXPECT_EQ(c.packets[TCM_RED], 8u);
    auto flows = dp->flows();
    ASSERT_EQ(flows.size(), 2u);
    std::map<uint64_t, uint64_t> green;
    for (const auto &f : flows)
        green[uint64_t{f.key.src[1]} << 32 | f.key.src[0]] = f.state.counters.packets[TCM_GREEN];
    EXPECT_EQ(green[c1.id], 10u);
    EXPECT_EQ(green[c2.id], 10u);
    EXPECT_EQ(dp->cgroup_path(c1.id), c1.path);
}

// A hierarchy along the tree (docs/spec.md §9): an aggregate parent over the three children a
// glob names, each child a bucket of its own. Every packet's colour is the exact reference's.
TEST_F(CgroupTest, ACgroupParentOverItsChildrenIsExactAgainstTheReference) {
    std::vector<std::unique_ptr<TestCgroup>> kids;
    for (int i = 0; i < 3; ++i)
        kids.push_back(std::make_unique<TestCgroup>(fmt::format("{}/svc-{}", base, i)));
    Policy parent = policy(1, "slice", Algo::trtcm, 4000000, 3000, 6000);
    parent.meter.pir = 8000000;
    parent.only_parent = true;
    Policy child = policy(2, "svc", Algo::srtcm, 3000000, 2000, 1500);
    child.match.cgroup = base + "/svc-*";
    child.per = TCM_PER_CGROUP;
    child.parent = "slice";
    apply({parent, child});

    test::RefLevel c{Algo::srtcm, 3000000, 2000, 0, 1500};
    test::RefLevel p{Algo::trtcm, 4000000, 3000, 8000000, 6000};
    p.aware = true;
    test::RefChain ref({c, p});
    std::mt19937_64 rng(29);
    uint64_t now = 1000000000;
    int colours[3] = {};
    for (int k = 0; k < 600; ++k) {
        now += rng() % 400000; // up to 0.4 ms: about twice what the parent admits
        size_t who = rng() % kids.size();
        uint32_t payload = 20 + static_cast<uint32_t>(rng() % 1000);
        dp->set_clock(now);
        {
            InCgroup in(*kids[who]);
            dp->run_tc(
                Packet().ipv4("198.18.0.1", "198.19.0.2").udp(1, 2).payload(payload).build());
        }
        auto got = dp->last_verdict();
        ASSERT_EQ(got.policy_id, 2u) << "packet " << k;
        Color want = ref.mark_with(now, payload + 28, Color::green, [&](const test::RefLevel &l) {
            return &l == &ref.levels()[0] ? std::to_string(kids[who]->id) : std::string("all");
        });
        ASSERT_EQ(got.color, want) << "packet " << k;
        colours[static_cast<int>(got.color)]++;
    }
    EXPECT_GT(colours[0], 0);
    EXPECT_GT(colours[1], 0);
    EXPECT_GT(colours[2], 0);
    EXPECT_EQ(ref.check_bounds(), "");
}

// Ingress (bpf/cgroup_in.bpf.c): what the cgroup's sockets receive, metered in its own policy;
// red dropped (the program returns 0), the rest passed. The egress policy of the same cgroup
// meters only what tc sees.
TEST_F(CgroupTest, IngressMetersWhatTheCgroupsSocketsReceive) {
    TestCgroup srv(base + "/srv"), other(base + "/other");
    Policy in = policy(1, "in", Algo::srtcm, 8000000, 1280, 0); // ten 128-byte packets
    in.match.cgroup = base + "/srv";
    in.direction = TCM_CGROUP_INGRESS;
    Policy out = policy(2, "out");
    out.match.cgroup = base + "/srv";
    apply({in, out});
    {
        InCgroup c(srv);
        int passed = 0;
        for (int i = 0; i < 15; ++i)
            passed += static_cast<int>(dp->run_cgroup_in(v4udp().build()).retval);
        EXPECT_EQ(passed, 10) << "the bucket's ten, then red dropped";
        auto got = dp->policy_counters();
        EXPECT_EQ(got[1].packets[TCM_GREEN], 10u);
        EXPECT_EQ(got[1].packets[TCM_RED], 5u);
        EXPECT_EQ(got[1].bytes[TCM_GREEN], 1280u) << "the IP packet, as on every hook";
        EXPECT_EQ(packets(2), 0u);
        dp->run_tc(v4udp().build());
        EXPECT_EQ(packets(2), 1u) << "egress is the other policy's";
        EXPECT_EQ(packets(1), 15u);
    }
    InCgroup c(other);
    EXPECT_EQ(dp->run_cgroup_in(v4udp().build()).retval, 1u);
    EXPECT_EQ(packets(1), 15u) << "another cgroup's sockets: not metered";
}

// A cgroup's rules go with its policy: another policy on the same id, for another cgroup, is not
// reached from the first cgroup (a rule left behind would point at it).
TEST_F(CgroupTest, ARemovedPolicysRulesGoWithIt) {
    TestCgroup a(base + "/a"), b(base + "/b");
    Policy pa = policy(1, "pa");
    pa.match.cgroup = base + "/a";
    apply({pa});
    {
        InCgroup in(a);
        EXPECT_EQ(tc_policy({1}), 1u);
    }
    Policy pb = policy(1, "pb");
    pb.match.cgroup = base + "/b";
    apply({pb});
    {
        InCgroup in(a);
        EXPECT_EQ(tc_policy({1}), 0u) << "a's rule went with pa";
    }
    InCgroup in(b);
    EXPECT_EQ(tc_policy({1}), 1u);
}

// Ingress under a parent per source address: the parent keys on the received packet's address,
// as it would for a child matched by address.
TEST_F(CgroupTest, AnIngressChildUnderAPerSourceParentFillsOneParentBucketPerSource) {
    TestCgroup srv(base + "/srv");
    Policy parent = policy(1, "by-src");
    parent.per = TCM_PER_SRC;
    parent.only_parent = true;
    Policy child = policy(2, "srv");
    child.match.cgroup = base + "/srv";
    child.direction = TCM_CGROUP_INGRESS;
    child.parent = "by-src";
    apply({parent, child});
    InCgroup in(srv);
    for (const char *src : {"198.18.0.1", "198.18.0.2", "198.18.0.3"})
        EXPECT_EQ(dp->run_cgroup_in(Packet().ipv4(src, "198.19.0.2").udp(1, 2).payload(10).build())
                      .retval,
                  1u);
    size_t parent_flows = 0;
    bool keyless = true;
    for (const auto &f : dp->flows())
        if (f.key.policy_id == 1) {
            ++parent_flows;
            keyless = keyless && f.key.src[3] == 0;
        }
    // On Debian's 6.1 and 6.12, BPF_PROG_TEST_RUN gives a cgroup_skb program no packet data
    // (data_end is not set; the kernel's selftest cgroup_skb_prog_run_direct_packet_access came
    // with the fix), so the parser sees nothing there; the real hook has the data on every
    // kernel (e2e Cgroups). Checked where the test run has it: this machine's 6.18.
    struct utsname u {};
    unsigned major = 0, minor = 0;
    if (uname(&u) == 0)
        std::sscanf(u.release, "%u.%u", &major, &minor);
    if (keyless && parent_flows == 1 && (major < 6 || (major == 6 && minor < 18)))
        GTEST_SKIP() << "this kernel's test run gives a cgroup_skb program no packet data";
    EXPECT_EQ(parent_flows, 3u);
    EXPECT_EQ(packets(2), 3u);
}

} // namespace
