// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fleet.cpp: the Redis side of fleet policies (docs/spec.md §10): the exchange script's client and
// the agent that leases tokens for every fleet policy of this host. Design in docs/fleet.md; the
// script is userspace/src/fleet.lua.
#include "tricolor/fleet.hpp"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <iostream>
#include <time.h>

namespace tricolor::fleet {

namespace {
#include "fleet_lua.inc" // const char kLua[]
uint64_t mono_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
} // namespace

const char *const kScript = kLua;

Result<RedisUrl> parse_redis_url(std::string_view text) {
    auto bad = [&](std::string_view why) {
        return std::unexpected(fmt::format("'{}' is not redis://HOST:PORT: {}", text, why));
    };
    constexpr std::string_view scheme = "redis://";
    if (!text.starts_with(scheme))
        return bad("it must start with redis://");
    std::string_view rest = text.substr(scheme.size());
    if (!rest.empty() && rest.back() == '/')
        rest.remove_suffix(1);
    RedisUrl u;
    std::string_view port;
    if (rest.starts_with("[")) {
        auto close = rest.find(']');
        if (close == std::string_view::npos)
            return bad("an IPv6 address needs its closing ]");
        u.host = std::string(rest.substr(1, close - 1));
        rest = rest.substr(close + 1);
        if (!rest.empty()) {
            if (rest[0] != ':')
                return bad("expected :PORT after the address");
            port = rest.substr(1);
            if (port.empty())
                return bad("empty port");
        }
    } else {
        auto colon = rest.find(':');
        u.host = std::string(rest.substr(0, colon));
        if (colon != std::string_view::npos) {
            port = rest.substr(colon + 1);
            if (port.empty())
                return bad("empty port");
        }
    }
    if (u.host.empty())
        return bad("no host");
    if (u.host.find_first_of("/@?# ") != std::string::npos)
        return bad("user names, paths and options are not supported");
    if (!port.empty()) {
        unsigned p = 0;
        auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
        if (ec != std::errc{} || end != port.data() + port.size() || p == 0 || p > 65535)
            return bad(fmt::format("port '{}' is not 1 to 65535", port));
        u.port = static_cast<uint16_t>(p);
    }
    return u;
}

std::optional<Fallback> parse_fallback(std::string_view t) {
    if (t == "share")
        return Fallback::share;
    if (t == "closed")
        return Fallback::closed;
    if (t == "open")
        return Fallback::open;
    return std::nullopt;
}

std::string_view to_string(Fallback f) {
    switch (f) {
    case Fallback::share:
        return "share";
    case Fallback::closed:
        return "closed";
    case Fallback::open:
        return "open";
    }
    return "?";
}

std::vector<std::string> keys_of(std::string_view policy) {
    std::string tag = fmt::format("tricolor:{{{}}}", policy);
    return {tag + ":bucket", tag + ":held", tag + ":seen"};
}

// ---- client -------------------------------------------------------------------------------

Client::Client(RedisUrl url, std::chrono::milliseconds timeout)
    : url_(std::move(url)), timeout_(timeout) {}

Client::~Client() {
    disconnect();
}

void Client::disconnect() {
    if (ctx_)
        redisFree(ctx_);
    ctx_ = nullptr;
}

Result<void> Client::connect() {
    timeval tv{static_cast<time_t>(timeout_.count() / 1000),
               static_cast<suseconds_t>(timeout_.count() % 1000 * 1000)};
    ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
    if (!ctx_ || ctx_->err) {
        std::string why = ctx_ ? ctx_->errstr : "out of memory";
        disconnect();
        return std::unexpected(
            fmt::format("cannot connect to redis://{}:{}: {}", url_.host, url_.port, why));
    }
    redisSetTimeout(ctx_, tv);
    auto *r = static_cast<redisReply *>(redisCommand(ctx_, "SCRIPT LOAD %s", kScript));
    if (!r || r->type != REDIS_REPLY_STRING) {
        std::string why = r && r->type == REDIS_REPLY_ERROR ? r->str : (ctx_->errstr);
        if (r)
            freeReplyObject(r);
        disconnect();
        return std::unexpected(fmt::format("cannot load the fleet script: {}", why));
    }
    sha_.assign(r->str, r->len);
    freeReplyObject(r);
    return {};
}

Result<Reply> Client::exchange(const Request &q) {
    if (!ctx_)
        if (auto c = connect(); !c)
            return std::unexpected(c.error());
    auto keys = keys_of(q.policy);
    std::vector<std::string> args = {"EVALSHA",
                                     sha_,
                                     "3",
                                     keys[0],
                                     keys[1],
                                     keys[2],
                                     q.node,
                                     std::to_string(q.cir),
                                     std::to_string(q.cbs),
                                     std::to_string(q.report),
                                     std::to_string(q.want),
                                     std::to_string(q.ttl_us),
                                     q.reset ? "1" : "0"};
    std::vector<const char *> argv;
    std::vector<size_t> lens;
    for (auto &a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    auto *r = static_cast<redisReply *>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (!r) {
        std::string why = ctx_->errstr;
        disconnect(); // a reply that comes late is never read
        return std::unexpected(fmt::format("redis: {}", why));
    }
    Reply out;
    if (r->type == REDIS_REPLY_ERROR) {
        std::string why(r->str, r->len);
        freeReplyObject(r);
        disconnect(); // NOSCRIPT after a restart: load it again on reconnect
        return std::unexpected(fmt::format("redis: {}", why));
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 8) {
        freeReplyObject(r);
        disconnect();
        return std::unexpected("redis: unexpected reply to the fleet script");
    }
    uint64_t v[8];
    for (size_t i = 0; i < 8; ++i)
        v[i] = r->element[i]->type == REDIS_REPLY_INTEGER
                   ? static_cast<uint64_t>(std::max<long long>(r->element[i]->integer, 0))
                   : 0;
    freeReplyObject(r);
    out = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7] != 0};
    return out;
}

// ---- agent --------------------------------------------------------------------------------

struct Agent::State {
    Policy policy;
    uint64_t unit_per_len = kUnitsPerByte; // units per metered byte (packet)
    uint64_t cbs_units = 0;
    bool started = false;
    uint64_t last_offered = 0;
    uint64_t last_tick_ns = 0;
    uint64_t last_ok_send_ns = 0; // when the last successful exchange was sent
    bool fallback = false;
    bool ever_ok = false;
    bool need_reset = true;
    uint64_t hosts = 1;
    uint64_t fleet_cir = 0; // the fleet's CIR (first writer's)
    Reply last;
    uint64_t exchanges = 0, failures = 0, fallbacks = 0, recoveries = 0, granted_units = 0;
    uint64_t self_granted = 0, revokes = 0;
    bool mismatch = false;
    double demand_bps = 0;
    std::string last_error;
};

Agent::Agent(AgentOptions o, Datapath &dp)
    : o_(std::move(o)), dp_(dp), client_(o_.url, o_.timeout) {
    thread_ = std::thread([this] { run(); });
}

Agent::~Agent() {
    stop_ = true;
    if (thread_.joinable())
        thread_.join();
}

void Agent::log(const std::string &line) {
    std::cerr << "tricolord: fleet: " << line << std::endl;
}

void Agent::set_policies(const std::vector<Policy> &policies) {
    std::lock_guard lock(mu_);
    std::map<std::string, std::unique_ptr<State>> next;
    for (const auto &p : policies) {
        if (!p.fleet)
            continue;
        auto it = states_.find(p.name);
        std::unique_ptr<State> s;
        if (it != states_.end() && it->second->policy.id == p.id)
            s = std::move(it->second);
        else
            s = std::make_unique<State>();
        s->policy = p;
        s->unit_per_len = p.meter.packet_mode ? kUnitsPerPacket : kUnitsPerByte;
        s->cbs_units = p.meter.cbs * s->unit_per_len;
        if (!s->fleet_cir)
            s->fleet_cir = p.meter.cir;
        next[p.name] = std::move(s);
    }
    states_ = std::move(next);
}

void Agent::run() {
    while (!stop_) {
        auto start = std::chrono::steady_clock::now();
        tick();
        auto until = start + o_.period;
        while (!stop_ && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(
                until - std::chrono::steady_clock::now(), std::chrono::milliseconds(10)));
    }
}

void Agent::enter_fallback(State &s, const std::string &name, const std::string &why) {
    // Redis no longer counts our tokens (or never gave any): we may not spend them.
    dp_.fleet_revoke(s.policy.id);
    dp_.fleet_lease(s.policy.id, 0); // what we grant ourselves now is ours
    s.fallback = true;
    s.need_reset = true;
    s.fallbacks++;
    totals_.fallbacks++;
    log(fmt::format("policy '{}': {}: fallback '{}' ({} hosts last seen)", name, why,
                    to_string(o_.fallback), std::max<uint64_t>(s.hosts, 1)));
}

void Agent::tick() {
    std::lock_guard lock(mu_);
    const uint64_t lease_ns = static_cast<uint64_t>(o_.lease.count()) * 1000000;
    // A host revokes its tokens a margin before Redis forgets it: a tenth of the lease covers
    // any difference in clock rates by far.
    const uint64_t revoke_after_ns = lease_ns - lease_ns / 10;
    const uint64_t timeout_ns = static_cast<uint64_t>(o_.timeout.count()) * 1000000;
    for (auto &[name, sp] : states_) {
        State &s = *sp;
        const uint32_t id = s.policy.id;
        const uint64_t now = mono_ns();
        tcm_counters c = dp_.policy_counter(id);
        uint64_t offered = s.policy.meter.packet_mode ? c.packets[0] + c.packets[1] + c.packets[2]
                                                      : c.bytes[0] + c.bytes[1] + c.bytes[2];
        if (!s.started) {
            s.started = true;
            s.last_offered = offered;
            s.last_tick_ns = now;
            s.last_ok_send_ns = now; // the lease clock starts now: nothing is held yet
        }
        const uint64_t dt = std::max<uint64_t>(now - s.last_tick_ns, 1);
        const uint64_t demand = (offered - s.last_offered) * s.unit_per_len; // units in dt
        s.demand_bps = static_cast<double>(demand) / 1e6 * 1e9 / static_cast<double>(dt);
        s.last_offered = offered;
        s.last_tick_ns = now;

        if (s.fallback) {
            // Our own bucket while Redis is away: CIR/N (share), CIR (open) or nothing.
            uint64_t n = std::max<uint64_t>(s.hosts, 1);
            // bit/s * ns = 10^-9 bit, the data path's token (packet/s * ns: 10^-9 packet).
            unsigned __int128 tokens = 0;
            if (o_.fallback == Fallback::share)
                tokens = static_cast<unsigned __int128>(s.fleet_cir) * dt / n;
            else if (o_.fallback == Fallback::open)
                tokens = static_cast<unsigned __int128>(s.fleet_cir) * dt;
            tokens = std::min<unsigned __int128>(tokens, s.cbs_units * kTokensPerUnit);
            dp_.fleet_grant(id, static_cast<uint64_t>(tokens));
            s.self_granted += static_cast<uint64_t>(tokens);
        }

        // The lease: Redis forgets a host a lease after its last exchange ran; the host stops
        // spending a tenth of a lease before that, counted from when its last successful
        // exchange was sent, and early enough that this exchange (bounded by its timeout)
        // cannot end past that point with the tokens still spendable.
        if (!s.fallback && s.ever_ok && now + timeout_ns - s.last_ok_send_ns >= revoke_after_ns)
            enter_fallback(
                s, name,
                fmt::format("no answer from Redis for {} ms", (now - s.last_ok_send_ns) / 1000000));

        FleetLocal local = dp_.fleet_local(id);
        uint64_t held = (local.held + kTokensPerUnit - 1) / kTokensPerUnit; // rounded up
        // Hold about two periods of the current demand: more is returned (revoked), less asked.
        uint64_t period_ns = static_cast<uint64_t>(o_.period.count()) * 1000000;
        uint64_t target =
            static_cast<uint64_t>(static_cast<double>(demand) * 2.0 *
                                  static_cast<double>(period_ns) / static_cast<double>(dt));
        // At most half the fleet's burst: what a host holds when its demand moves away is
        // given up (voided), and the rest of the fleet refills meanwhile.
        target = std::min(target, s.cbs_units / 2);
        bool reset = s.need_reset || s.fallback;
        // After a fallback (or at start) the node's record in Redis is void: it reports all it
        // holds, self-granted tokens included, and the fleet counts them from then on.
        if (!s.fallback && held > 0 && held > 4 * target + s.cbs_units / 16) {
            // Demand fell away: give the tokens back (they leave our holding in Redis).
            dp_.fleet_revoke(id);
            s.revokes++;
            held = 0;
        }
        Request q{s.policy.name,   o_.node, s.policy.meter.cir,
                  s.cbs_units,     held,    target > held ? target - held : 0,
                  lease_ns / 1000, reset};
        const uint64_t sent = mono_ns();
        const uint64_t sent_dp = dp_.now_ns();
        auto r = client_.exchange(q);
        s.exchanges++;
        totals_.exchanges++;
        if (r) {
            s.last = *r;
            s.last_ok_send_ns = sent;
            s.ever_ok = true;
            s.need_reset = false;
            s.hosts = r->hosts;
            s.fleet_cir = r->cir;
            if (r->mismatch && !s.mismatch) {
                log(fmt::format("policy '{}': the fleet bucket has CIR {} bit/s, CBS {} units; "
                                "this host asked for CIR {}, CBS {} units: the fleet's stand",
                                name, r->cir, r->cbs, s.policy.meter.cir, s.cbs_units));
                totals_.mismatches++;
            }
            s.mismatch = r->mismatch;
            // The lease first, then the grant: a packet that sees the grant sees the lease.
            // In the data path's clock, from before the exchange was sent.
            dp_.fleet_lease(id, sent_dp + revoke_after_ns);
            dp_.fleet_grant(id, r->grant * kTokensPerUnit);
            s.granted_units += r->grant;
            if (s.fallback) {
                s.fallback = false;
                s.recoveries++;
                totals_.recoveries++;
                log(fmt::format("policy '{}': Redis answers again: leasing from the fleet", name));
            }
            continue;
        }
        s.failures++;
        totals_.failures++;
        if (s.last_error != r.error())
            log(fmt::format("policy '{}': {}", name, r.error()));
        s.last_error = r.error();
        if (!s.fallback && !s.ever_ok)
            enter_fallback(s, name, "Redis unreachable since start");
    }
    totals_.fallback = std::ranges::any_of(states_, [](auto &kv) { return kv.second->fallback; });
}

Agent::Totals Agent::totals() const {
    std::lock_guard lock(mu_);
    return totals_;
}

nlohmann::json Agent::policy_status(const std::string &name) const {
    std::lock_guard lock(mu_);
    auto it = states_.find(name);
    if (it == states_.end())
        return nullptr;
    const State &s = *it->second;
    FleetLocal local = dp_.fleet_local(s.policy.id);
    double unit_bits = s.policy.meter.packet_mode ? 1e-6 : 1e-6; // units are 10^-6 bit/packet
    return {{"mode", s.fallback ? fmt::format("fallback-{}", to_string(o_.fallback)) : "fleet"},
            {"hosts_seen", s.hosts},
            {"fleet_cir", s.fleet_cir},
            {"fleet_unleased", static_cast<double>(s.last.tokens) * unit_bits},
            {"fleet_held", static_cast<double>(s.last.out) * unit_bits},
            {"local_held", static_cast<double>(local.held) * 1e-9},
            {"local_demand", s.demand_bps},
            {"local_share",
             s.fleet_cir ? std::min(1.0, s.demand_bps / static_cast<double>(s.fleet_cir)) : 0.0},
            {"granted", static_cast<double>(s.granted_units) * unit_bits},
            {"spilled", static_cast<double>(local.spilled) * 1e-9},
            {"exchanges", s.exchanges},
            {"failures", s.failures},
            {"fallbacks", s.fallbacks},
            {"recoveries", s.recoveries},
            {"returns", s.revokes},
            {"parameters_differ", s.mismatch},
            {"last_error", s.last_error}};
}

nlohmann::json Agent::status() const {
    Totals t = totals();
    nlohmann::json j = {{"redis", fmt::format("redis://{}:{}", o_.url.host, o_.url.port)},
                        {"node", o_.node},
                        {"fallback", std::string(to_string(o_.fallback))},
                        {"in_fallback", t.fallback},
                        {"exchanges", t.exchanges},
                        {"failures", t.failures},
                        {"fallbacks", t.fallbacks},
                        {"recoveries", t.recoveries},
                        {"parameter_mismatches", t.mismatches}};
    return j;
}

} // namespace tricolor::fleet
