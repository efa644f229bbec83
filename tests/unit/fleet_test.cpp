// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The fleet exchange script (userspace/src/fleet.lua) against its own exact model, on a real
// redis-server started on a free loopback port: the leases it gives keep the rates hosts may run
// within CIR and their caps within CBS at every step, shares are max-min fair by demand, a new
// state raises no lease while leases of before may run; and the fleet URL and fallback parsers.
#include "redis_server.hpp"
#include "tricolor/fleet.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <sstream>
#include <set>
#include <thread>

using namespace tricolor;
using namespace tricolor::fleet;
using tricolor::test::RedisCluster;
using tricolor::test::RedisServer;

namespace {

// The script's arithmetic in exact integers: what every reply must equal, given the reply's
// own Redis time.
struct Model {
    struct Rec {
        int64_t rate, cap, run_rate, run_cap, demand, allow_rate, allow_cap;
        std::string instance;
    };
    bool exists = false;
    int64_t cir = 0, cbs = 0, born = 0, settle = 0, level = -1, level_t = 0, rates = 0, caps = 0;
    std::map<std::string, Rec> hosts;
    std::map<std::string, int64_t> seen;

    Reply exchange(const Request &q, int64_t now) {
        Reply r;
        auto cir_q = static_cast<int64_t>(q.cir), cbs_q = static_cast<int64_t>(q.cbs);
        auto ttl = static_cast<int64_t>(q.ttl_us), level_us = static_cast<int64_t>(q.level_us);
        auto run_rate = static_cast<int64_t>(q.run_rate), run_cap = static_cast<int64_t>(q.run_cap);
        auto demand = static_cast<int64_t>(q.demand);
        if (!exists) {
            exists = true;
            cir = cir_q;
            cbs = cbs_q;
            born = now;
            settle = now + static_cast<int64_t>(q.settle_us);
            level = -1;
            level_t = now - level_us;
            rates = caps = 0;
        } else {
            r.mismatch = cir != cir_q || cbs != cbs_q;
        }
        const int64_t settle_before = settle;
        if (static_cast<int64_t>(q.run_epoch) != born && (run_rate > 0 || run_cap > 0))
            settle = std::max(settle, now + ttl);
        // Expiry: score <= now - ttl, in (score, member) order, at most 64.
        std::vector<std::pair<int64_t, std::string>> gone;
        for (auto &[n, t] : seen)
            if (t <= now - ttl)
                gone.emplace_back(t, n);
        std::ranges::sort(gone);
        if (gone.size() > 64)
            gone.resize(64);
        for (auto &[t, n] : gone) {
            if (auto h = hosts.find(n); h != hosts.end()) {
                rates -= std::max(h->second.rate, h->second.run_rate);
                caps -= std::max(h->second.cap, h->second.run_cap);
                hosts.erase(h);
            }
            seen.erase(n);
        }
        // The name: another instance's live record refuses this one (nothing of it kept); an
        // expired one is dropped.
        if (auto h = hosts.find(q.node); h != hosts.end() && h->second.instance != q.instance) {
            if (auto t = seen.find(q.node); t != seen.end() && t->second > now - ttl) {
                settle = settle_before;
                r.hosts = seen.size();
                r.cir = cir;
                r.cbs = cbs;
                r.now_us = now;
                r.epoch = born;
                r.leased = rates;
                r.held = true;
                r.holder = h->second.instance;
                return r;
            }
            rates -= std::max(h->second.rate, h->second.run_rate);
            caps -= std::max(h->second.cap, h->second.run_cap);
            hosts.erase(h);
            seen.erase(q.node);
        }
        seen[q.node] = now;
        const auto n = static_cast<int64_t>(seen.size());
        const int64_t floor_rate = cir / (64 * n);
        auto want = [&](int64_t d) { return std::max(d + d / 16, floor_rate); };
        auto rec = hosts.find(q.node);
        if (now - level_t >= level_us) {
            std::vector<int64_t> list;
            rates = caps = 0;
            for (auto &[name, h] : hosts) {
                rates += std::max(h.rate, h.run_rate);
                caps += std::max(h.cap, h.run_cap);
                if (name != q.node)
                    list.push_back(want(h.demand));
            }
            list.push_back(want(demand));
            std::ranges::sort(list);
            int64_t left = cir, k = static_cast<int64_t>(list.size());
            level = -1;
            for (int64_t i = 0; i < k; ++i) {
                int64_t even = left / (k - i);
                if (list[i] > even) {
                    level = even;
                    break;
                }
                left -= list[i];
            }
            level_t = now;
        }
        int64_t old_rate = 0, old_cap = 0, allow_rate = 0, allow_cap = 0;
        if (rec != hosts.end()) {
            old_rate = std::max(rec->second.rate, rec->second.run_rate);
            old_cap = std::max(rec->second.cap, rec->second.run_cap);
            allow_rate = rec->second.allow_rate;
            allow_cap = rec->second.allow_cap;
        }
        if (static_cast<int64_t>(q.run_epoch) != born) {
            allow_rate = std::max(allow_rate, run_rate);
            allow_cap = std::max(allow_cap, run_cap);
        }
        int64_t others_rate = rates - old_rate, others_cap = caps - old_cap;
        int64_t fair = want(demand);
        if (level >= 0 && fair > level)
            fair = level;
        fair = std::min(fair, cir);
        int64_t rate = std::min(fair, cir - others_rate);
        int64_t cap = std::min(cbs / n, cbs - others_cap);
        if (now < settle) {
            rate = std::min(rate, std::max(run_rate, allow_rate));
            cap = std::min(cap, std::max(run_cap, allow_cap));
        }
        rate = std::max<int64_t>(rate, 0);
        cap = std::max<int64_t>(cap, 0);
        rates = others_rate + std::max(rate, run_rate);
        caps = others_cap + std::max(cap, run_cap);
        hosts[q.node] = {rate, cap, run_rate, run_cap, demand, allow_rate, allow_cap, q.instance};
        r.rate = rate;
        r.cap = cap;
        r.hosts = n;
        r.cir = cir;
        r.cbs = cbs;
        r.now_us = now;
        r.epoch = born;
        r.fair = fair;
        r.leased = rates;
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
    ASSERT_EQ(got.rate, want.rate) << "step " << step;
    ASSERT_EQ(got.cap, want.cap) << "step " << step;
    ASSERT_EQ(got.hosts, want.hosts) << "step " << step;
    ASSERT_EQ(got.cir, want.cir) << "step " << step;
    ASSERT_EQ(got.cbs, want.cbs) << "step " << step;
    ASSERT_EQ(got.mismatch, want.mismatch) << "step " << step;
    ASSERT_EQ(got.epoch, want.epoch) << "step " << step;
    ASSERT_EQ(got.fair, want.fair) << "step " << step;
    ASSERT_EQ(got.leased, want.leased) << "step " << step;
    ASSERT_EQ(got.older, want.older) << "step " << step;
    ASSERT_EQ(got.held, want.held) << "step " << step;
    ASSERT_EQ(got.holder, want.holder) << "step " << step;
}

// A simulated host: the lease it runs, and the epoch it came from.
struct Host {
    uint64_t rate = 0, cap = 0, epoch = 0, demand = 0;
};

// level_us 0: the fair shares from every host's latest want at each exchange (the agent's
// period in the cases that say so).
Request ask(const std::string &node, uint64_t cir, uint64_t cbs, const Host &h,
            uint64_t ttl_us = 10000000, uint64_t settle_us = 0, uint64_t level_us = 0) {
    Request q;
    q.policy = "model";
    q.node = node;
    q.cir = cir;
    q.cbs = cbs;
    q.run_rate = h.rate;
    q.run_cap = h.cap;
    q.run_epoch = h.epoch;
    q.demand = h.demand;
    q.ttl_us = ttl_us;
    q.settle_us = settle_us;
    q.level_us = level_us;
    return q;
}

// Hosts whose demands move at random, and whose replies are now and then lost (the host goes on
// running the lease it had). After every exchange the leases the hosts really run sum to at
// most CIR and CBS: the never-over bound's two halves.
void run_against_model(const RedisUrl &url, uint64_t cir, uint64_t cbs, uint64_t seed, int steps) {
    Client c(url, std::chrono::milliseconds(1000));
    Model m;
    std::mt19937_64 rng(seed);
    // Node "e" is two daemons' name (two instances, as two hosts started with one name): one
    // of them is refused and runs nothing; the bound holds over all six.
    const std::vector<std::pair<std::string, std::string>> nodes = {
        {"a", "a:1"}, {"b", "b:1"}, {"c", "c:1"}, {"d", "d:1"}, {"e", "e:1"}, {"e", "e:2"}};
    std::map<std::string, Host> run; // by instance
    int raised = 0, refused = 0;
    for (int i = 0; i < steps; ++i) {
        const auto &[node, instance] = nodes[rng() % nodes.size()];
        Host &h = run[instance];
        if (rng() % 4 == 0)
            h.demand = rng() % 3 == 0 ? 0 : rng() % (2 * cir / 3 + 1);
        // The level now at every exchange, now once per 2 ms (then with wants up to 2 ms old).
        const uint64_t level_us = i < steps / 2 ? 0 : 2000;
        Request q = ask(node, cir, cbs, h, 10000000, 0, level_us);
        q.instance = instance;
        auto r = c.exchange(q);
        ASSERT_TRUE(r.has_value()) << r.error();
        Reply want = m.exchange(q, static_cast<int64_t>(r->now_us));
        expect_same(*r, want, i);
        refused += r->held;
        if (rng() % 10 != 0) { // applied; else lost on the way
            raised += r->rate > h.rate;
            h.rate = r->rate;
            h.cap = r->cap;
            h.epoch = r->epoch;
        }
        uint64_t rates = 0, caps = 0;
        for (auto &[n, x] : run) {
            rates += x.rate;
            caps += x.cap;
        }
        ASSERT_LE(rates, cir) << "step " << i;
        ASSERT_LE(caps, cbs) << "step " << i;
        ASSERT_LE(r->leased, cir) << "step " << i;
    }
    EXPECT_GT(raised, steps / 10) << "the leases followed demand";
    EXPECT_GT(refused, 0) << "the second instance under 'e' was refused";
}

} // namespace

TEST_F(FleetScriptTest, MatchesItsExactModel) {
    run_against_model(url, 24000000 /* 24 Mbit/s */, 65536, 1, 1500);
}

TEST_F(FleetScriptTest, ExactAtTheLargestRatesAndSizes) {
    run_against_model(url, 1000000000000ull /* 1 Tbit/s */, 1ull << 30, 2, 600);
}

// Demands 1, 2, 10 and 10 Mbit/s against 12: each asks a sixteenth more; the two small ones get
// what they ask, the two large ones split the rest evenly. Leases lowered count at their old
// rate until their host's next exchange, so it takes a few rounds to settle.
TEST_F(FleetScriptTest, SharesAreMaxMinFairByDemand) {
    Client c(url, std::chrono::milliseconds(1000));
    const uint64_t cir = 12000000, cbs = 40000;
    std::map<std::string, Host> run = {{"a", {0, 0, 0, 1000000}},
                                       {"b", {0, 0, 0, 2000000}},
                                       {"c", {0, 0, 0, 10000000}},
                                       {"d", {0, 0, 0, 10000000}}};
    for (int round = 0; round < 6; ++round)
        for (auto &[n, h] : run) {
            auto r = c.exchange(ask(n, cir, cbs, h));
            ASSERT_TRUE(r.has_value()) << r.error();
            h.rate = r->rate;
            h.cap = r->cap;
            h.epoch = r->epoch;
        }
    EXPECT_EQ(run["a"].rate, 1062500u);
    EXPECT_EQ(run["b"].rate, 2125000u);
    EXPECT_EQ(run["c"].rate, 4406250u);
    EXPECT_EQ(run["d"].rate, 4406250u);
    for (auto &[n, h] : run)
        EXPECT_EQ(h.cap, cbs / 4) << n;
    // Demand moves from c to a: a's lease grows to what c gives back.
    run["a"].demand = 10000000;
    run["c"].demand = 1000000;
    for (int round = 0; round < 4; ++round)
        for (auto &[n, h] : run) {
            auto r = c.exchange(ask(n, cir, cbs, h));
            h.rate = r->rate;
        }
    EXPECT_EQ(run["c"].rate, 1062500u);
    EXPECT_EQ(run["a"].rate, 4406250u);
}

// An idle host keeps a floor of CIR/(64 N): its bucket fills while it is idle, so its first
// packets after a pause are green.
TEST_F(FleetScriptTest, AnIdleHostKeepsAFloor) {
    Client c(url, std::chrono::milliseconds(1000));
    const uint64_t cir = 24000000, cbs = 65536;
    Host busy{0, 0, 0, 48000000}, idle;
    for (int round = 0; round < 4; ++round) {
        auto r = c.exchange(ask("busy", cir, cbs, busy));
        busy = {r->rate, r->cap, r->epoch, busy.demand};
        r = c.exchange(ask("idle", cir, cbs, idle));
        idle = {r->rate, r->cap, r->epoch, 0};
    }
    EXPECT_EQ(idle.rate, cir / 128);
    EXPECT_EQ(idle.cap, cbs / 2);
    EXPECT_EQ(busy.rate, cir - cir / 128);
}

// A state just made (first start, or Redis lost its data) raises no lease for settle_us; a host
// that runs a lease of another epoch makes it wait a whole lease (hosts not heard yet may run
// theirs until then).
TEST_F(FleetScriptTest, ANewStateRaisesNoLeaseWhileLeasesOfBeforeMayRun) {
    Client c(url, std::chrono::milliseconds(1000));
    const uint64_t cir = 8000000, cbs = 10000;
    Host a{0, 0, 0, 4000000};
    auto r = c.exchange(ask("a", cir, cbs, a, 10000000, 30000));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(r->rate, 0u);
    EXPECT_EQ(r->fair, 4250000u);
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    r = c.exchange(ask("a", cir, cbs, a, 10000000, 30000));
    EXPECT_EQ(r->rate, 4250000u);
    // Redis loses its data; the host still runs its lease (of the old epoch).
    a = {r->rate, r->cap, r->epoch, 4000000};
    redis.stop();
    ASSERT_TRUE(redis.start());
    c.disconnect(); // as after the failed exchange an agent would have seen
    for (int i = 0; i < 2; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
        auto q = c.exchange(ask("a", cir, cbs, a, 200000, 30000));
        ASSERT_TRUE(q.has_value()) << q.error();
        EXPECT_LE(q->rate, a.rate) << "no raise within a lease of the loss";
        a = {q->rate, q->cap, q->epoch, 8000000}; // more demand: still no raise
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    r = c.exchange(ask("a", cir, cbs, a, 200000, 30000));
    EXPECT_EQ(r->rate, cir);
}

// After an `open` fallback every host ran all of CIR: the first exchanges cut the leases (the
// others are counted at CIR), and while the state settles a cut lease may grow back up to what
// its host ran, within what the others are counted at - not stay cut for the whole settling.
TEST_F(FleetScriptTest, LeasesCutWhileSettlingGrowBackToWhatTheirHostsRan) {
    Client c(url, std::chrono::milliseconds(1000));
    const uint64_t cir = 8000000, cbs = 10000;
    std::map<std::string, Host> run = {{"a", {cir, cbs, 0, cir}}, {"b", {cir, cbs, 0, cir}}};
    for (int round = 0; round < 4; ++round) {
        for (auto &[n, h] : run) {
            auto r = c.exchange(ask(n, cir, cbs, h, 10000000, 0));
            ASSERT_TRUE(r.has_value()) << r.error();
            h = {r->rate, r->cap, r->epoch, h.demand};
        }
        // Once both have been heard, what they run is within CIR again.
        EXPECT_LE(run["a"].rate + run["b"].rate, cir) << "round " << round;
    }
    // Still settling (a lease of 10 s): each host at its fair share, half of CIR.
    EXPECT_EQ(run["a"].rate, cir / 2);
    EXPECT_EQ(run["b"].rate, cir / 2);
    EXPECT_EQ(run["a"].cap, cbs / 2);
}

TEST_F(FleetScriptTest, TheFirstWritersParametersStand) {
    Client c(url, std::chrono::milliseconds(1000));
    Request a = ask("a", 1000000, 1000, Host{});
    ASSERT_TRUE(c.exchange(a).has_value());
    Request b = ask("b", 2000000, 1000, Host{});
    auto r = c.exchange(b);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->mismatch);
    EXPECT_EQ(r->cir, 1000000u);
    EXPECT_EQ(r->hosts, 2u);
    auto r2 = c.exchange(a);
    EXPECT_FALSE(r2->mismatch);
}

// Hosts of the token-grant version under the same policy name count only their own: the script
// tells when that version's bucket was exchanged with within a lease (its 't'), and not after.
TEST_F(FleetScriptTest, HostsOfTheTokenGrantVersionAreTold) {
    Client c(url, std::chrono::milliseconds(1000));
    auto r = c.exchange(ask("a", 1000000, 1000, Host{}));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_FALSE(r->older);
    const std::string bucket = keys_of("model")[3];
    EXPECT_EQ(bucket, "tricolor:{model}:bucket");
    auto stamp = [&](const std::string &lua_t) {
        redis.cli(
            {"EVAL", "redis.call(\"HSET\", KEYS[1], \"t\", " + lua_t + ") return 1", "1", bucket});
    };
    // As that version wrote it: Redis's time in µs, now.
    stamp("string.format(\"%.0f\", redis.call(\"TIME\")[1] * 1000000)");
    r = c.exchange(ask("a", 1000000, 1000, Host{}));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_TRUE(r->older);
    stamp("\"1000\""); // long ago: its hosts are gone, the key only stayed
    r = c.exchange(ask("a", 1000000, 1000, Host{}));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_FALSE(r->older);
}

TEST_F(FleetScriptTest, ASilentHostsLeaseExpires) {
    Client c(url, std::chrono::milliseconds(1000));
    const uint64_t cir = 8000000, cbs = 10000;
    Host a{0, 0, 0, 2 * cir};
    for (int i = 0; i < 2; ++i) {
        auto r = c.exchange(ask("a", cir, cbs, a, 20000));
        a = {r->rate, r->cap, r->epoch, a.demand};
    }
    EXPECT_EQ(a.rate, cir);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    auto r = c.exchange(ask("b", cir, cbs, Host{0, 0, 0, 2 * cir}, 20000));
    EXPECT_EQ(r->hosts, 1u);
    EXPECT_EQ(r->rate, cir);
    EXPECT_EQ(r->cap, cbs);
}

// Two daemons under one name (docs/fleet.md, "Node names"): the second instance is refused while
// the first's lease is live (told who holds the name; nothing of it counted, so the first's
// lease is untouched), and takes the name over once that lease has expired, at once.
TEST_F(FleetScriptTest, ANameHeldByALiveInstanceIsRefusedAndFreeAfterItsLease) {
    Client c(url, std::chrono::milliseconds(1000));
    const uint64_t cir = 8000000, cbs = 10000, ttl = 100000;
    Host first{0, 0, 0, 2 * cir}, second{0, 0, 0, 2 * cir};
    auto as = [&](const Host &h, const std::string &instance) {
        Request q = ask("n", cir, cbs, h, ttl);
        q.instance = instance;
        auto r = c.exchange(q);
        EXPECT_TRUE(r.has_value()) << r.error();
        return r.value_or(Reply{});
    };
    for (int i = 0; i < 2; ++i) {
        auto r = as(first, "host:1:aa");
        EXPECT_FALSE(r.held);
        EXPECT_EQ(r.holder, "");
        first = {r.rate, r.cap, r.epoch, first.demand};
    }
    EXPECT_EQ(first.rate, cir);
    for (int i = 0; i < 3; ++i) {
        auto r = as(second, "host:2:bb");
        EXPECT_TRUE(r.held);
        EXPECT_EQ(r.holder, "host:1:aa");
        EXPECT_EQ(r.rate, 0u);
        EXPECT_EQ(r.cap, 0u);
        EXPECT_EQ(r.hosts, 1u);
        EXPECT_EQ(r.leased, cir) << "the holder's lease is all that is counted";
        // The holder keeps its name and its lease.
        auto h = as(first, "host:1:aa");
        EXPECT_FALSE(h.held);
        EXPECT_EQ(h.rate, cir);
    }
    // The holder stops exchanging (it died, or restarted as the second): after its lease the
    // name is free, its lease is no longer counted, and the new instance gets all of CIR.
    std::this_thread::sleep_for(std::chrono::microseconds(ttl + 20000));
    auto r = as(second, "host:2:bb");
    EXPECT_FALSE(r.held);
    EXPECT_EQ(r.hosts, 1u);
    EXPECT_EQ(r.rate, cir);
    // Now the first is the one refused.
    r = as(first, "host:1:aa");
    EXPECT_TRUE(r.held);
    EXPECT_EQ(r.holder, "host:2:bb");
}

TEST(FleetClient, UnreachableRedisIsAnErrorNotAHang) {
    auto port = tricolor::test::free_loopback_port();
    Client c(parse_redis_url("redis://127.0.0.1:" + std::to_string(port)).value(),
             std::chrono::milliseconds(200));
    auto t = std::chrono::steady_clock::now();
    auto r = c.exchange(ask("a", 1000, 1000, Host{}));
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().find("cannot connect"), std::string::npos) << r.error();
    EXPECT_LT(std::chrono::steady_clock::now() - t, std::chrono::seconds(2));
}

namespace {

// Not a Redis: answers the first command (SCRIPT LOAD) with @first and every later one with
// @then, raw bytes, on a free loopback port; for what a client must survive. CLUSTER commands
// (the client asks which kind of Redis it is) get @cluster, by default what a Redis without
// cluster support says; INFO gets @info (a Redis 7), ASKING gets OK. "{port}" in a reply is the
// fake's own port.
class FakeRedis {
  public:
    FakeRedis(std::string first, std::string then,
              std::string cluster = "-ERR This instance has cluster support disabled\r\n",
              std::string info = "redis_version:7.0.15")
        : first_(std::move(first)), then_(std::move(then)), cluster_(std::move(cluster)),
          info_(fmt::format("${}\r\n{}\r\n", info.size(), info)) {
        fd_ = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(a);
        if (bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 || listen(fd_, 4) != 0 ||
            getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &len) != 0)
            throw std::runtime_error("fake redis: cannot listen");
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~FakeRedis() {
        stop_ = true;
        shutdown(fd_, SHUT_RDWR);
        close(fd_);
        thread_.join();
    }
    std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
    uint16_t port() const { return port_; }

  private:
    void serve() {
        while (!stop_) {
            int c = accept(fd_, nullptr, nullptr);
            if (c < 0)
                return;
            bool first = true;
            char buf[65536];
            // A command is whatever arrives before the line goes quiet for 20 ms.
            for (;;) {
                pollfd p{c, POLLIN, 0};
                if (poll(&p, 1, 1000) <= 0)
                    break;
                ssize_t n = read(c, buf, sizeof(buf));
                if (n <= 0)
                    break;
                std::string got(buf, static_cast<size_t>(n));
                while (poll(&p, 1, 20) > 0 && (n = read(c, buf, sizeof(buf))) > 0)
                    got.append(buf, static_cast<size_t>(n));
                const bool cluster = got.find("CLUSTER") != std::string::npos;
                const bool info = got.find("INFO") != std::string::npos;
                std::string reply = got.find("ASKING") != std::string::npos ? "+OK\r\n"
                                    : info                                  ? info_
                                    : cluster                               ? cluster_
                                    : first                                 ? first_
                                                                            : then_;
                first = first && (cluster || info);
                for (size_t at; (at = reply.find("{port}")) != std::string::npos;)
                    reply.replace(at, 6, std::to_string(port_));
                if (write(c, reply.data(), reply.size()) < 0)
                    break;
            }
            close(c);
        }
    }
    std::string first_, then_, cluster_, info_;
    int fd_ = -1;
    uint16_t port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

const std::string kSha = "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n";

} // namespace

// A Redis that answers garbage, is too old for scripts, or is no Redis: an error that names
// the problem, never a crash or a lease (the agent then runs its fallback).
TEST(FleetClient, AServerThatAnswersGarbageIsAnErrorThatSaysWhat) {
    struct Case {
        std::string first, then, says;
    };
    const std::vector<Case> cases = {
        {"-ERR unknown command 'SCRIPT'\r\n", "", "unknown command 'SCRIPT'"},
        {"+OK\r\n", "", "the reply is not a string"},
        {"$3\r\nabc\r\n", "", "not a SHA1"},
        {"HTTP/1.1 400 Bad Request\r\n\r\n", "", "Protocol error"},
        {kSha, "*3\r\n:1\r\n:2\r\n:3\r\n", "3 fields, not 13"},
        {kSha, ":42\r\n", "not an array"},
        {kSha,
         "*13\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:0\r\n:8\r\n+x\r\n:10\r\n:0\r\n:0\r\n$"
         "0\r\n\r\n",
         "field 9 of the fleet script's reply is not a count"},
        {kSha,
         "*13\r\n:-1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:0\r\n:8\r\n:9\r\n:10\r\n:0\r\n:0\r\n$"
         "0\r\n\r\n",
         "field 1 of the fleet script's reply is not a count"},
        {kSha,
         "*13\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:0\r\n:8\r\n:9\r\n:10\r\n:0\r\n:0\r\n:0\r\n",
         "names no holder"},
        {kSha, "-NOSCRIPT No matching script\r\n", "NOSCRIPT"},
    };
    for (const auto &k : cases) {
        FakeRedis fake(k.first, k.then);
        Client c(parse_redis_url(fake.url()).value(), std::chrono::milliseconds(500));
        auto r = c.exchange(ask("a", 1000000, 1000, Host{}));
        ASSERT_FALSE(r.has_value()) << k.says;
        EXPECT_NE(r.error().find(k.says), std::string::npos) << r.error();
        EXPECT_FALSE(c.connected()) << "after an error the connection is dropped: " << k.says;
    }
}

// A Redis Cluster's hostile or broken answers: a slot map that is no map, a redirection that
// leads nowhere or in a circle. Each an error naming it, soon, and never a lease.
TEST(FleetClient, ClusterRedirectLoopsAndBrokenSlotMapsAreErrorsThatSayWhat) {
    // One node that says it serves every slot, then sends every exchange to itself.
    const std::string map = "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:{port}\r\n"
                            "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n";
    struct Case {
        std::string then, cluster, says;
    };
    const std::vector<Case> cases = {
        {"-MOVED 1 127.0.0.1:{port}\r\n", map, "still redirected after 5 hops"},
        {"-ASK 1 127.0.0.1:{port}\r\n", map, "still redirected after 5 hops"},
        {"-MOVED 1 nowhere\r\n", map, "a redirection to nowhere"},
        {"-CLUSTERDOWN The cluster is down\r\n", map, "CLUSTERDOWN"},
        {"", "+OK\r\n", "unexpected reply to CLUSTER SLOTS (not an array)"},
        {"", "*1\r\n:5\r\n", "entry 1 is not [first, last, master, ...]"},
        {"", "*1\r\n*3\r\n:9\r\n:3\r\n*2\r\n$1\r\nh\r\n:1\r\n", "slots 9 to 3"},
        {"", "*1\r\n*3\r\n:0\r\n:3\r\n*2\r\n$1\r\nh\r\n:0\r\n", "its master is not"},
        {"", "*0\r\n", "serves no slots"},
        {"", "-LOADING Redis is loading the dataset in memory\r\n", "CLUSTER SLOTS: LOADING"},
        // The policy's slot (11204) on a master of unknown address, the rest elsewhere.
        {"",
         "*2\r\n*3\r\n:10000\r\n:16383\r\n*2\r\n$1\r\n?\r\n:7000\r\n"
         "*3\r\n:0\r\n:9999\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n",
         "no node serves slot 11204"},
    };
    for (const auto &k : cases) {
        FakeRedis fake(kSha, k.then, k.cluster);
        Client c(parse_redis_url(fake.url()).value(), std::chrono::milliseconds(500));
        auto t = std::chrono::steady_clock::now();
        auto r = c.exchange(ask("a", 1000000, 1000, Host{}));
        ASSERT_FALSE(r.has_value()) << k.says;
        EXPECT_NE(r.error().find(k.says), std::string::npos) << r.error();
        EXPECT_LT(std::chrono::steady_clock::now() - t, std::chrono::seconds(2)) << k.says;
        EXPECT_FALSE(c.cluster() && c.connected()) << "a failed exchange reads the map again";
    }
}

// A slot map whose master has no address of its own (nil: the node that answered) and a
// replica: the exchange runs there, and a WAIT answered with anything but a count of replicas
// leaves the lease unreplicated (the host takes no raise from it). Without a replica in the
// map, no WAIT: replicated.
TEST(FleetClient, ClusterNilHostIsTheNodeAskedAndAnUnconfirmedWaitIsNoReplica) {
    const std::string reply = "*13\r\n:100\r\n:50\r\n:1\r\n:1000\r\n:500\r\n:7\r\n:0\r\n:9\r\n:"
                              "100\r\n:100\r\n:0\r\n:0\r\n$"
                              "0\r\n\r\n";
    const std::string master = "*2\r\n$-1\r\n:{port}\r\n";
    {
        FakeRedis fake(kSha, reply,
                       "*1\r\n*4\r\n:0\r\n:16383\r\n" + master + "*2\r\n$1\r\nx\r\n:1\r\n");
        Client c(parse_redis_url(fake.url()).value(), std::chrono::milliseconds(500));
        auto r = c.exchange(ask("a", 1000, 500, Host{}));
        ASSERT_TRUE(r.has_value()) << r.error();
        EXPECT_EQ(r->rate, 100u);
        EXPECT_TRUE(c.cluster());
        EXPECT_EQ(c.node_of("model"), "127.0.0.1:" + std::to_string(fake.port()));
        EXPECT_FALSE(r->replicated);
    }
    {
        FakeRedis fake(kSha, reply, "*1\r\n*3\r\n:0\r\n:16383\r\n" + master);
        Client c(parse_redis_url(fake.url()).value(), std::chrono::milliseconds(500));
        auto r = c.exchange(ask("a", 1000, 500, Host{}));
        ASSERT_TRUE(r.has_value()) << r.error();
        EXPECT_TRUE(r->replicated);
    }
}

// Redis Cluster's slot of a key: the values CLUSTER KEYSLOT gives, the hash tag's rules.
TEST(FleetClient, KeySlotsAreRedisClusters) {
    EXPECT_EQ(key_slot("foo"), 12182);
    EXPECT_EQ(key_slot("bar"), 5061);
    EXPECT_EQ(key_slot("123456789"), 0x31C3 & 16383); // CRC16/XMODEM's check value
    EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
    EXPECT_NE(key_slot("foo{}{bar}"), key_slot("bar"));
    EXPECT_EQ(key_slot("tricolor:{web}:lease"), key_slot("tricolor:{web}:seen"));
}

// A Redis too old for the script (it reads TIME before it writes: effects replication, Redis
// 5.0): said at connection, naming the version; a Redis whose INFO says nothing of a version
// is left to SCRIPT LOAD and the exchange to judge.
TEST(FleetClient, ARedisBefore5IsRefusedNamingItsVersion) {
    {
        FakeRedis fake(kSha, "", "-ERR This instance has cluster support disabled\r\n",
                       "# Server\r\nredis_version:4.0.9\r\nredis_mode:standalone");
        Client c(parse_redis_url(fake.url()).value(), std::chrono::milliseconds(500));
        auto r = c.exchange(ask("a", 1000000, 1000, Host{}));
        ASSERT_FALSE(r.has_value());
        EXPECT_NE(r.error().find("runs Redis 4.0.9: the fleet needs Redis 5.0 or later"),
                  std::string::npos)
            << r.error();
        EXPECT_FALSE(c.connected());
    }
    {
        FakeRedis fake(kSha, "*3\r\n:1\r\n:2\r\n:3\r\n",
                       "-ERR This instance has cluster support disabled\r\n", "# Server");
        Client c(parse_redis_url(fake.url()).value(), std::chrono::milliseconds(500));
        auto r = c.exchange(ask("a", 1000000, 1000, Host{}));
        ASSERT_FALSE(r.has_value());
        EXPECT_NE(r.error().find("3 fields, not 13"), std::string::npos) << r.error();
    }
}

TEST(FleetUrl, Parses) {
    auto u = parse_redis_url("redis://127.0.0.1:6380").value();
    ASSERT_EQ(u.nodes.size(), 1u);
    EXPECT_EQ(u.nodes[0].host, "127.0.0.1");
    EXPECT_EQ(u.nodes[0].port, 6380);
    EXPECT_EQ(parse_redis_url("redis://[2001:db8::1]:7000").value().nodes[0].host, "2001:db8::1");
    EXPECT_EQ(parse_redis_url("redis://cache.example").value().nodes[0].port, 6379);
    // A cluster's nodes to start from.
    auto c = parse_redis_url("redis://198.18.0.1:7000,[2001:db8::2]:7001,cache.example").value();
    ASSERT_EQ(c.nodes.size(), 3u);
    EXPECT_EQ(c.nodes[1].host, "2001:db8::2");
    EXPECT_EQ(c.nodes[2].port, 6379);
    EXPECT_EQ(c.text(), "redis://198.18.0.1:7000,[2001:db8::2]:7001,cache.example:6379");
    for (const char *bad :
         {"127.0.0.1:6379", "http://h:1", "redis://", "redis://h:", "redis://h:0",
          "redis://h:70000", "redis://h:12x", "redis://[2001:db8::1", "redis://u@h:1",
          "redis://h:1,", "redis://,h:1", "redis://h:1,h:1", "redis://h:1,h:x"}) {
        auto r = parse_redis_url(bad);
        EXPECT_FALSE(r.has_value()) << bad;
    }
    EXPECT_EQ(parse_fallback("share"), Fallback::share);
    EXPECT_EQ(parse_fallback("closed"), Fallback::closed);
    EXPECT_EQ(parse_fallback("open"), Fallback::open);
    EXPECT_FALSE(parse_fallback("maybe").has_value());
}

// ---- Redis Cluster: three masters, a replica each, real redis-servers ----------------------

namespace {

class FleetClusterTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!RedisServer::available())
            GTEST_SKIP() << "redis-server is not installed (./tricolor.sh build installs it)";
        ASSERT_TRUE(cluster.start()) << cluster.why();
        url = parse_redis_url(cluster.url()).value();
    }
    std::string addr(int i) {
        return i < 0 ? "none"
                     : cluster.node(i).bind() + ":" + std::to_string(cluster.node(i).port());
    }
    Request ask_for(const std::string &policy, const Host &h) {
        Request q = ask("a", 24000000, 65536, h);
        q.policy = policy;
        return q;
    }
    RedisCluster cluster{3, 1};
    RedisUrl url;
};

} // namespace

// Policies spread over the shards by their hash tag; each exchange runs on its slot's master
// (the keys are there), and a replica holds it (WAIT) before the host may take a raise from it.
TEST_F(FleetClusterTest, PoliciesSpreadOverTheMastersAndEachRunsOnItsSlotsMaster) {
    Client c(url, std::chrono::milliseconds(1000));
    std::set<int> masters;
    for (int i = 0; i < 12; ++i) {
        const std::string policy = "web" + std::to_string(i);
        const std::string key = keys_of(policy)[0];
        auto r = c.exchange(ask_for(policy, Host{0, 0, 0, 1000000}));
        ASSERT_TRUE(r.has_value()) << r.error();
        EXPECT_TRUE(c.cluster());
        EXPECT_TRUE(r->replicated) << policy;
        EXPECT_GT(r->rate, 0u);
        EXPECT_EQ(key_slot(key), cluster.slot(key)) << key;
        int m = cluster.master_of(key);
        EXPECT_EQ(c.node_of(policy), addr(m)) << policy;
        EXPECT_EQ(cluster.node(m).cli({"EXISTS", key}), "1\n") << policy << " on " << addr(m);
        masters.insert(m);
    }
    EXPECT_EQ(masters.size(), 3u) << "twelve policies on every master";
    // A master whose replica is gone: WAIT says nobody took the lease.
    const int m = cluster.master_of(keys_of("web0")[0]), rep = cluster.replica_of(m);
    ASSERT_GE(rep, 0);
    cluster.node(rep).stop();
    auto r = c.exchange(ask_for("web0", Host{0, 0, 0, 1000000}));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_FALSE(r->replicated) << addr(m) << " " << addr(rep) << " " << c.node_of("web0")
                                << cluster.node(m).cli({"INFO", "replication"});
}

// A manual failover (the replica takes over; the old master, now its replica, answers MOVED):
// the next exchange follows the redirection and finds the policy's state there. Then that new
// master is killed: exchanges fail until the old one is promoted back, and run there again, with
// the same state (the same epoch: no "new state" settling).
TEST_F(FleetClusterTest, AFailoverTakesThePolicyWithItsStateToTheReplica) {
    Client c(url, std::chrono::milliseconds(300));
    const std::string policy = "api", key = keys_of(policy)[0];
    Host h{0, 0, 0, 1000000};
    auto r = c.exchange(ask_for(policy, h));
    ASSERT_TRUE(r.has_value()) << r.error();
    const uint64_t epoch = r->epoch;
    h = {r->rate, r->cap, r->epoch, h.demand};
    const int m = cluster.master_of(key), rep = cluster.replica_of(m);
    ASSERT_GE(m, 0);
    ASSERT_GE(rep, 0);
    EXPECT_EQ(c.node_of(policy), addr(m));

    cluster.node(rep).cli({"CLUSTER", "FAILOVER"});
    for (int i = 0; i < 200 && cluster.master_of(key) != rep; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
    ASSERT_EQ(cluster.master_of(key), rep) << "the manual failover did not happen";
    ASSERT_TRUE(cluster.wait_ok(5000));
    r = c.exchange(ask_for(policy, h));
    ASSERT_TRUE(r.has_value()) << "MOVED is followed: " << r.error();
    EXPECT_EQ(r->epoch, epoch) << "the state came over with the replica";
    h = {r->rate, r->cap, r->epoch, h.demand};
    r = c.exchange(ask_for(policy, h));
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ(c.node_of(policy), addr(rep)) << "the slot map was read again";

    cluster.node(rep).stop();
    int failed = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15))
            << "no promotion: " << (r ? "" : r.error());
        r = c.exchange(ask_for(policy, h));
        if (r)
            break;
        failed++;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::printf("the new master died: %d exchanges failed, answered again after %.1f s\n", failed,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_GT(failed, 0);
    EXPECT_EQ(r->epoch, epoch) << "the state is the same";
    EXPECT_EQ(r->hosts, 1u);
    // The node the test asks may learn of the promotion a little after the one the client
    // read its map from.
    for (int i = 0; i < 100 && cluster.master_of(key) != m; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(cluster.master_of(key), m);
}
