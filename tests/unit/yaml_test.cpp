// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Config files: YAML in, the same JSON objects the socket carries, and back without loss.
#include "tricolor/yaml.hpp"

#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

using namespace tricolor;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

TEST(Yaml, ScalarsBecomeWhatTheyLookLikeUnlessQuoted) {
    auto j = yaml_to_json("policies:\n"
                          "  - name: web\n"
                          "    cir: 10mbit\n"
                          "    cbs: 1500\n"
                          "    color_aware: true\n"
                          "    quoted: \"1500\"\n"
                          "    match: {dport: 80, src: 198.18.0.0/15}\n");
    ASSERT_TRUE(j.has_value()) << j.error();
    const json &p = (*j)["policies"][0];
    EXPECT_EQ(p["name"], "web");
    EXPECT_EQ(p["cir"], "10mbit");
    EXPECT_EQ(p["cbs"], 1500);
    EXPECT_EQ(p["color_aware"], true);
    EXPECT_EQ(p["quoted"], "1500");
    EXPECT_EQ(p["match"]["dport"], 80);
    EXPECT_EQ(p["match"]["src"], "198.18.0.0/15");
}

TEST(Yaml, JsonIsYamlToo) {
    auto j = yaml_to_json(R"({"policies": [{"name": "a", "cbs": "15k"}]})");
    ASSERT_TRUE(j.has_value());
    EXPECT_EQ((*j)["policies"][0]["cbs"], "15k");
}

TEST(Yaml, ErrorsNameTheLine) {
    auto j = yaml_to_json("policies:\n  - name: a\n   bad: [\n");
    ASSERT_FALSE(j.has_value());
    EXPECT_THAT(j.error(), ::testing::HasSubstr("line "));
}

TEST(Yaml, RoundTripKeepsEveryValueAndType) {
    json cfg = {{"policies",
                 {{{"name", "true"},
                   {"cir", "10mbit"},
                   {"cbs", "1500"},
                   {"priority", 7},
                   {"color_aware", false},
                   {"match", {{"src", "2001:db8::/32"}, {"dport", "80-90"}}}}}},
                {"attachments", json::array()}};
    auto back = yaml_to_json(json_to_yaml(cfg));
    ASSERT_TRUE(back.has_value()) << back.error();
    EXPECT_EQ(*back, cfg) << json_to_yaml(cfg);
}

} // namespace

TEST(Yaml, FleetTrueIsABoolean) {
    auto j = yaml_to_json("policies:\n  - name: a\n    fleet: true\n");
    ASSERT_TRUE(j.has_value());
    EXPECT_EQ((*j)["policies"][0]["fleet"], true);
}

// Found by the config harness (tests/fuzz): an anchor holding its own alias recursed until the
// stack ran out, in tricolord's config reader and in tricolorctl apply alike.
TEST(Yaml, AnAliasInsideItsOwnAnchorIsRefusedNotACrash) {
    auto r = yaml_to_json("a: &x [*x]\n");
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("nested deeper than 64 levels"));
}

// Found by libFuzzer (tests/fuzz/config_fuzz): a string whose text is that self-alias, printed
// back as YAML, escaped the printer's check of whether it reads as another type and ended the
// process. It is quoted and reads back as the same string.
TEST(Yaml, AStringThatReadsAsASelfAliasPrintsBackQuoted) {
    nlohmann::json doc = {{"name", ": &x [*x]"}, {"other", "&x [*x]"}};
    std::string text = json_to_yaml(doc);
    auto back = yaml_to_json(text);
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(*back, doc) << text;
}

// Aliases of aliases: nine lines that would expand to 10^9 values.
TEST(Yaml, AliasesThatExpandToBillionsAreRefused) {
    std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (int i = 1; i < 9; ++i)
        text += fmt::format("a{1}: &a{1} [*a{0}, *a{0}, *a{0}, *a{0}, *a{0}, *a{0}, *a{0}, *a{0}, "
                            "*a{0}, *a{0}]\n",
                            i - 1, i);
    auto r = yaml_to_json(text);
    ASSERT_FALSE(r);
    // The bound grows with the text: 100,000 values and 8 a byte.
    EXPECT_THAT(r.error(),
                HasSubstr(fmt::format("more than {} values", 100'000 + 8 * text.size())));
}

// Found by libFuzzer (tests/fuzz/config_fuzz): a scalar of bytes that are not UTF-8 was read as
// a string that could not be printed back the same, nor dumped as JSON (nlohmann refuses it).
TEST(Yaml, BytesThatAreNotUtf8OrControlCharactersAreRefusedNamingWhere) {
    auto r = yaml_to_json("policies:\n  - name: \"a\xff\"\n");
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("line 2, column 13: byte 0xff is not UTF-8 text"));
    r = yaml_to_json(std::string("\x0e\0\0\0\0\xff\xff\0", 8));
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("line 1, column 1: control character 0x0e"));
    r = yaml_to_json("name: \"\xc0\xaf\"\n"); // an overlong '/'
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error(), HasSubstr("not UTF-8"));
    auto ok = yaml_to_json("name: \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\xa6\"\t# text\r\n");
    ASSERT_TRUE(ok) << ok.error();
    EXPECT_EQ((*ok)["name"], "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\xa6");
}
