// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Hierarchies (docs/spec.md §9) in user space: the graph checks, --coupling and --start empty in
// the meter core against hand-computed cases, the `replay -f` trace format, the model engine on the
// conformance vectors, and the model against an exact reference on random chains and traces.
#include "hier_reference.hpp"
#include "test_util.hpp"
#include "tricolor/hier_replay.hpp"
#include "tricolor/hierarchy.hpp"
#include "tricolor/policy_fields.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

using namespace tricolor;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

constexpr uint64_t kByte = TCM_TOKENS_PER_BYTE;

Policy named(const std::string &name, const std::string &parent = "", bool only_parent = false) {
    static uint32_t next_id = 0;
    Policy p = test::policy(next_id++ % TCM_MAX_POLICIES, name, Algo::srtcm, 8000, 1500, 0);
    p.parent = parent;
    p.only_parent = only_parent;
    return p;
}

// ---- the graph ---------------------------------------------------------------------------

struct GraphCase {
    std::string what;
    std::vector<Policy> set;
    std::vector<std::string> expected; // substrings of the one error expected; empty: clean
};

TEST(Hierarchy, GraphErrorsAreRefusedNamingThePolicies) {
    std::vector<GraphCase> cases = {
        {"a clean 4-level chain",
         {named("a"), named("b", "a"), named("c", "b"), named("d", "c")},
         {}},
        {"a missing parent (or one deleted or renamed under its child)",
         {named("user", "link")},
         {"policy 'user'", "parent 'link' does not exist"}},
        {"its own parent", {named("loop", "loop")}, {"policy 'loop'", "its own parent"}},
        {"a cycle of two",
         {named("x", "y"), named("y", "x")},
         {"'x' -> 'y' -> 'x'", "cycle of parents"}},
        {"a cycle of three below a clean root",
         {named("root"), named("p", "r"), named("q", "p"), named("r", "q")},
         {"'p' -> 'r' -> 'q' -> 'p'", "cycle"}},
        {"five levels",
         {named("l1"), named("l2", "l1"), named("l3", "l2"), named("l4", "l3"), named("l5", "l4")},
         {"policy 'l5'", "'l5' -> 'l4' -> 'l3' -> 'l2' -> 'l1'", "5 levels; at most 4"}},
        {"an only_parent with no children yet is fine (policy add, one at a time)",
         {named("link", "", true)},
         {}},
    };
    for (const auto &c : cases) {
        SCOPED_TRACE(c.what);
        auto errors = hierarchy_errors(c.set);
        if (c.expected.empty()) {
            EXPECT_TRUE(errors.empty()) << errors.front();
            continue;
        }
        ASSERT_EQ(errors.size(), 1u) << (errors.empty() ? "" : errors[0] + "\n" + errors.back());
        for (const auto &s : c.expected)
            EXPECT_THAT(errors[0], HasSubstr(s));
    }
}

// --shape edt meters at departure times, a chain at one instant: no edt policy in a hierarchy.
TEST(Hierarchy, ShapeEdtHasNoParentAndIsNoParent) {
    auto top = named("top"), child = named("child", "top");
    EXPECT_TRUE(hierarchy_errors({top, child}).empty());
    child.shape = TCM_SHAPE_EDT;
    auto errors = hierarchy_errors({top, child});
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_THAT(errors[0], HasSubstr("policy 'child': its parent is 'top', and 'child' has shape "
                                     "edt"));
    child.shape = TCM_SHAPE_OFF;
    top.shape = TCM_SHAPE_EDT;
    errors = hierarchy_errors({top, child});
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_THAT(errors[0], HasSubstr("and 'top' has shape edt"));
    EXPECT_TRUE(hierarchy_errors({top, named("alone")}).empty()) << "edt alone is fine";
}

TEST(Hierarchy, PolicyFieldsParseAndCouplingIsRfc4115Only) {
    json spec = {{"name", "user"},   {"algo", "rfc4115"}, {"cir", "10mbit"},
                 {"cbs", "15k"},     {"eir", "5mbit"},    {"ebs", "15k"},
                 {"parent", "link"}, {"coupling", true},  {"start", "empty"}};
    auto p = to_policy(spec, 3);
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(p->parent, "link");
    EXPECT_TRUE(p->meter.coupling);
    EXPECT_TRUE(p->meter.start_empty);
    auto cfg = make_meter_config(p->meter);
    EXPECT_EQ(cfg.flags & (TCM_METER_F_COUPLED | TCM_METER_F_START_EMPTY),
              TCM_METER_F_COUPLED | TCM_METER_F_START_EMPTY);

    json link = {{"name", "link"},
                 {"algo", "srtcm"},
                 {"cir", "100mbit"},
                 {"cbs", "64k"},
                 {"only_parent", true}};
    auto l = to_policy(link, 4);
    ASSERT_TRUE(l) << l.error();
    EXPECT_TRUE(l->only_parent);

    struct Bad {
        json patch;
        std::string message;
    } bad[] = {
        {{{"algo", "srtcm"}, {"eir", nullptr}}, "coupling applies to rfc4115 only, not srtcm"},
        {{{"start", "half"}}, "start 'half' is not full or empty"},
        {{{"coupling", "yes"}}, "coupling: expected true or false"},
        {{{"only_parent", true}, {"match", {{"proto", "udp"}}}},
         "only_parent: an only_parent policy matches no traffic"},
    };
    for (const auto &b : bad) {
        SCOPED_TRACE(b.message);
        auto r = to_policy(merge_policy(spec, b.patch), 5);
        ASSERT_FALSE(r);
        EXPECT_THAT(r.error(), HasSubstr(b.message));
    }
}

// ---- the meter core ----------------------------------------------------------------------

Meter rfc4115(uint64_t cir, uint64_t cbs, uint64_t eir, uint64_t ebs, bool coupling,
              bool start_empty = false) {
    MeterParams p;
    p.algo = Algo::rfc4115;
    p.cir = cir;
    p.cbs = cbs;
    p.eir = eir;
    p.ebs = ebs;
    p.coupling = coupling;
    p.start_empty = start_empty;
    EXPECT_TRUE(validate(p).ok());
    return Meter(make_meter_config(p));
}

TEST(Coupling, OverflowOfCGoesToE) {
    // CIR 8000 bit/s = 1000 B/s, CBS 1000, EIR 0, EBS 1000. Drain both, then wait 1.5 s:
    // C gains 1500 B, keeps 1000, and the 500 that overflow go to E (uncoupled: E stays 0).
    for (bool coupled : {false, true}) {
        SCOPED_TRACE(coupled ? "coupled" : "uncoupled");
        Meter m = rfc4115(8000, 1000, 0, 1000, coupled);
        EXPECT_EQ(m.mark(0, 1000), Color::green);
        EXPECT_EQ(m.mark(0, 1000), Color::yellow);
        EXPECT_EQ(m.mark(1500000000, 1000), Color::green);
        EXPECT_EQ(m.state().e_tokens, coupled ? 500 * kByte : 0);
        EXPECT_EQ(m.mark(1500000000, 500), coupled ? Color::yellow : Color::red);
    }
}

TEST(Coupling, EStillRefillsAtEirAndIsCappedAtEbs) {
    // CIR 1000 B/s, CBS 100; EIR 500 B/s, EBS 1000. Drain: C 0, E 0. After 0.5 s C holds 100
    // (it filled after 0.1 s, 400 B overflowed) and E 400 + 250 = 650.
    Meter m = rfc4115(8000, 100, 4000, 1000, true);
    EXPECT_EQ(m.mark(0, 100), Color::green);
    EXPECT_EQ(m.mark(0, 1000), Color::yellow);
    EXPECT_EQ(m.mark(500000000, 1), Color::green); // refill happens first
    EXPECT_EQ(m.state().c_tokens, 99 * kByte);
    EXPECT_EQ(m.state().e_tokens, 650 * kByte);
    // 10 s later both are full, E at exactly EBS.
    m.mark(10500000000, 1);
    EXPECT_EQ(m.state().e_tokens, 1000 * kByte);
    EXPECT_EQ(m.state().c_tokens, 99 * kByte);
}

TEST(Coupling, EFullByEirLongBeforeCIsFull) {
    // CIR 1000 B/s, CBS 1000; EIR 10000 B/s, EBS 100: after 50 ms E is full (it took 10 ms),
    // C holds 50 bytes, not 1000 (the random property test found a shortcut that filled both).
    Meter m = rfc4115(8000, 1000, 80000, 100, true);
    EXPECT_EQ(m.mark(0, 1000), Color::green);
    EXPECT_EQ(m.mark(0, 100), Color::yellow);
    EXPECT_EQ(m.mark(50000000, 60), Color::yellow);
    EXPECT_EQ(m.state().c_tokens, 50 * kByte);
    EXPECT_EQ(m.state().e_tokens, 40 * kByte);
    EXPECT_EQ(m.mark(50000000, 50), Color::green);
    EXPECT_EQ(m.state().c_tokens, 0u);
}

TEST(Coupling, LongGapsAndExtremesStayExact) {
    // 1 Tbit/s with 1 GiB buckets, gaps of years: no overflow, both full.
    Meter m = rfc4115(TCM_METER_MAX_RATE, TCM_METER_MAX_SIZE, TCM_METER_MAX_RATE,
                      TCM_METER_MAX_SIZE, true);
    EXPECT_EQ(m.mark(0, 65536), Color::green);
    EXPECT_EQ(m.mark(~0ull, 65536), Color::green);
    EXPECT_EQ(m.state().c_tokens, (TCM_METER_MAX_SIZE - 65536) * kByte);
    EXPECT_EQ(m.state().e_tokens, TCM_METER_MAX_SIZE * kByte);
    // 1 bit/s: one byte of C takes 8 s; what overflows then reaches E bit by bit.
    Meter slow = rfc4115(1, 1, 0, 1, true);
    EXPECT_EQ(slow.mark(0, 1), Color::green);
    EXPECT_EQ(slow.mark(0, 1), Color::yellow);
    EXPECT_EQ(slow.mark(7999999999, 1), Color::red);
    EXPECT_EQ(slow.mark(8000000000, 1), Color::green);
    EXPECT_EQ(slow.mark(16000000000, 1), Color::green);
    EXPECT_EQ(slow.mark(24000000000, 1), Color::green); // C: 1 more byte; E: 0
    EXPECT_EQ(slow.mark(40000000000, 1), Color::green); // C filled at 32 s, 1 B went to E
    EXPECT_EQ(slow.mark(40000000000, 1), Color::yellow);
}

TEST(StartEmpty, ANewFlowEarnsItsBurst) {
    Meter m = rfc4115(8000, 1000, 8000, 1000, false, true);
    EXPECT_EQ(m.mark(0, 1), Color::red); // empty at the first packet
    EXPECT_EQ(m.state().c_tokens, 0u);
    EXPECT_EQ(m.mark(100000000, 100), Color::green); // 0.1 s: 100 B in C, 100 B in E
    EXPECT_EQ(m.mark(100000000, 100), Color::yellow);
    EXPECT_EQ(m.mark(100000000, 1), Color::red);
    MeterParams s;
    s.algo = Algo::trtcm;
    s.cir = 8000;
    s.cbs = 500;
    s.pir = 16000;
    s.pbs = 500;
    s.start_empty = true;
    Meter t(make_meter_config(s));
    EXPECT_EQ(t.mark(5, 1), Color::red);
    // 0.2 s: C 200 B, P 400 B: 250 B fit P only.
    EXPECT_EQ(t.mark(5 + 200000000, 250), Color::yellow);
    EXPECT_EQ(t.state().e_tokens, 150 * kByte);
    EXPECT_EQ(t.state().c_tokens, 200 * kByte);
}

// ---- replay -f ---------------------------------------------------------------------------

TEST(FlowTrace, LinesParseAndBadOnesNameTheirLine) {
    auto ok = parse_flow_trace_line("10 100 yellow 198.18.0.1 198.18.0.2 udp 1000 7000", 1);
    ASSERT_TRUE(ok && *ok) << (ok ? "" : ok.error());
    EXPECT_EQ((*ok)->color, Color::yellow);
    EXPECT_EQ((*ok)->proto, 17);
    EXPECT_TRUE((*ok)->ports);
    EXPECT_EQ((*ok)->dport, 7000);
    auto v6 = parse_flow_trace_line("10,60,2001:db8::1,2001:db8::2", 1);
    ASSERT_TRUE(v6 && *v6);
    EXPECT_TRUE((*v6)->ipv6);
    EXPECT_EQ((*v6)->proto, FlowTracePacket::kNoProto);
    auto icmp = parse_flow_trace_line("10 28 198.18.0.1 198.18.0.2 icmp", 1);
    ASSERT_TRUE(icmp && *icmp);
    EXPECT_FALSE((*icmp)->ports);
    EXPECT_TRUE(parse_flow_trace_line("# comment", 1).value() == std::nullopt);
    EXPECT_TRUE(parse_flow_trace_line("", 1).value() == std::nullopt);

    struct Bad {
        std::string line, message;
    } bad[] = {
        {"10 100", "expected 'time_ns bytes [color] SRC DST"},
        {"x 100 198.18.0.1 198.18.0.2", "time 'x'"},
        {"10 27 198.18.0.1 198.18.0.2 udp 1 2", "from 28 (its headers)"},
        {"10 100 198.18.0.1 2001:db8::1", "different address families"},
        {"10 100 198.18.0.300 198.18.0.1", "source '198.18.0.300'"},
        {"10 100 198.18.0.1 198.18.0.2 gre", "protocol 'gre'"},
        {"10 100 198.18.0.1 198.18.0.2 icmp 1 2", "has no ports"},
        {"10 100 198.18.0.1 198.18.0.2 udp 1 70000", "destination port '70000'"},
        {"10 100 198.18.0.1 198.18.0.2 udp 1 2 3", "unexpected field '3'"},
        {"10 100 blue 198.18.0.1 198.18.0.2", "source 'blue'"},
    };
    for (const auto &b : bad) {
        SCOPED_TRACE(b.line);
        auto r = parse_flow_trace_line(b.line, 7);
        ASSERT_FALSE(r);
        EXPECT_THAT(r.error(), HasSubstr("line 7: "));
        EXPECT_THAT(r.error(), HasSubstr(b.message));
    }
}

std::vector<std::string> hier_vectors() {
    std::vector<std::string> out;
    for (const auto &e : std::filesystem::directory_iterator(TRICOLOR_VECTOR_DIR))
        if (e.path().extension() == ".yaml" && e.path().stem().string().starts_with("hier-"))
            out.push_back(e.path().stem().string());
    std::ranges::sort(out);
    return out;
}

std::string replay_model(const std::string &name) {
    std::string base = std::string(TRICOLOR_VECTOR_DIR) + "/" + name;
    auto policies = load_policy_file(base + ".yaml");
    EXPECT_TRUE(policies) << policies.error();
    std::ifstream in(base + ".trace");
    auto trace = parse_flow_trace(in);
    EXPECT_TRUE(trace) << trace.error();
    HierModelEngine engine(*policies);
    std::ostringstream out;
    run_hier_replay(engine, *policies, *trace, out);
    return out.str();
}

TEST(HierReplay, ModelMatchesEveryHierVector) {
    auto names = hier_vectors();
    ASSERT_GE(names.size(), 4u);
    for (const auto &name : names) {
        SCOPED_TRACE(name);
        std::string expected =
            test::read_file(std::string(TRICOLOR_VECTOR_DIR) + "/" + name + ".expected");
        EXPECT_EQ(test::first_difference(replay_model(name), expected), "");
    }
}

// The model engine against the exact reference, line by line, on random chains of every
// algorithm, `per`, colour mode, coupling and start; the reference's per-level bounds hold.
TEST(HierReplay, ModelEqualsTheExactReferenceOnRandomChains) {
    std::mt19937_64 rng(20261122);
    for (int round = 0; round < 300; ++round) {
        auto rc = test::random_case(rng, 400);
        SCOPED_TRACE(fmt::format("round {} ({} levels)", round, rc.levels.size()));
        ASSERT_TRUE(hierarchy_errors(rc.policies).empty());
        HierModelEngine model(rc.policies);
        test::RefChain ref(rc.levels);
        for (size_t k = 0; k < rc.trace.size(); ++k) {
            const auto &p = rc.trace[k];
            auto v = model.mark(p);
            if (p.proto != 17) {
                ASSERT_FALSE(v.policy_id) << "packet " << k;
                continue;
            }
            ASSERT_EQ(v.policy_id, 0u) << "packet " << k;
            ASSERT_EQ(v.color, test::ref_mark(ref, p)) << "packet " << k;
        }
        EXPECT_EQ(ref.check_bounds(), "");
    }
}

// A red packet changes no bucket at any level (a flow that did not exist starts, full or empty,
// as at its first packet); a non-red one changes every level's.
TEST(HierReplay, ARedPacketChangesNoBucket) {
    std::mt19937_64 rng(7);
    size_t reds = 0;
    for (int round = 0; round < 100; ++round) {
        auto rc = test::random_case(rng, 300, 1 + round % TCM_MAX_LEVELS);
        HierModelEngine model(rc.policies);
        for (const auto &p : rc.trace) {
            std::vector<std::optional<tcm_meter_state>> before;
            for (const auto &pol : rc.policies) {
                auto *s = model.state(pol.id, p);
                before.push_back(s ? std::optional(*s) : std::nullopt);
            }
            auto v = model.mark(p);
            if (!v.policy_id || v.color != Color::red)
                continue;
            ++reds;
            for (const auto &pol : rc.policies) {
                auto *s = model.state(pol.id, p);
                ASSERT_NE(s, nullptr);
                if (!before[pol.id])
                    continue; // started now: as at a first packet
                // Tokens exact as of different instants are compared as of the later one.
                tcm_meter_state was = *before[pol.id];
                tcm_meter_config cfg = make_meter_config(pol.meter);
                meter_refill(&cfg, &was, s->last_ns);
                EXPECT_EQ(was.c_tokens, s->c_tokens);
                EXPECT_EQ(was.e_tokens, s->e_tokens);
            }
        }
    }
    EXPECT_GT(reds, 1000u);
}

// A chain of one is docs/spec.md §1: the same colours as the plain meter of replay without -f.
TEST(HierReplay, AOneLevelChainIsTheMeterOfSection1) {
    std::mt19937_64 rng(11);
    for (int round = 0; round < 100; ++round) {
        auto rc = test::random_case(rng, 300, 1);
        rc.policies[0].per = TCM_PER_AGGREGATE;
        rc.policies[0].overhead = 0;
        HierModelEngine model(rc.policies);
        Meter meter(make_meter_config(rc.policies[0].meter));
        for (const auto &p : rc.trace) {
            auto v = model.mark(p);
            if (!v.policy_id)
                continue;
            ASSERT_EQ(v.color, meter.mark(p.time_ns, p.bytes, p.color));
        }
    }
}

} // namespace
