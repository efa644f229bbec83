// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// --quota (docs/spec.md §14): the byte that reaches the quota, the periods' edges (fixed and
// calendar months), the over meter; and every bad value refused naming the field. The vectors
// (tests/vectors/*-quota-*, from the exact model in reference.py) hold the replay engines to
// the same rules packet by packet.
#include "test_util.hpp"
#include "tricolor/policy_fields.hpp"
#include "tricolor/replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace tricolor;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

constexpr uint64_t kSecond = 1000000000;
constexpr uint64_t kNov2026 = 1793491200 * kSecond; // 2026-11-01T00:00:00Z

Meter quota_meter(const std::vector<std::string> &flags) {
    MeterParams p = test::meter_from_args(flags);
    return Meter(make_meter_config(p), make_warm_config(p), make_quota_config(p));
}

} // namespace

// A quota of 3000 bytes and 1500-byte packets: the second takes used to the quota exactly, and
// the third is the over meter's (here: drop); a packet that crosses it counts whole.
TEST(Quota, ThePacketThatReachesTheQuotaIsTheLastTheMeterDecides) {
    Meter m = quota_meter(
        {"--algo", "srtcm", "--cir", "1000000000", "--cbs", "1000000", "--quota", "3000/1h"});
    uint64_t t = kNov2026 + kSecond;
    EXPECT_EQ(m.mark(t, 1500), Color::green);
    EXPECT_EQ(m.mark(t + 1, 1500), Color::green);
    EXPECT_EQ(m.quota_state().used, 3000u);
    EXPECT_EQ(m.mark(t + 2, 64), Color::red); // used: dropped until the hour ends
    EXPECT_EQ(m.mark(t + 3, 1), Color::red);

    Meter cross = quota_meter(
        {"--algo", "srtcm", "--cir", "1000000000", "--cbs", "1000000", "--quota", "2000/1h"});
    EXPECT_EQ(cross.mark(t, 1500), Color::green);
    EXPECT_EQ(cross.mark(t + 1, 1500), Color::green); // 1500 < 2000: metered, counts whole
    EXPECT_EQ(cross.quota_state().used, 3000u);
    EXPECT_EQ(cross.mark(t + 2, 64), Color::red);
}

// Periods of 1h from the epoch: a packet one ns before the hour is the old period's, one at the
// hour the new one's, whose used starts at 0.
TEST(Quota, APeriodEndsAtItsResetToTheNanosecond) {
    Meter m = quota_meter({"--algo", "srtcm", "--cir", "1000000000", "--cbs", "1000000", "--quota",
                           "1500/1h", "--over", "drop"});
    const uint64_t hour = kNov2026 + 3600 * kSecond; // the epoch is a period's start
    EXPECT_EQ(m.mark(hour - 10 * kSecond, 1500), Color::green);
    EXPECT_EQ(m.mark(hour - 1, 64), Color::red);
    EXPECT_EQ(m.quota_state().period_end, hour);
    EXPECT_EQ(m.mark(hour, 1500), Color::green);
    EXPECT_EQ(m.quota_state().used, 1500u);
    EXPECT_EQ(m.quota_state().period_end, hour + 3600 * kSecond);
    // A gap of many periods starts the one that holds the packet.
    EXPECT_EQ(m.mark(hour + 1000 * 3600 * kSecond + 5, 1500), Color::green);
    EXPECT_EQ(m.quota_state().period_end, hour + 1001 * 3600 * kSecond);
}

// Months reset on their day at their time, UTC, February included; a reset time before the
// first packet anchors fixed periods backwards as well.
TEST(Quota, MonthsAndAnchorsFollowTheCalendar) {
    Meter m = quota_meter({"--algo", "srtcm", "--cir", "1000000000", "--cbs", "1000000", "--quota",
                           "1500/month", "--quota-reset", "15T06:00"});
    const uint64_t day = 86400 * kSecond, six = 6 * 3600 * kSecond;
    m.mark(kNov2026, 1500);                                            // 2026-11-01
    EXPECT_EQ(m.quota_state().period_end, kNov2026 + 14 * day + six);  // 2026-11-15T06:00Z
    const uint64_t feb15 = kNov2026 + (30 + 31 + 31 + 14) * day + six; // 2027-02-15T06:00Z
    m.mark(feb15 - 1, 64);
    EXPECT_EQ(m.quota_state().period_end, feb15);
    m.mark(feb15, 64);
    EXPECT_EQ(m.quota_state().period_end, feb15 + 28 * day); // 2027-03-15: February has 28

    Meter fixed = quota_meter({"--algo", "srtcm", "--cir", "1000000000", "--cbs", "1000000",
                               "--quota", "1500/7d", "--quota-reset", "2026-11-02T00:00:00Z"});
    fixed.mark(kNov2026, 64); // the day before the anchor: the week [Oct 26, Nov 2)
    EXPECT_EQ(fixed.quota_state().period_end, kNov2026 + day);
}

// Over the quota the over meter decides, with buckets of its own that start full.
TEST(Quota, TheOverMeterDecidesOnceTheQuotaIsUsed) {
    Meter m = quota_meter({"--algo", "srtcm", "--cir", "1000000000", "--cbs", "1000000", "--quota",
                           "1500/1h", "--over", "cir=8000,cbs=1500,ebs=0"});
    uint64_t t = kNov2026 + kSecond;
    EXPECT_EQ(m.mark(t, 1500), Color::green);
    EXPECT_EQ(m.mark(t + 1, 1500), Color::green); // the over meter's 1500 bytes
    EXPECT_EQ(m.mark(t + 2, 1500), Color::red);   // 1000 B/s: empty for 1.5 s
    EXPECT_EQ(m.mark(t + 2 + 3 * kSecond / 2, 1500), Color::green);
}

TEST(Quota, BadInputIsRefusedNamingTheField) {
    json base = {{"name", "q"}, {"algo", "srtcm"}, {"cir", "1mbit"}, {"cbs", "15k"}};
    test::expect_each_refused(
        base,
        {
            {{{"quota", "50g"}}, "quota: '50g' is not BYTES/PERIOD"},
            {{{"quota", "0/1d"}}, "quota: 0 bytes is no quota"},
            {{{"quota", "50g/0s"}}, "shorter than a second"},
            {{{"quota", "50g/30"}}, "quota: the period: invalid duration '30': give a unit"},
            {{{"quota", "50x/30d"}}, "quota: invalid size '50x'"},
            {{{"quota", "50g/month"}, {"quota_reset", "31"}}, "day 31 is not in every month"},
            {{{"quota", "50g/month"}, {"quota_reset", "0"}}, "is not a day of the month"},
            {{{"quota", "50g/month"}, {"quota_reset", "1T25:00"}}, "'25:00' is not HH:MM"},
            {{{"quota", "50g/1d"}, {"quota_reset", "yesterday"}}, "'yesterday' is not a UTC time"},
            {{{"quota", "50g/1d"}, {"quota_reset", "2026-02-30"}},
             "'2026-02-30' is not a UTC time"},
            {{{"quota_reset", "2026-11-01"}}, "quota_reset without quota"},
            {{{"over", "drop"}}, "over without quota"},
            {{{"quota", "50g/1d"}, {"over", "cir=1mbit"}},
             "over: the over meter needs cir and cbs"},
            {{{"quota", "50g/1d"}, {"over", "cir=1mbit,cbs=16k,color=red"}}, "unknown key 'color'"},
            {{{"quota", "50g/1d"}, {"over", "cir=1zbit,cbs=16k"}}, "over: CIR: invalid rate"},
            {{{"quota", "50g/1d"}, {"over", "algo=trtcm,cir=1mbit,cbs=16k"}},
             "over: trtcm needs PIR"},
        });
    json good = base;
    good["quota"] = "100g/month";
    auto p = to_policy(good, 1);
    ASSERT_TRUE(p.has_value()) << p.error();
    EXPECT_EQ(p->meter.quota_bytes, 100ull << 30);
    EXPECT_EQ(p->meter.quota_month_day, 1u);
    EXPECT_FALSE(p->meter.over); // drop
}
