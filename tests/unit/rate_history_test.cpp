// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The live page's rate history (userspace/daemon/rate_history.hpp): rates from successive
// reads of the counters, what has no rate, and the JSON the page reads.
#include "rate_history.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using nlohmann::json;
using tricolor::PolicyTotal;
using tricolor::RateHistory;

namespace {

json after(const RateHistory &h, uint64_t seq) {
    return json::parse(h.json_after(seq));
}

} // namespace

TEST(RateHistory, BitsPerSecondFromTheBytesSinceTheLastRead) {
    RateHistory h;
    h.add({{"a", 1, {100, 0, 0}}}, 1000, 1.0);
    h.add({{"a", 1, {1100, 500, 250}}}, 2000, 1.0);
    h.add({{"a", 1, {2100, 500, 250}}}, 2500, 0.5);
    json j = after(h, 0);
    EXPECT_EQ(j["seq"], 3);
    EXPECT_EQ(j["t"], json({1000, 2000, 2500}));
    // The first read has no rate; then 8 bits a byte over the time between reads.
    EXPECT_EQ(j["bps"]["a"][0], json({nullptr, 8000, 16000}));
    EXPECT_EQ(j["bps"]["a"][1], json({nullptr, 4000, 0}));
    EXPECT_EQ(j["bps"]["a"][2], json({nullptr, 2000, 0}));
    // Only what is newer than the page has.
    json k = after(h, 2);
    EXPECT_EQ(k["t"], json({2500}));
    EXPECT_EQ(k["bps"]["a"][0], json({16000}));
}

TEST(RateHistory, APolicyAddedAgainOrMissedForASampleHasNoRateThen) {
    RateHistory h;
    h.add({{"a", 1, {1000, 0, 0}}, {"b", 2, {0, 0, 0}}}, 1000, 1.0);
    h.add({{"a", 7, {10, 0, 0}}}, 2000, 1.0);                       // a: another id; b: gone
    h.add({{"a", 7, {20, 0, 0}}, {"b", 2, {50, 0, 0}}}, 3000, 1.0); // b back: no rate yet
    h.add({{"a", 7, {5, 0, 0}}, {"b", 2, {60, 0, 0}}}, 4000, 1.0);  // a counts from 0 again
    json j = after(h, 0);
    EXPECT_EQ(j["bps"]["a"][0], json({nullptr, nullptr, 80, 40}));
    EXPECT_EQ(j["bps"]["b"][0], json({nullptr, nullptr, nullptr, 80}));
}

TEST(RateHistory, KeepsFiveMinutesAndForgetsWhatIsGoneThatLong) {
    RateHistory h;
    h.add({{"old", 1, {0, 0, 0}}}, 0, 1.0);
    for (int i = 1; i <= 400; ++i)
        h.add({{"a", 2, {static_cast<uint64_t>(i) * 125, 0, 0}}}, i * 1000, 1.0);
    json j = after(h, 0);
    ASSERT_EQ(j["t"].size(), RateHistory::kSamples);
    EXPECT_EQ(j["t"].front(), (400 - 300 + 1) * 1000);
    EXPECT_EQ(j["bps"]["a"][0].back(), 1000);
    EXPECT_FALSE(j["bps"].contains("old"));
    // A page far behind gets what is kept, not what is gone.
    EXPECT_EQ(after(h, 5)["t"].size(), RateHistory::kSamples);
    EXPECT_EQ(after(h, h.seq())["t"].size(), 0u);
}

TEST(RateHistory, NamesAreJsonEscaped) {
    RateHistory h;
    h.add({{"q\"\\\n", 1, {0, 0, 0}}}, 0, 1.0);
    json j = after(h, 0);
    EXPECT_TRUE(j["bps"].contains("q\"\\\n"));
}
