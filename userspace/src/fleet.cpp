// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fleet.cpp: the Redis side of fleet policies (docs/spec.md §10): the exchange script's client and
// the agent that leases tokens for every fleet policy of this host. Design in docs/fleet.md; the
// script is userspace/src/fleet.lua.
#include "tricolor/fleet.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iostream>
#include <time.h>
#include <unistd.h>

namespace tricolor::fleet {

namespace {
uint64_t mono_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
} // namespace

const std::string &instance_id() {
    // HOST:PID:RANDOM: the host and pid tell an operator which daemon it is; 64 random bits
    // make it unique however many daemons share a host name and pid namespace (clones, labs).
    static const std::string id = [] {
        char host[256] = {};
        gethostname(host, sizeof(host) - 1);
        std::string h = host;
        for (char &c : h)
            if (c <= ' ' || c == ':')
                c = '_';
        uint64_t r = 0;
        std::ifstream("/dev/urandom", std::ios::binary).read(reinterpret_cast<char *>(&r), 8);
        if (!r) // no /dev/urandom: the clock, unique enough between two starts
            r = mono_ns() ^ (static_cast<uint64_t>(getpid()) << 40);
        return fmt::format("{}:{}:{:016x}", h.empty() ? "?" : h, getpid(), r);
    }();
    return id;
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
    // ":lease"/":hosts", not the token leases' ":bucket"/":held" of before: a daemon of that
    // version finds no state of this one (docs/fleet.md, "Redis keys"); ":bucket" is passed
    // to be read only, to tell that hosts of that version are about.
    return {tag + ":lease", tag + ":hosts", tag + ":seen", tag + ":bucket"};
}

// ---- agent --------------------------------------------------------------------------------

// What a policy offered lately (all colours): over the last period when it holds enough packets
// to say (a burst that starts, or one that stops, shows at the next exchange), else over as
// many periods back as it takes, up to kPeriods: at a few packets a period, one more or one
// fewer would move a one-period figure by half. (When it looks back that far, the last two
// periods bound it: a sender that stops is not still seen sending half a second later.)
class Offers {
  public:
    uint64_t rate(uint64_t now_ns, uint64_t packets, uint64_t bits) {
        ring_[next_ % kPeriods] = {now_ns, packets, bits};
        ++next_;
        const Mark &cur = ring_[(next_ - 1) % kPeriods];
        uint64_t out = 0, used = 0;
        for (uint64_t back = 1; back < next_ && back < kPeriods; ++back) {
            const Mark &then = ring_[(next_ - 1 - back) % kPeriods];
            out = per_s(cur.bits - then.bits, cur.ns - then.ns);
            used = back;
            if (cur.packets - then.packets >= kEnoughPackets)
                break;
        }
        if (used > 2) {
            // Looked back past the last two periods: no more than what they held, and one
            // packet, would send at that size: a sender that stopped is at nothing within two
            // periods, not after the whole look back.
            const Mark &then = ring_[(next_ - 1 - used) % kPeriods];
            const Mark &two = ring_[(next_ - 3) % kPeriods];
            uint64_t packets = cur.packets - then.packets;
            uint64_t size = packets ? (cur.bits - then.bits) / packets : 0;
            out = std::min(out, per_s((cur.packets - two.packets + 1) * size, cur.ns - two.ns));
        }
        return out;
    }

    uint64_t last_ns() const { return next_ ? ring_[(next_ - 1) % kPeriods].ns : 0; }

  private:
    static uint64_t per_s(uint64_t bits, uint64_t ns) {
        return static_cast<uint64_t>(static_cast<unsigned __int128>(bits) * 1000000000 /
                                     std::max<uint64_t>(ns, 1));
    }
    static constexpr uint64_t kPeriods = 11, kEnoughPackets = 16;
    struct Mark {
        uint64_t ns = 0, packets = 0, bits = 0;
    };
    Mark ring_[kPeriods];
    uint64_t next_ = 0;
};

struct Agent::State {
    Policy policy;
    uint64_t tokens_per_len = TCM_TOKENS_PER_BYTE; // data-path tokens per byte (packet)
    bool started = false;
    uint64_t last_ok_send_ns = 0; // when the last successful exchange was sent
    bool fallback = false;
    bool ever_ok = false;
    uint64_t hosts = 1;
    uint64_t fleet_cir = 0; // the fleet's CIR and CBS (first writer's)
    uint64_t fleet_cbs = 0;
    // The lease this host runs (what it reports): Redis's, or its fallback's (epoch 0).
    uint64_t rate = 0, cap = 0, epoch = 0;
    uint64_t until_dp = 0; // its deadline in the data path (0: none, a fallback's)
    FleetLease lease(uint64_t until_ns) const { return {rate, cap * tokens_per_len, until_ns}; }
    Reply last;
    uint64_t exchanges = 0, failures = 0, fallbacks = 0, recoveries = 0;
    uint64_t unreplicated = 0; // replies no replica confirmed (Redis Cluster)
    bool older = false;        // hosts of the token-grant version seen within a lease
    bool mismatch = false;
    uint64_t due_ns = 0; // the next exchange
    Offers offers;
    uint64_t demand = 0; // bit/s (packet/s) offered lately, red too: what the host would send
    std::string last_error;
    std::string held_by; // the instance that holds our node name while Redis refuses us
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
        s->tokens_per_len = p.meter.packet_mode ? TCM_TOKENS_PER_PACKET : TCM_TOKENS_PER_BYTE;
        if (!s->fleet_cir) {
            s->fleet_cir = p.meter.cir;
            s->fleet_cbs = p.meter.cbs;
        }
        next[p.name] = std::move(s);
    }
    states_ = std::move(next);
}

void Agent::run() {
    while (!stop_) {
        uint64_t due = tick();
        // Until the policy due first, at most a period, in steps short enough to stop soon.
        while (!stop_ && mono_ns() < due)
            std::this_thread::sleep_for(
                std::chrono::nanoseconds(std::min<uint64_t>(due - mono_ns(), 10000000)));
    }
}

Fallback Agent::fallback_of(const State &s) const {
    // Refused our name last: the holder counts as the name's one host and may run its own
    // fallback; ours on top of it would pass the bound. Closed until the name is ours.
    return s.held_by.empty() ? o_.fallback : Fallback::closed;
}

void Agent::enter_fallback(State &s, const std::string &name, const std::string &why) {
    // Redis no longer counts our lease (or never gave one): a lease of our own, without a
    // deadline: CIR/N (share), CIR (open) or nothing (closed, which also empties C).
    uint64_t n = std::max<uint64_t>(s.hosts, 1);
    const Fallback fb = fallback_of(s);
    s.rate = fb == Fallback::share ? s.fleet_cir / n : fb == Fallback::open ? s.fleet_cir : 0;
    // share: CBS/N of the burst too, so that the fallback leases the hosts report when Redis
    // returns sum to CBS and nobody's cap has to wait for the others' to shrink.
    s.cap = fb == Fallback::closed ? 0 : fb == Fallback::share ? s.fleet_cbs / n : s.fleet_cbs;
    s.epoch = 0;
    s.until_dp = 0;
    dp_.fleet_set_lease(s.policy.id, s.lease(0));
    s.fallback = true;
    s.fallbacks++;
    totals_.fallbacks++;
    log(fmt::format("policy '{}': {}: fallback '{}' ({} hosts last seen{})", name, why,
                    to_string(fb), n,
                    s.held_by.empty() ? "" : "; closed: our node name was held by another"));
}

std::optional<Reply> Agent::exchange(State &s, const std::string &name, uint64_t lease_ns,
                                     uint64_t revoke_after_ns, uint64_t period_ns) {
    Request q;
    q.policy = s.policy.name;
    q.node = o_.node;
    q.cir = s.policy.meter.cir;
    q.cbs = s.policy.meter.cbs;
    q.run_rate = s.rate;
    q.run_cap = s.cap;
    q.run_epoch = s.epoch;
    q.demand = s.demand;
    q.ttl_us = lease_ns / 1000;
    q.settle_us = 3 * period_ns / 1000;
    q.level_us = period_ns / 1000;
    const uint64_t sent = mono_ns();
    const uint64_t sent_dp = dp_.now_ns();
    auto r = client_.exchange(q);
    s.exchanges++;
    totals_.exchanges++;
    if (!r) {
        s.failures++;
        totals_.failures++;
        if (s.last_error != r.error())
            log(fmt::format("policy '{}': {}", name, r.error()));
        s.last_error = r.error();
        if (!s.fallback && !s.ever_ok)
            enter_fallback(s, name, "Redis unreachable since start");
        return std::nullopt;
    }
    s.last = *r;
    s.ever_ok = true;
    s.hosts = r->hosts;
    s.fleet_cir = r->cir;
    s.fleet_cbs = r->cbs;
    if (r->mismatch && !s.mismatch) {
        log(fmt::format("policy '{}': the fleet bucket has CIR {}, CBS {}; this host "
                        "asked for CIR {}, CBS {}: the fleet's stand",
                        name, r->cir, r->cbs, s.policy.meter.cir, s.policy.meter.cbs));
        totals_.mismatches++;
    }
    s.mismatch = r->mismatch;
    if (r->older && !s.older)
        log(fmt::format("policy '{}': hosts of an older tricolor (token grants, key "
                        "tricolor:{{{}}}:bucket) run this fleet policy too: each version counts "
                        "only its own hosts, so together they may pass CIR; upgrade every host",
                        name, name));
    s.older = r->older;
    if (r->held) {
        // Another live daemon holds our node name: Redis counts one lease per name, so running
        // any lease here (the name's, or a fallback's) would pass the fleet's bound. Nothing,
        // until its lease has expired (it stopped, or it was us before a restart).
        s.last_ok_send_ns = sent; // Redis answers: no fallback for want of it
        if (s.held_by.empty()) {
            totals_.collisions++;
            log(fmt::format("policy '{}': the fleet node name '{}' is held by another live "
                            "daemon (instance {}; this one is {}): running nothing of the "
                            "policy's lease until the name is free. Give each host a name of "
                            "its own (--fleet-node)",
                            name, o_.node, r->holder, instance_id()));
        }
        s.held_by = r->holder;
        s.rate = s.cap = s.epoch = s.until_dp = 0;
        dp_.fleet_set_lease(s.policy.id, s.lease(0));
        s.fallback = false;
        return *r;
    }
    if (!s.held_by.empty()) {
        log(fmt::format("policy '{}': the fleet node name '{}' is this daemon's now ({} held it)",
                        name, o_.node, s.held_by));
        s.held_by.clear();
    }
    if (!r->replicated) {
        // A lease no replica holds yet could be lost to a failover while this host runs it,
        // and the new master would give it to others: take no raise from it and renew nothing
        // (Redis counts the larger of what it gave and what the host runs, so running less, to
        // the deadline of a lease a replica did hold, is always safe). On a fallback: stay on it.
        if (!s.unreplicated++)
            log(fmt::format("policy '{}': no replica of {} confirmed the lease in time: no "
                            "raise and no renewal until one does",
                            name, client_.node_of(name)));
        if (s.fallback)
            return *r;
    } else {
        // Until a tenth of a lease before Redis forgets us, on the data path's clock, counted
        // from before the exchange was sent.
        s.last_ok_send_ns = sent;
        s.until_dp = sent_dp + revoke_after_ns;
    }
    s.rate = r->replicated ? r->rate : std::min(r->rate, s.rate);
    s.cap = r->replicated ? r->cap : std::min(r->cap, s.cap);
    s.epoch = r->epoch;
    dp_.fleet_set_lease(s.policy.id, s.lease(s.until_dp));
    if (s.fallback) {
        s.fallback = false;
        s.recoveries++;
        totals_.recoveries++;
        log(fmt::format("policy '{}': Redis answers again: leasing from the fleet", name));
    }
    return *r;
}

uint64_t Agent::tick() {
    std::lock_guard lock(mu_);
    const uint64_t lease_ns = static_cast<uint64_t>(o_.lease.count()) * 1000000;
    // A host stops running its lease a margin before Redis forgets it: a tenth of the lease
    // covers any difference in clock rates by far.
    const uint64_t revoke_after_ns = lease_ns - lease_ns / 10;
    const uint64_t timeout_ns = static_cast<uint64_t>(o_.timeout.count()) * 1000000;
    const uint64_t period_ns = static_cast<uint64_t>(o_.period.count()) * 1000000;
    const uint64_t start = mono_ns();
    uint64_t next_due = start + period_ns;
    for (auto &[name, sp] : states_) {
        State &s = *sp;
        const uint32_t id = s.policy.id;
        const uint64_t now = mono_ns();
        if (s.due_ns > start) {
            next_due = std::min(next_due, s.due_ns);
            continue;
        }
        tcm_counters c = dp_.policy_counter(id);
        const uint64_t packets = c.packets[0] + c.packets[1] + c.packets[2];
        const uint64_t bits =
            s.policy.meter.packet_mode ? packets : 8 * (c.bytes[0] + c.bytes[1] + c.bytes[2]);
        if (!s.started) {
            s.started = true;
            s.last_ok_send_ns = now; // the lease clock starts now: nothing is held yet
        }
        // A period or so apart, however often the policy exchanges (sooner while it waits
        // for others to give back rate).
        if (now - s.offers.last_ns() >= period_ns - period_ns / 4)
            s.demand = s.offers.rate(now, packets, bits);

        // The lease: Redis forgets a host a lease after its last exchange ran; the host stops
        // a tenth of a lease before that, counted from when its last successful exchange was
        // sent, and early enough that this exchange (bounded by its timeout) cannot end past
        // that point with the lease still running. The data path also stops on its own.
        if (!s.fallback && s.ever_ok && now + timeout_ns - s.last_ok_send_ns >= revoke_after_ns)
            enter_fallback(
                s, name,
                fmt::format("no answer from Redis for {} ms", (now - s.last_ok_send_ns) / 1000000));

        s.due_ns = now + period_ns;
        // A second exchange at once when this one lowered the lease, so that Redis learns at
        // once what it may give others (it counts the old lease until then); the next one
        // sooner while the lease is below the fair share, waiting for others to give back.
        for (int round = 0; round < 2; ++round) {
            const uint64_t old_rate = s.rate, old_cap = s.cap;
            auto r = exchange(s, name, lease_ns, revoke_after_ns, period_ns);
            if (!r)
                break;
            const uint64_t slack = s.fleet_cir / 64;
            if (r->rate + slack < r->fair)
                s.due_ns = now + period_ns / 5;
            if (!(s.rate + slack < old_rate || s.cap < old_cap))
                break;
        }
        next_due = std::min(next_due, s.due_ns);
    }
    totals_.fallback = std::ranges::any_of(states_, [](auto &kv) { return kv.second->fallback; });
    totals_.held_by.clear();
    for (const auto &[name, sp] : states_)
        if (!sp->held_by.empty())
            totals_.held_by = sp->held_by;
    return next_due;
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
    // Bits (packets): a data-path token is 10^-9 bit (packet).
    auto cir = static_cast<double>(s.fleet_cir);
    const std::string mode = s.fallback ? fmt::format("fallback-{}", to_string(fallback_of(s)))
                             : !s.held_by.empty() ? "name-held"
                             : !s.ever_ok         ? "joining" // no answer from Redis yet
                                                  : "fleet";
    return {{"mode", mode},
            {"name_held_by", s.held_by},
            {"hosts_seen", s.hosts},
            {"fleet_cir", s.fleet_cir},
            {"fleet_cbs", s.fleet_cbs},
            {"lease_rate", s.rate},
            {"lease_cap", s.cap},
            {"fair_share", s.last.fair},
            {"fleet_leased", s.last.leased},
            {"local_held", static_cast<double>(local.held) * 1e-9},
            {"local_demand", s.demand},
            {"local_share", cir > 0 ? static_cast<double>(s.rate) / cir : 0.0},
            {"spilled", static_cast<double>(local.spilled) * 1e-9},
            {"exchanges", s.exchanges},
            {"failures", s.failures},
            {"redis_node", client_.node_of(name)},
            {"unreplicated", s.unreplicated},
            {"fallbacks", s.fallbacks},
            {"recoveries", s.recoveries},
            {"parameters_differ", s.mismatch},
            {"older_version_hosts", s.older},
            {"last_error", s.last_error}};
}

nlohmann::json Agent::status() const {
    Totals t = totals();
    bool cluster = false;
    {
        std::lock_guard lock(mu_);
        cluster = client_.cluster();
    }
    nlohmann::json j = {{"redis", o_.url.text()},
                        {"redis_cluster", cluster},
                        {"node", o_.node},
                        {"instance", instance_id()},
                        {"name_held_by", t.held_by},
                        {"name_collisions", t.collisions},
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
