// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Units (docs/spec.md §4): every suffix, decimals, overflow and garbage.
#include "tricolor/units.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace tricolor;
using ::testing::HasSubstr;

namespace {

struct Case {
    const char *text;
    uint64_t value;
};

void PrintTo(const Case &c, std::ostream *os) {
    *os << '"' << c.text << '"';
}

class RateSuffix : public ::testing::TestWithParam<Case> {};

TEST_P(RateSuffix, ParsesToBitsPerSecond) {
    auto r = parse_rate(GetParam().text);
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(*r, GetParam().value);
}

INSTANTIATE_TEST_SUITE_P(
    AllSuffixes, RateSuffix,
    ::testing::Values(Case{"0", 0}, Case{"1", 1}, Case{"123", 123}, Case{"7bit", 7},
                      Case{"2kbit", 2000}, Case{"3mbit", 3000000}, Case{"4gbit", 4000000000},
                      Case{"1tbit", 1000000000000}, Case{"2kibit", 2048}, Case{"1mibit", 1048576},
                      Case{"1gibit", 1073741824}, Case{"1tibit", 1099511627776}, Case{"5bps", 40},
                      Case{"1kbps", 8000}, Case{"1mbps", 8000000}, Case{"1gbps", 8000000000},
                      Case{"1tbps", 8000000000000}, Case{"1kibps", 8192}, Case{"1mibps", 8388608},
                      Case{"1gibps", 8589934592}, Case{"1tibps", 8796093022208},
                      // tc matches suffixes without regard to case
                      Case{"10Mbit", 10000000}, Case{"1KBps", 8000}, Case{"1GIBIT", 1073741824},
                      // decimals that land on a whole bit
                      Case{"1.5kbit", 1500}, Case{"0.001kbit", 1}, Case{".5kbit", 500},
                      Case{"0.125bps", 1}, Case{"2.5mbit", 2500000}, Case{"007", 7},
                      Case{"1.000", 1}, Case{"18446744073709551615", UINT64_MAX}));

class SizeSuffix : public ::testing::TestWithParam<Case> {};

TEST_P(SizeSuffix, ParsesToBytes) {
    auto r = parse_size(GetParam().text);
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(*r, GetParam().value);
}

INSTANTIATE_TEST_SUITE_P(AllSuffixes, SizeSuffix,
                         ::testing::Values(Case{"1500", 1500}, Case{"64b", 64}, Case{"15k", 15360},
                                           Case{"15kb", 15360}, Case{"2m", 2097152},
                                           Case{"2mb", 2097152}, Case{"1g", 1073741824},
                                           Case{"1gb", 1073741824}, Case{"1.5k", 1536},
                                           Case{"0.5k", 512}, Case{"1K", 1024},
                                           Case{"1MB", 1048576}, Case{"0", 0}));

struct BadCase {
    const char *text;
    const char *why; // a substring of the message
};

void PrintTo(const BadCase &c, std::ostream *os) {
    *os << '"' << c.text << '"';
}

class BadRate : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadRate, IsRefusedWithTheValueNamed) {
    auto r = parse_rate(GetParam().text);
    ASSERT_FALSE(r.has_value()) << GetParam().text << " gave " << *r;
    EXPECT_THAT(r.error(), HasSubstr(std::string("'") + GetParam().text + "'"));
    EXPECT_THAT(r.error(), HasSubstr(GetParam().why));
}

INSTANTIATE_TEST_SUITE_P(
    Garbage, BadRate,
    ::testing::Values(BadCase{"-5mbit", "negative"}, BadCase{"abc", "not a number"},
                      BadCase{"mbit", "not a number"}, BadCase{".", "not a number"},
                      BadCase{"10zbit", "unknown unit 'zbit'"},
                      BadCase{"10 mbit", "unknown unit ' mbit'"},
                      BadCase{"10mbitx", "unknown unit"}, BadCase{"1..5", "digits after it"},
                      BadCase{"1.2.3kbit", "unknown unit"}, BadCase{"5.", "digits after it"},
                      BadCase{"0.5bit", "not a whole number of bit/s"},
                      BadCase{"1.0001kbit", "not a whole number"},
                      BadCase{"18446744073709551616", "too large"},
                      BadCase{"20000000tbit", "too large"},
                      BadCase{"1000000000000000000000000000000000", "too many digits"},
                      BadCase{"1e6", "unknown unit 'e6'"}, BadCase{"0x10", "unknown unit"},
                      BadCase{"10k", "unknown unit 'k'"}, BadCase{"+5", "not a number"}));

TEST(Units, EmptyIsRefused) {
    EXPECT_THAT(parse_rate("").error(), HasSubstr("empty"));
    EXPECT_THAT(parse_size("").error(), HasSubstr("empty"));
}

TEST(Units, SizeRefusesGarbageNamingTheValue) {
    for (const char *bad : {"0.5b", "1kbit", "1t", "-1k", "1.5", "k", "1 k", "99999999999999g"}) {
        auto r = parse_size(bad);
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_THAT(r.error(), HasSubstr(std::string("'") + bad + "'"));
    }
    EXPECT_THAT(parse_size("0.5b").error(), HasSubstr("not a whole number of bytes"));
    EXPECT_THAT(parse_size("99999999999999g").error(), HasSubstr("too large"));
}

TEST(Units, PacketRatesAndCounts) {
    EXPECT_EQ(parse_packet_rate("100").value(), 100u);
    EXPECT_EQ(parse_packet_rate("100pps").value(), 100u);
    EXPECT_EQ(parse_packet_rate("2kpps").value(), 2000u);
    EXPECT_EQ(parse_packet_rate("1.5Mpps").value(), 1500000u);
    EXPECT_EQ(parse_packet_rate("1gpps").value(), 1000000000u);
    EXPECT_THAT(parse_packet_rate("1mbit").error(), HasSubstr("unknown unit 'mbit'"));
    EXPECT_EQ(parse_packet_count("32").value(), 32u);
    EXPECT_EQ(parse_packet_count("32pkt").value(), 32u);
    EXPECT_THAT(parse_packet_count("1.5").error(), HasSubstr("not a whole number of packets"));
    EXPECT_THAT(parse_packet_count("1k").error(), HasSubstr("unknown unit 'k'"));
}

TEST(Units, FormatPicksTheLargestExactUnitAndParsesBack) {
    EXPECT_EQ(format_rate(10000000), "10mbit");
    EXPECT_EQ(format_rate(1500), "1500bit");
    EXPECT_EQ(format_rate(0), "0bit");
    EXPECT_EQ(format_rate(1000000000000), "1tbit");
    EXPECT_EQ(format_size(15360), "15k");
    EXPECT_EQ(format_size(1500), "1500b");
    EXPECT_EQ(format_size(1073741824), "1g");
    for (uint64_t v : {uint64_t{1}, uint64_t{999}, uint64_t{123456789}, uint64_t{7000000}}) {
        EXPECT_EQ(parse_rate(format_rate(v)).value(), v);
        EXPECT_EQ(parse_size(format_size(v)).value(), v);
    }
}

} // namespace
