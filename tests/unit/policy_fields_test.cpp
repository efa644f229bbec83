// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Policy objects (docs/spec.md §7): every field parsed, every bad value refused naming the field.
#include "tricolor/cgroups.hpp"
#include "tricolor/policy_fields.hpp"
#include "tricolor/yaml.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace tricolor;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

json base() {
    return json{{"name", "web"}, {"algo", "srtcm"}, {"cir", "10mbit"}, {"cbs", "15k"}};
}

// Every word of the actions' table parses, prints back as it was written (the first word of its
// kind), and says what it takes when it is written wrong.
TEST(Actions, EveryWordOfTheTableParsesPrintsAndRefusesByName) {
    struct Case {
        std::string text, printed;
        tcm_action_kind kind;
        uint32_t value;
    };
    const Case cases[] = {
        {"pass", "pass", TCM_ACT_KIND_PASS, 0},
        {"drop", "drop", TCM_ACT_KIND_DROP, 0},
        {"dscp:ef", "dscp:ef", TCM_ACT_KIND_DSCP, 46},
        {"dscp:7", "dscp:7", TCM_ACT_KIND_DSCP, 7},
        {"mark:4294967295", "mark:4294967295", TCM_ACT_KIND_MARK, 4294967295u},
        {"priority:3", "priority:3", TCM_ACT_KIND_PRIORITY, 3},
        {"classid:1:10", "priority:65552", TCM_ACT_KIND_PRIORITY, 0x10010},
    };
    for (const Case &c : cases) {
        auto a = parse_action(c.text);
        ASSERT_TRUE(a.has_value()) << c.text << ": " << a.error();
        EXPECT_EQ(a->kind, c.kind) << c.text;
        EXPECT_EQ(a->value, c.value) << c.text;
        EXPECT_EQ(to_string(*a), c.printed);
    }
    // Each row of the table is reached by its word.
    for (const ActionWord &w : action_words()) {
        std::string text(w.word);
        if (w.parse)
            text += w.word == "dscp" ? ":0" : w.word == "classid" ? ":1:1" : ":1";
        auto a = parse_action(text);
        ASSERT_TRUE(a.has_value()) << text << ": " << a.error();
        EXPECT_EQ(a->kind, w.kind) << text;
        EXPECT_EQ(action_is_tc_only(a->kind), w.tc_only) << text;
    }
    const std::pair<std::string, std::string> bad[] = {
        {"explode", "use one of pass, drop, dscp:N|NAME, mark:N, priority:N, classid:MAJ:MIN"},
        {"explode:1", "unknown action 'explode'"},
        {"pass:1", "pass takes no value"},
        {"mark", "mark takes a value: mark:N"},
        {"mark:-1", "mark must be a number 0 to 4294967295"},
        {"priority:4294967296", "priority must be a number 0 to 4294967295"},
        {"dscp:64", "DSCP must be 0 to 63 or a name"},
        {"classid:10000:1", "classid must be MAJ:MIN in hex"},
    };
    for (const auto &[text, why] : bad) {
        auto a = parse_action(text);
        ASSERT_FALSE(a.has_value()) << text;
        EXPECT_THAT(a.error(), HasSubstr("invalid action '" + text + "': " + why));
    }
    EXPECT_FALSE(action_is_tc_only(TCM_ACT_KIND_DSCP));
    EXPECT_TRUE(action_is_tc_only(TCM_ACT_KIND_MARK));
}

TEST(PolicySpec, EveryFieldIsRead) {
    json spec = {{"name", "all"},
                 {"algo", "trtcm"},
                 {"cir", "10mbit"},
                 {"cbs", "15k"},
                 {"pir", "20mbit"},
                 {"pbs", 30000},
                 {"match",
                  {{"src", "198.18.0.0/15"},
                   {"dst", "198.19.1.0/24"},
                   {"proto", "udp"},
                   {"sport", "1024-65535"},
                   {"dport", 5000},
                   {"dscp", 46},
                   {"vlan", "100"},
                   {"iface", "lo"}}},
                 {"priority", 7},
                 {"per", "src/24"},
                 {"green", "pass"},
                 {"yellow", "dscp:af12"},
                 {"red", "classid:1:10"},
                 {"color_aware", true},
                 {"color_map", "af"},
                 {"packet_mode", false},
                 {"length", "l2"},
                 {"overhead", 24}};
    auto p = to_policy(spec, 9);
    ASSERT_TRUE(p.has_value()) << p.error();
    EXPECT_EQ(p->id, 9u);
    EXPECT_EQ(p->name, "all");
    EXPECT_EQ(p->meter.algo, Algo::trtcm);
    EXPECT_EQ(p->meter.cir, 10000000u);
    EXPECT_EQ(p->meter.pbs, 30000u);
    EXPECT_TRUE(p->meter.color_aware);
    EXPECT_EQ(to_string(*p->match.src), "198.18.0.0/15");
    EXPECT_EQ(p->match.proto, 17);
    EXPECT_EQ(p->match.sport->lo, 1024);
    EXPECT_EQ(p->match.dport->hi, 5000);
    EXPECT_EQ(p->match.dscp, 46);
    EXPECT_EQ(p->match.vlan, 100);
    EXPECT_EQ(p->match.ifindex, 1u);
    EXPECT_EQ(p->priority, 7u);
    EXPECT_EQ(p->per, TCM_PER_SRC);
    EXPECT_EQ(p->prefix4, 24);
    EXPECT_EQ(p->actions[TCM_YELLOW].kind, TCM_ACT_KIND_DSCP);
    EXPECT_EQ(p->actions[TCM_YELLOW].value, 12u);
    EXPECT_EQ(p->actions[TCM_RED].value, 0x00010010u);
    EXPECT_EQ(p->length, TCM_LEN_L2);
    EXPECT_EQ(p->overhead, 24u);
}

TEST(PolicySpec, DefaultsAreAggregateL3PassPassDrop) {
    auto p = to_policy(base(), 1).value();
    EXPECT_EQ(p.per, TCM_PER_AGGREGATE);
    EXPECT_EQ(p.length, TCM_LEN_L3);
    EXPECT_EQ(p.actions[TCM_GREEN].kind, TCM_ACT_KIND_PASS);
    EXPECT_EQ(p.actions[TCM_YELLOW].kind, TCM_ACT_KIND_PASS);
    EXPECT_EQ(p.actions[TCM_RED].kind, TCM_ACT_KIND_DROP);
}

struct Bad {
    const char *what;
    json patch;
    const char *error;
};

TEST(PolicySpec, EachBadFieldIsNamed) {
    const std::vector<Bad> cases = {
        {"bad unit", {{"cir", "10mbyte"}}, "invalid rate '10mbyte'"},
        {"PIR below CIR",
         {{"algo", "trtcm"}, {"pir", "1mbit"}, {"pbs", "1k"}},
         "PIR 1mbit is below"},
        {"bad prefix", {{"match", {{"src", "198.18.0.1/33"}}}}, "match.src: invalid prefix"},
        {"host bits", {{"match", {{"dst", "198.18.0.1/24"}}}}, "host bits"},
        {"port too big", {{"match", {{"dport", "70000"}}}}, "match.dport: invalid port '70000'"},
        {"reversed range", {{"match", {{"sport", "90-80"}}}}, "invalid port '90-80'"},
        {"unknown proto", {{"match", {{"proto", "quic"}}}}, "match.proto: 'quic'"},
        {"unknown iface", {{"match", {{"iface", "nosuchif0"}}}}, "no interface named 'nosuchif0'"},
        {"dscp range", {{"match", {{"dscp", 64}}}}, "match.dscp"},
        {"vlan range", {{"match", {{"vlan", 4096}}}}, "match.vlan"},
        {"unknown action", {{"red", "explode"}}, "red: invalid action 'explode'"},
        {"dscp action range", {{"yellow", "dscp:64"}}, "DSCP must be 0 to 63"},
        {"bad per", {{"per", "src/200"}}, "per: 'src/200'"},
        {"unknown per", {{"per", "flow"}}, "per: 'flow' is not"},
        {"bad length", {{"length", "l4"}}, "length: 'l4'"},
        {"unknown field", {{"burst", "1k"}}, "burst: unknown field"},
        {"unknown match field", {{"match", {{"port", 80}}}}, "match.port: unknown field"},
        {"bool as string", {{"color_aware", "yes"}}, "color_aware: expected true or false"},
        {"negative priority", {{"priority", -1}}, "priority: '-1'"},
        {"mixed families",
         {{"match", {{"src", "198.18.0.0/15"}, {"dst", "2001:db8::/32"}}}},
         "different address families"},
        {"name with space", {{"name", "a b"}}, "name: 'a b'"},
        {"per cgroup alone", {{"per", "cgroup"}}, "per: cgroup keeps a bucket per cgroup"},
        {"cgroup and an address",
         {{"match", {{"cgroup", "system.slice"}, {"dport", 80}}}},
         "match.cgroup: a cgroup match takes no other field yet (this one has dport)"},
        {"cgroup mount point",
         {{"match", {{"cgroup", "/sys/fs/cgroup/system.slice"}}}},
         "names the mount point"},
        {"cgroup root", {{"match", {{"cgroup", "/"}}}}, "'/' is the root cgroup"},
        {"cgroup dot-dot", {{"match", {{"cgroup", "a/../b"}}}}, "'..' is not allowed"},
        {"cgroup unclosed bracket",
         {{"match", {{"cgroup", "kubepods.slice/pod[0-9"}}}},
         "'pod[0-9' has a '[' without its ']'"},
        {"cgroup empty bracket", {{"match", {{"cgroup", "a/[]"}}}}, "without its ']'"},
        {"cgroup name too long",
         {{"match", {{"cgroup", "a/" + std::string(256, 'x')}}}},
         "longer than any cgroup name"},
        {"cgroup empty component", {{"match", {{"cgroup", "a//b"}}}}, "empty component"},
        {"direction of an address policy",
         {{"direction", "ingress"}},
         "direction: only a cgroup policy states a direction"},
        {"unknown direction",
         {{"match", {{"cgroup", "a"}}}, {"direction", "up"}},
         "direction: 'up' is not egress or ingress"},
        {"rewrite on cgroup ingress",
         {{"match", {{"cgroup", "a"}}}, {"direction", "ingress"}, {"yellow", "dscp:af12"}},
         "yellow: dscp:af12 on ingress to a cgroup's sockets"},
        {"per src on cgroup ingress",
         {{"match", {{"cgroup", "a"}}}, {"direction", "ingress"}, {"per", "src"}},
         "per: ingress to a cgroup's sockets is metered aggregate or per cgroup"},
        {"cgroup ingress shaping",
         {{"match", {{"cgroup", "a"}}}, {"direction", "ingress"}, {"shape", "sockets"}},
         "ingress to a cgroup's sockets is not shaped"},
    };
    ASSERT_GE(cases.size(), 8u);
    for (const auto &c : cases) {
        SCOPED_TRACE(c.what);
        auto r = to_policy(merge_policy(base(), c.patch), 1);
        ASSERT_FALSE(r.has_value());
        EXPECT_THAT(r.error(), HasSubstr(c.error));
    }
    auto missing = to_policy(json{{"name", "x"}}, 1);
    ASSERT_FALSE(missing.has_value());
    EXPECT_THAT(missing.error(), HasSubstr("algo: missing"));
    EXPECT_THAT(missing.error(), HasSubstr("cir: missing"));
    EXPECT_THAT(missing.error(), HasSubstr("cbs: missing"));
}

TEST(PolicySpec, ACgroupMatchIsKeptBelowTheMountWithoutOuterSlashes) {
    auto p = to_policy(merge_policy(base(), {{"match", {{"cgroup", "/system.slice/*.service/"}}},
                                             {"per", "cgroup"}}),
                       1);
    ASSERT_TRUE(p.has_value()) << p.error();
    EXPECT_EQ(p->match.cgroup, "system.slice/*.service");
    EXPECT_EQ(p->per, TCM_PER_CGROUP);
}

// A pattern names cgroups at its own depth (globs per component); every cgroup below a named one
// is covered too, with the named one as its bucket.
TEST(Cgroups, APatternCoversTheCgroupsItNamesAndEveryOneBelowThem) {
    std::vector<tricolor::Cgroup> tree = {{"", 1},
                                          {"system.slice", 2},
                                          {"system.slice/nginx.service", 3},
                                          {"system.slice/nginx.service/worker", 4},
                                          {"system.slice/sshd.service", 5},
                                          {"system.slice/foo.scope", 6},
                                          {"user.slice", 7},
                                          {"user.slice/nginx.service", 8}};
    using Hits = std::vector<tricolor::CgroupHit>;
    EXPECT_EQ(tricolor::match_cgroups("system.slice/nginx.service", tree), (Hits{{3, 3}, {4, 3}}));
    EXPECT_EQ(tricolor::match_cgroups("system.slice/*.service", tree),
              (Hits{{3, 3}, {4, 3}, {5, 5}}));
    EXPECT_EQ(tricolor::match_cgroups("system.slice", tree),
              (Hits{{2, 2}, {3, 2}, {4, 2}, {5, 2}, {6, 2}}));
    EXPECT_EQ(tricolor::match_cgroups("*/nginx.service", tree), (Hits{{3, 3}, {4, 3}, {8, 8}}));
    EXPECT_EQ(tricolor::match_cgroups("system.slice/nosuch", tree), Hits{});
    EXPECT_EQ(tricolor::match_cgroups("", tree), Hits{}) << "the root is never a pattern";
}

TEST(PolicySpec, MergeReplacesFieldsAndNullRemovesThem) {
    json spec = merge_policy(base(), {{"ebs", "30k"}, {"match", {{"dport", 80}}}});
    spec = merge_policy(spec, {{"cir", "20mbit"}, {"ebs", nullptr}});
    EXPECT_EQ(spec["cir"], "20mbit");
    EXPECT_FALSE(spec.contains("ebs"));
    EXPECT_EQ(spec["match"]["dport"], 80);
}

} // namespace

namespace {

TEST(PolicySpec, DscpMatchTakesTheNamesActionsTake) {
    using nlohmann::json;
    for (auto [name, value] : {std::pair{"af11", 10}, {"ef", 46}, {"cs6", 48}, {"0", 0}}) {
        json spec = {{"name", "d"},
                     {"algo", "srtcm"},
                     {"cir", "1mbit"},
                     {"cbs", "15k"},
                     {"match", {{"dscp", name}}}};
        auto p = tricolor::to_policy(spec, 0);
        ASSERT_TRUE(p.has_value()) << name << ": " << p.error();
        EXPECT_EQ(p->match.dscp, value) << name;
    }
    json bad = {{"name", "d"},
                {"algo", "srtcm"},
                {"cir", "1mbit"},
                {"cbs", "15k"},
                {"match", {{"dscp", "af99"}}}};
    auto p = tricolor::to_policy(bad, 0);
    ASSERT_FALSE(p.has_value());
    EXPECT_NE(p.error().find("match.dscp: 'af99'"), std::string::npos) << p.error();
}

// docs/spec.md §8: shape and aqm.
TEST(PolicySpec, ShapeAndAqmAreReadAndDefaultOff) {
    auto p = to_policy(base(), 1);
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(p->shape, TCM_SHAPE_OFF);
    EXPECT_EQ(p->aqm, TCM_AQM_OFF);
    json spec = base();
    spec["shape"] = "sockets";
    spec["aqm"] = "ecn";
    p = to_policy(spec, 1);
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(p->shape, TCM_SHAPE_SOCKETS);
    EXPECT_EQ(p->aqm, TCM_AQM_ECN);
    spec["shape"] = "edt";
    spec["aqm"] = "drop";
    p = to_policy(spec, 1);
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(p->shape, TCM_SHAPE_EDT);
    EXPECT_EQ(p->aqm, TCM_AQM_DROP);
    // Through YAML and back, values as given.
    json cfg = {{"policies", json::array({spec})}};
    auto back = yaml_to_json(json_to_yaml(cfg));
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ((*back)["policies"][0]["shape"], "edt");
    EXPECT_EQ((*back)["policies"][0]["aqm"], "drop");
}

TEST(PolicySpec, BadShapeAndAqmAreRefusedWithTheReason) {
    json spec = base();
    spec["shape"] = "fast";
    spec["aqm"] = "red";
    auto p = to_policy(spec, 1);
    ASSERT_FALSE(p);
    EXPECT_THAT(p.error(), HasSubstr("shape: 'fast' is not off, sockets or edt"));
    EXPECT_THAT(p.error(), HasSubstr("aqm: 'red' is not off, drop or ecn"));
    spec = base();
    spec["shape"] = "sockets";
    spec["packet_mode"] = true;
    spec["cir"] = "1000";
    spec["cbs"] = "10";
    p = to_policy(spec, 1);
    ASSERT_FALSE(p);
    EXPECT_THAT(p.error(), HasSubstr("byte-mode"));
    spec = base();
    spec["shape"] = "sockets";
    spec["match"] = {{"proto", "udp"}};
    p = to_policy(spec, 1);
    ASSERT_FALSE(p);
    EXPECT_THAT(p.error(), HasSubstr("paces TCP sockets"));
    spec = base();
    spec["shape"] = "edt";
    spec["fleet"] = true;
    p = to_policy(spec, 1);
    ASSERT_FALSE(p);
    EXPECT_THAT(p.error(), HasSubstr("shape: edt waits for the tokens a bucket earns in time"));
}

TEST(PolicySpec, ShapedSocketsArePacedAtCirOnTheWireAsLinuxCountsPacedBytes) {
    Policy p;
    p.meter.cir = 20000000; // 20 Mbit/s: 2.5 MB/s of IP packets
    // Linux paces 1480 bytes (payload and TCP header) of every 1500-byte IP packet.
    EXPECT_EQ(shape_payload_rate(p), 2466666u);
    p.length = TCM_LEN_L2;
    EXPECT_EQ(shape_payload_rate(p), 2443857u); // 1514-byte frames
    p.overhead = 24;
    EXPECT_EQ(shape_payload_rate(p), 2405721u); // and 24 bytes of overhead each
    p.meter.packet_mode = true;
    EXPECT_EQ(shape_payload_rate(p), 0u);
}

} // namespace
// docs/spec.md §10: `fleet: true` (YAML or JSON) marks a policy whose committed bucket is the
// fleet's.
TEST(PolicySpec, FleetIsAFlag) {
    json spec = base();
    EXPECT_FALSE(to_policy(spec, 1)->fleet);
    spec["fleet"] = true;
    EXPECT_TRUE(to_policy(spec, 1)->fleet);
    spec["fleet"] = "yes";
    auto bad = to_policy(spec, 1);
    ASSERT_FALSE(bad.has_value());
    EXPECT_THAT(bad.error(), HasSubstr("fleet"));
}

// The one table of policy flags (tricolorctl policy add|set, replay): its keys are the fields, each
// once and in its order; a --no-KEY row undoes a flag or a text field given before it; and
// to_policy reads every field the table makes (none of them is an "unknown field").
TEST(PolicySpec, TheFlagTableMakesTheFieldsAndEveryWayBack) {
    std::vector<std::string> keys, options;
    for (const auto &flag : policy_flags()) {
        options.push_back(policy_flag_option(flag));
        if (flag.kind == PolicyFlagKind::Off || flag.kind == PolicyFlagKind::Clear) {
            auto field = std::ranges::find_if(policy_flags(), [&](const PolicyFlag &f) {
                return f.key == flag.key && f.kind != flag.kind;
            });
            ASSERT_NE(field, policy_flags().end()) << flag.key;
            EXPECT_EQ(field->kind,
                      flag.kind == PolicyFlagKind::Off ? PolicyFlagKind::On : PolicyFlagKind::Text)
                << flag.key;
        } else {
            EXPECT_EQ(std::ranges::count(keys, flag.key), 0) << flag.key;
            keys.emplace_back(flag.key);
        }
    }
    EXPECT_EQ(keys, policy_fields());
    EXPECT_EQ(options.front(), "NAME");
    EXPECT_THAT(options, ::testing::IsSupersetOf({"--cir", "--color-aware", "--no-color-aware",
                                                  "--only-parent", "--no-parent", "--start"}));

    json spec = json::object();
    for (const auto &key : policy_fields())
        spec[key] = key == "match" ? json::object() : json("x");
    auto p = to_policy(spec, 1);
    ASSERT_FALSE(p.has_value());
    EXPECT_THAT(p.error(), ::testing::Not(HasSubstr("unknown field")));
    EXPECT_THAT(to_policy(json{{"nonesuch", 1}}, 1).error(), HasSubstr("nonesuch: unknown field"));
}
