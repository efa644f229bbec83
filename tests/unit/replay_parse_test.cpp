// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The trace format of docs/spec.md §2: what is accepted, and every malformed line refused with its
// line number.
#include "tricolor/replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

using namespace tricolor;
using ::testing::HasSubstr;

namespace {

TEST(TraceParse, AcceptsSpacesCommasTabsAndColours) {
    std::istringstream in("# a comment\n"
                          "\n"
                          "100 1500\n"
                          "200,64,yellow\n"
                          "  300\t40 red  \n"
                          "400, 9000, green\r\n"
                          "   # indented comment\n"
                          "18446744073709551615 65536\n");
    auto t = parse_trace(in);
    ASSERT_TRUE(t.has_value()) << t.error();
    ASSERT_EQ(t->size(), 5u);
    EXPECT_EQ((*t)[0].time_ns, 100u);
    EXPECT_EQ((*t)[0].bytes, 1500u);
    EXPECT_EQ((*t)[0].color, Color::green);
    EXPECT_EQ((*t)[1].color, Color::yellow);
    EXPECT_EQ((*t)[2].time_ns, 300u);
    EXPECT_EQ((*t)[2].color, Color::red);
    EXPECT_EQ((*t)[3].bytes, 9000u);
    EXPECT_EQ((*t)[4].time_ns, UINT64_MAX);
    EXPECT_EQ((*t)[4].bytes, kMaxTracePacket);
}

struct Bad {
    const char *line;
    const char *why;
};

void PrintTo(const Bad &b, std::ostream *os) {
    *os << '"' << b.line << '"';
}

class MalformedLine : public ::testing::TestWithParam<Bad> {};

TEST_P(MalformedLine, IsRefusedWithItsLineNumber) {
    std::istringstream in(std::string("1 100\n# ok\n\n") + GetParam().line + "\n5 100\n");
    auto t = parse_trace(in);
    ASSERT_FALSE(t.has_value()) << GetParam().line;
    EXPECT_THAT(t.error(), HasSubstr("line 4: "));
    EXPECT_THAT(t.error(), HasSubstr(GetParam().why));
}

INSTANTIATE_TEST_SUITE_P(
    Garbage, MalformedLine,
    ::testing::Values(Bad{"100", "expected 'time_ns bytes"}, Bad{"abc 100", "time 'abc'"},
                      Bad{"-1 100", "time '-1'"}, Bad{"1.5 100", "time '1.5'"},
                      Bad{"18446744073709551616 100", "time '18446744073709551616'"},
                      Bad{"100 0", "packet length '0'"}, Bad{"100 65537", "packet length '65537'"},
                      Bad{"100 -3", "packet length '-3'"}, Bad{"100 1k", "packet length '1k'"},
                      Bad{"100 64 blue", "colour 'blue'"}, Bad{"100 64 GREEN", "colour 'GREEN'"},
                      Bad{"100 64 green extra", "unexpected field 'extra'"},
                      Bad{"100;64", "expected 'time_ns bytes"}));

TEST(TraceParse, EmptyInputIsAnEmptyTrace) {
    std::istringstream in("");
    auto t = parse_trace(in);
    ASSERT_TRUE(t.has_value());
    EXPECT_TRUE(t->empty());
}

} // namespace
