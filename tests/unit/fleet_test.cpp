// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The fleet exchange script (userspace/src/fleet.lua) against its own exact model, on a real
// redis-server started on a free loopback port; and the fleet URL and fallback parsers.
#include "redis_server.hpp"
#include "tricolor/fleet.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <thread>

using namespace tricolor;
using namespace tricolor::fleet;
using tricolor::test::RedisServer;

namespace {

// The script's arithmetic in exact integers: what every reply must equal, given the reply's
// own Redis time.
struct Model {
    bool exists = false;
    int64_t cir = 0, cbs = 0, tokens = 0, t = 0, out = 0;
    std::map<std::string, int64_t> held;
    std::map<std::string, int64_t> seen;
    bool last_unknown = false; // the last exchange's node had no record (new or expired)

    Reply exchange(const Request &q, int64_t now) {
        Reply r;
        int64_t cir_q = static_cast<int64_t>(q.cir), cbs_q = static_cast<int64_t>(q.cbs);
        if (!exists) {
            cir = cir_q;
            cbs = cbs_q;
            tokens = 0;
            t = now;
            out = 0;
            exists = true;
        } else {
            r.mismatch = cir != cir_q || cbs != cbs_q;
        }
        // Expiry: score <= now - ttl, in (score, member) order, at most 64.
        std::vector<std::pair<int64_t, std::string>> gone;
        for (auto &[n, s] : seen)
            if (s <= now - static_cast<int64_t>(q.ttl_us))
                gone.emplace_back(s, n);
        std::ranges::sort(gone);
        if (gone.size() > 64)
            gone.resize(64);
        for (auto &[s, n] : gone) {
            if (held.contains(n))
                out -= held[n];
            held.erase(n);
            seen.erase(n);
        }
        int64_t h = static_cast<int64_t>(q.report);
        auto rec = held.find(q.node);
        last_unknown = rec == held.end();
        if (rec != held.end() && !q.reset)
            h = std::min(h, rec->second);
        else
            h = std::min(h, cbs);
        if (rec != held.end())
            out -= rec->second;
        out += h;
        if (now > t) {
            __int128 p = static_cast<__int128>(cir) * (now - t);
            int64_t add = p < cbs ? static_cast<int64_t>(p) : cbs;
            int64_t room = std::max<int64_t>(cbs - out - tokens, 0);
            tokens += std::min(add, room);
            t = now;
        }
        int64_t grant = std::max<int64_t>(std::min<int64_t>(q.want, tokens), 0);
        tokens -= grant;
        held[q.node] = h + grant;
        out += grant;
        seen[q.node] = now;
        r.grant = grant;
        r.tokens = tokens;
        r.out = out;
        r.hosts = seen.size();
        r.cir = cir;
        r.cbs = cbs;
        r.now_us = now;
        return r;
    }
};

class FleetScriptTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!RedisServer::available())
            GTEST_SKIP() << "redis-server is not installed (./tricolor.sh build installs it)";
        ASSERT_TRUE(redis.start()) << "redis-server did not start";
        url = parse_redis_url(redis.url()).value();
    }
    RedisServer redis;
    RedisUrl url;
};

void expect_same(const Reply &got, const Reply &want, int step) {
    ASSERT_EQ(got.grant, want.grant) << "step " << step;
    ASSERT_EQ(got.tokens, want.tokens) << "step " << step;
    ASSERT_EQ(got.out, want.out) << "step " << step;
    ASSERT_EQ(got.hosts, want.hosts) << "step " << step;
    ASSERT_EQ(got.cir, want.cir) << "step " << step;
    ASSERT_EQ(got.cbs, want.cbs) << "step " << step;
    ASSERT_EQ(got.mismatch, want.mismatch) << "step " << step;
}

// @resets: let hosts void their records now and then, and over-report (their reports are then
// taken up to CBS
// each, so the sum can pass CBS: kept off where that sum would pass 2^53).
void run_against_model(const RedisUrl &url, uint64_t cir, uint64_t cbs, uint64_t seed, int steps,
                       bool resets = true) {
    Client c(url, std::chrono::milliseconds(1000));
    Model m;
    std::mt19937_64 rng(seed);
    const std::vector<std::string> nodes = {"a", "b", "c", "d"};
    std::map<std::string, uint64_t> holding; // what each simulated host really holds
    std::map<std::string, std::chrono::steady_clock::time_point> last_ok;
    uint64_t granted = 0, t0 = 0;
    bool any_reset = false;
    for (int i = 0; i < steps; ++i) {
        Request q;
        q.policy = "model";
        q.node = nodes[rng() % nodes.size()];
        q.cir = cir;
        q.cbs = cbs;
        // A host spends part of what it holds, then reports (sometimes over-reporting, which
        // the script must cap at its record).
        uint64_t &h = holding[q.node];
        h -= h ? rng() % (h + 1) : 0;
        q.want = rng() % 4 == 0 ? cbs : rng() % (cbs / 3 + 1);
        q.ttl_us = 30000;
        q.reset = resets && rng() % 50 == 0;
        if (rng() % 16 == 0)
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
        // As the agent does: a host revokes what it holds when its last successful exchange
        // was sent 0.9 lease ago, less the time this exchange may take (5 ms here).
        using std::chrono::steady_clock;
        const auto budget = std::chrono::microseconds(q.ttl_us * 9 / 10 - 5000);
        auto before = steady_clock::now();
        auto ok = last_ok.find(q.node);
        bool revoked = ok != last_ok.end() && before - ok->second >= budget;
        if (revoked)
            h = 0;
        q.report = resets && rng() % 8 == 0 ? h + rng() % cbs : h;
        auto r = c.exchange(q);
        ASSERT_TRUE(r.has_value()) << r.error();
        Reply want = m.exchange(q, static_cast<int64_t>(r->now_us));
        expect_same(*r, want, i);
        if (i == 0)
            t0 = r->now_us;
        // An exchange slower than the budget: the agent would have timed out and revoked.
        bool late = ok != last_ok.end() && !revoked &&
                    steady_clock::now() - ok->second >= budget + std::chrono::microseconds(5000);
        last_ok[q.node] = before;
        h += r->grant;
        granted += r->grant;
        any_reset = any_reset || late;
        // The invariant (until a reset brings in reports the fleet cannot check) and the
        // never-over bound on Redis's clock: the bucket starts empty, so all grants together
        // are at most CIR * T.
        // A report the fleet cannot check (reset, or a node it does not know) may hold more
        // than the fleet gave: a real host reports that only after a fallback.
        any_reset = any_reset || q.reset || (m.last_unknown && q.report > 0);
        if (!any_reset) {
            ASSERT_LE(r->tokens + r->out, cbs) << "step " << i;
        }
        ASSERT_LE(static_cast<__int128>(granted), static_cast<__int128>(cir) * (r->now_us - t0))
            << "granted more than CIR * T at step " << i;
    }
}

} // namespace

TEST_F(FleetScriptTest, MatchesItsExactModel) {
    run_against_model(url, 8000000 /* 8 Mbit/s: 8 units/us */, 8000000ull * 1500 /* 1500 B */, 1,
                      1500);
}

TEST_F(FleetScriptTest, ExactAtTheLargestRatesAndSizes) {
    // CIR 10^12 bit/s, CBS 2^30 bytes = 8.6e15 units: every quantity just under 2^53.
    run_against_model(url, 1000000000000ull, (1ull << 30) * kUnitsPerByte, 2, 600, false);
}

TEST_F(FleetScriptTest, TheFirstWritersParametersStand) {
    Client c(url, std::chrono::milliseconds(1000));
    Request a{"p", "a", 1000000, 8000000000ull, 0, 0, 1000000, false};
    ASSERT_TRUE(c.exchange(a).has_value());
    Request b = a;
    b.node = "b";
    b.cir = 2000000;
    auto r = c.exchange(b);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->mismatch);
    EXPECT_EQ(r->cir, 1000000u);
    EXPECT_EQ(r->hosts, 2u);
    auto r2 = c.exchange(a);
    EXPECT_FALSE(r2->mismatch);
}

TEST_F(FleetScriptTest, RestartedEmptyTheHoldingsComeBackWithTheReports) {
    Client c(url, std::chrono::milliseconds(1000));
    Request a{"p", "a", 8000000, 8000000ull * 10000, 0, 8000000ull * 10000, 1000000, false};
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(c.exchange(a).has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto g = c.exchange(a);
    ASSERT_TRUE(g.has_value());
    ASSERT_GT(g->grant, 0u);
    redis.stop();
    EXPECT_FALSE(c.exchange(a).has_value());
    ASSERT_TRUE(redis.start());
    a.report = g->grant;
    a.want = 0;
    a.reset = true;
    auto r = c.exchange(a); // reconnects, reloads the script
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->tokens, 0u); // a new bucket starts empty
    EXPECT_EQ(r->out, g->grant);
}

TEST_F(FleetScriptTest, ASilentHostsHoldingExpires) {
    Client c(url, std::chrono::milliseconds(1000));
    Request a{"p", "a", 8000000, 8000000ull * 10000, 0, 8000000ull * 10000, 20000, false};
    ASSERT_TRUE(c.exchange(a).has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto g = c.exchange(a);
    ASSERT_GT(g->out, 0u);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    Request b = a;
    b.node = "b";
    b.want = 0;
    auto r = c.exchange(b);
    EXPECT_EQ(r->hosts, 1u);
    EXPECT_EQ(r->out, 0u);
}

TEST(FleetClient, UnreachableRedisIsAnErrorNotAHang) {
    auto port = tricolor::test::free_loopback_port();
    Client c(parse_redis_url("redis://127.0.0.1:" + std::to_string(port)).value(),
             std::chrono::milliseconds(200));
    auto t = std::chrono::steady_clock::now();
    auto r = c.exchange(Request{"p", "a", 1000, 1000, 0, 0, 1000000, false});
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().find("cannot connect"), std::string::npos) << r.error();
    EXPECT_LT(std::chrono::steady_clock::now() - t, std::chrono::seconds(2));
}

TEST(FleetUrl, Parses) {
    auto u = parse_redis_url("redis://127.0.0.1:6380").value();
    EXPECT_EQ(u.host, "127.0.0.1");
    EXPECT_EQ(u.port, 6380);
    EXPECT_EQ(parse_redis_url("redis://[2001:db8::1]:7000").value().host, "2001:db8::1");
    EXPECT_EQ(parse_redis_url("redis://cache.example").value().port, 6379);
    for (const char *bad :
         {"127.0.0.1:6379", "http://h:1", "redis://", "redis://h:", "redis://h:0",
          "redis://h:70000", "redis://h:12x", "redis://[2001:db8::1", "redis://u@h:1"}) {
        auto r = parse_redis_url(bad);
        EXPECT_FALSE(r.has_value()) << bad;
    }
    EXPECT_EQ(parse_fallback("share"), Fallback::share);
    EXPECT_EQ(parse_fallback("closed"), Fallback::closed);
    EXPECT_EQ(parse_fallback("open"), Fallback::open);
    EXPECT_FALSE(parse_fallback("maybe").has_value());
}
