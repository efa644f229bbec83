// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// fleet_redis.cpp: the fleet's Redis client (docs/fleet.md, "Redis Cluster"): one synchronous
// exchange of the fleet script at a time, to one Redis or to the master of the policy's slot in
// a Redis Cluster. hiredis speaks the protocol; the cluster's part (slots, redirections, which
// node to ask) is here, since hiredis has none and Debian packages no cluster client for C.
#include "tricolor/fleet.hpp"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>

namespace tricolor::fleet {

namespace {
#include "fleet_lua.inc" // const char kLua[]

// A redirection followed at most this often within one exchange: a slot moves once per
// resharding step or failover; more hops than this is nodes that disagree about who serves it.
constexpr int kHops = 5;
constexpr std::chrono::seconds kMapAge{5};

std::string reply_text(const redisReply *r) {
    return std::string(r->str, r->len);
}

struct Freed {
    void operator()(redisReply *r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, Freed>;

// A port, 1 to 65535, the whole of @text.
std::optional<uint16_t> parse_port(std::string_view text) {
    unsigned p = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), p);
    if (ec != std::errc{} || end != text.data() + text.size() || p == 0 || p > 65535)
        return std::nullopt;
    return static_cast<uint16_t>(p);
}

// "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381" (the address may be [IPv6]:port,
// or ":port" for the node's own unknown address, which the asking side fills in).
std::optional<RedisNode> redirect_target(std::string_view e, const RedisNode &from) {
    auto sp = e.rfind(' ');
    auto colon = e.rfind(':');
    if (sp == std::string_view::npos || colon == std::string_view::npos || colon < sp)
        return std::nullopt;
    RedisNode n;
    n.host = std::string(e.substr(sp + 1, colon - sp - 1));
    if (n.host.size() >= 2 && n.host.front() == '[' && n.host.back() == ']')
        n.host = n.host.substr(1, n.host.size() - 2);
    if (n.host.empty())
        n.host = from.host;
    auto port = parse_port(e.substr(colon + 1));
    if (!port)
        return std::nullopt;
    n.port = *port;
    return n;
}

} // namespace

const char *const kScript = kLua;

std::string RedisNode::text() const {
    return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                               : fmt::format("{}:{}", host, port);
}

std::string RedisUrl::text() const {
    std::string out = "redis://";
    for (size_t i = 0; i < nodes.size(); ++i)
        out += (i ? "," : "") + nodes[i].text();
    return out;
}

Result<RedisUrl> parse_redis_url(std::string_view text) {
    auto bad = [&](std::string_view why) {
        return std::unexpected(
            fmt::format("'{}' is not redis://HOST:PORT[,HOST:PORT...]: {}", text, why));
    };
    constexpr std::string_view scheme = "redis://";
    if (!text.starts_with(scheme))
        return bad("it must start with redis://");
    std::string_view all = text.substr(scheme.size());
    if (!all.empty() && all.back() == '/')
        all.remove_suffix(1);
    RedisUrl u;
    for (;;) {
        auto comma = all.find(',');
        std::string_view rest = all.substr(0, comma);
        RedisNode n;
        std::string_view port;
        if (rest.starts_with("[")) {
            auto close = rest.find(']');
            if (close == std::string_view::npos)
                return bad("an IPv6 address needs its closing ]");
            n.host = std::string(rest.substr(1, close - 1));
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
            n.host = std::string(rest.substr(0, colon));
            if (colon != std::string_view::npos) {
                port = rest.substr(colon + 1);
                if (port.empty())
                    return bad("empty port");
            }
        }
        if (n.host.empty())
            return bad("no host");
        if (n.host.find_first_of("/@?# ") != std::string::npos)
            return bad("user names, paths and options are not supported");
        if (!port.empty()) {
            auto p = parse_port(port);
            if (!p)
                return bad(fmt::format("port '{}' is not 1 to 65535", port));
            n.port = *p;
        }
        if (std::ranges::find(u.nodes, n) != u.nodes.end())
            return bad(fmt::format("{} is named twice", n.text()));
        u.nodes.push_back(std::move(n));
        if (comma == std::string_view::npos)
            break;
        all = all.substr(comma + 1);
    }
    return u;
}

uint16_t key_slot(std::string_view key) {
    // Only the hash tag counts: the part between the first { and the next }, when not empty.
    if (auto open = key.find('{'); open != std::string_view::npos) {
        auto close = key.find('}', open + 1);
        if (close != std::string_view::npos && close > open + 1)
            key = key.substr(open + 1, close - open - 1);
    }
    uint16_t crc = 0; // CRC16-CCITT (XMODEM): polynomial 0x1021, initial 0, as Redis Cluster
    for (unsigned char c : key) {
        crc ^= static_cast<uint16_t>(c << 8);
        for (int i = 0; i < 8; ++i)
            crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                 : static_cast<uint16_t>(crc << 1);
    }
    return crc & 16383;
}

// ---- client -------------------------------------------------------------------------------

struct Client::Conn {
    redisContext *ctx = nullptr;
    std::string sha; // the script's, loaded on this node
    ~Conn() {
        if (ctx)
            redisFree(ctx);
    }
};

Client::Client(RedisUrl url, std::chrono::milliseconds timeout)
    : url_(std::move(url)), timeout_(timeout) {}

Client::~Client() = default;

void Client::disconnect() {
    conns_.clear();
    mode_ = Mode::unknown;
}

void Client::drop(const RedisNode &n) {
    conns_.erase(n);
}

Result<Client::Conn *> Client::conn(const RedisNode &n, bool script) {
    auto it = conns_.find(n);
    if (it == conns_.end()) {
        timeval tv{static_cast<time_t>(timeout_.count() / 1000),
                   static_cast<suseconds_t>(timeout_.count() % 1000 * 1000)};
        auto c = std::make_unique<Conn>();
        c->ctx = redisConnectWithTimeout(n.host.c_str(), n.port, tv);
        if (!c->ctx || c->ctx->err)
            return std::unexpected(fmt::format("cannot connect to redis://{}: {}", n.text(),
                                               c->ctx ? c->ctx->errstr : "out of memory"));
        redisSetTimeout(c->ctx, tv);
        it = conns_.emplace(n, std::move(c)).first;
    }
    Conn *c = it->second.get();
    if (!script || !c->sha.empty())
        return c;
    // The script reads TIME before it writes: Redis replicates a script's effects, not the
    // script, by default from 5.0 on; before that it refuses those writes. Said plainly here
    // rather than as the script's error at the first exchange.
    ReplyPtr info(static_cast<redisReply *>(redisCommand(c->ctx, "INFO server")));
    if (!info) {
        std::string why = c->ctx->errstr;
        drop(n);
        return std::unexpected(fmt::format("redis://{}: {}", n.text(), why));
    }
    if (info->type == REDIS_REPLY_STRING) {
        std::string text = reply_text(info.get());
        if (auto at = text.find("redis_version:"); at != std::string::npos) {
            unsigned major = 0;
            std::from_chars(text.data() + at + 14, text.data() + text.size(), major);
            if (major < 5) {
                std::string version =
                    text.substr(at + 14, text.find_first_of("\r\n", at) - at - 14);
                drop(n);
                return std::unexpected(
                    fmt::format("redis://{} runs Redis {}: the fleet needs Redis 5.0 or later",
                                n.text(), version));
            }
        }
    }
    ReplyPtr r(static_cast<redisReply *>(redisCommand(c->ctx, "SCRIPT LOAD %s", kScript)));
    // A SHA1 in 40 hex digits, or this is no Redis we can use: an error (Redis before 2.6 has
    // no scripts: "unknown command"), a reply of another kind, or no Redis protocol at all.
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
        std::string why = !r                              ? std::string(c->ctx->errstr)
                          : r->type == REDIS_REPLY_ERROR  ? reply_text(r.get())
                          : r->type == REDIS_REPLY_STRING ? "the reply is not a SHA1"
                                                          : "the reply is not a string";
        drop(n);
        return std::unexpected(
            fmt::format("cannot load the fleet script into redis://{}: {} (Redis 2.6 or later?)",
                        n.text(), why));
    }
    c->sha = reply_text(r.get());
    return c;
}

// CLUSTER SLOTS: [[first, last, [host, port, id, ...], replicas...], ...].
Result<void> Client::read_slots(Conn &c, const RedisNode &from) {
    ReplyPtr r(static_cast<redisReply *>(redisCommand(c.ctx, "CLUSTER SLOTS")));
    if (!r)
        return std::unexpected(fmt::format("redis://{}: {}", from.text(), c.ctx->errstr));
    if (r->type == REDIS_REPLY_ERROR) {
        // "ERR This instance has cluster support disabled" (or, before Redis 3, no CLUSTER
        // command at all): one Redis. Any other error (LOADING after a restart, NOPERM, BUSY)
        // says nothing of the kind: ask another node.
        std::string why = reply_text(r.get());
        if (why.find("cluster support disabled") == std::string::npos &&
            why.find("unknown command") == std::string::npos)
            return std::unexpected(fmt::format("redis://{}: CLUSTER SLOTS: {}", from.text(), why));
        mode_ = Mode::single;
        single_ = from;
        ranges_.clear();
        std::erase_if(conns_, [&](const auto &kv) { return kv.first != from; });
        return {};
    }
    auto garbage = [&](std::string_view why) {
        return std::unexpected(
            fmt::format("redis://{}: unexpected reply to CLUSTER SLOTS ({})", from.text(), why));
    };
    if (r->type != REDIS_REPLY_ARRAY)
        return garbage("not an array");
    std::vector<Range> ranges;
    for (size_t i = 0; i < r->elements; ++i) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER)
            return garbage(fmt::format("entry {} is not [first, last, master, ...]", i + 1));
        long long first = e->element[0]->integer, last = e->element[1]->integer;
        if (first < 0 || last < first || last > 16383)
            return garbage(fmt::format("entry {}: slots {} to {}", i + 1, first, last));
        const redisReply *m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            (m->element[0]->type != REDIS_REPLY_STRING && m->element[0]->type != REDIS_REPLY_NIL) ||
            m->element[1]->type != REDIS_REPLY_INTEGER || m->element[1]->integer <= 0 ||
            m->element[1]->integer > 65535)
            return garbage(fmt::format("entry {}: its master is not [host, port, ...]", i + 1));
        Range g;
        g.first = static_cast<uint16_t>(first);
        g.last = static_cast<uint16_t>(last);
        // An empty or nil host: the node that answered (cluster-preferred-endpoint-type
        // unknown-endpoint); "?": a master of unknown address, whose slots no exchange can
        // reach (they are left out: "no node serves slot N").
        g.master.host = m->element[0]->type == REDIS_REPLY_NIL ? "" : reply_text(m->element[0]);
        if (g.master.host == "?")
            continue;
        if (g.master.host.empty())
            g.master.host = from.host;
        g.master.port = static_cast<uint16_t>(m->element[1]->integer);
        g.replicas = e->elements - 3;
        ranges.push_back(std::move(g));
    }
    if (ranges.empty())
        return std::unexpected(
            fmt::format("redis://{}: a Redis Cluster that serves no slots yet", from.text()));
    mode_ = Mode::cluster;
    ranges_ = std::move(ranges);
    mapped_at_ = std::chrono::steady_clock::now();
    // Connections to nodes that serve nothing now (a failed-over master, a redirection's
    // target) go: kept, they would only accumulate.
    std::erase_if(conns_, [&](const auto &kv) {
        return kv.first != from &&
               std::ranges::none_of(ranges_, [&](const Range &g) { return g.master == kv.first; });
    });
    return {};
}

// Which kind of Redis, and in a cluster who serves what: asked of a node we hold a connection
// to, else of the URL's nodes, else of the nodes of the last slot map, the first that answers.
// Each node once; and after a discovery that found no node, none again for a timeout's length
// (the exchanges of the other policies in the same round fail at once, not a timeout each).
Result<void> Client::discover() {
    const auto now = std::chrono::steady_clock::now();
    if (!undiscovered_.empty() && now - undiscovered_at_ < timeout_)
        return std::unexpected(undiscovered_);
    std::vector<RedisNode> ask;
    auto add = [&](const RedisNode &n) {
        if (std::ranges::find(ask, n) == ask.end())
            ask.push_back(n);
    };
    for (auto &[n, c] : conns_)
        add(n);
    for (const auto &n : url_.nodes)
        add(n);
    for (const auto &g : ranges_)
        add(g.master);
    std::string why;
    undiscovered_.clear();
    for (const auto &n : ask) {
        auto c = conn(n, false);
        if (!c) {
            why = c.error();
            continue;
        }
        if (auto s = read_slots(**c, n); !s) {
            why = s.error();
            drop(n);
            continue;
        }
        return {};
    }
    mode_ = Mode::unknown;
    undiscovered_ = why;
    undiscovered_at_ = std::chrono::steady_clock::now();
    return std::unexpected(why);
}

const Client::Range *Client::range_of(uint16_t slot) const {
    for (const auto &g : ranges_)
        if (slot >= g.first && slot <= g.last)
            return &g;
    return nullptr;
}

std::string Client::node_of(std::string_view policy) const {
    if (mode_ == Mode::single)
        return single_.text();
    if (mode_ == Mode::cluster)
        if (const Range *g = range_of(key_slot(keys_of(policy)[0])))
            return g->master.text();
    return "";
}

Result<Reply> Client::exchange(const Request &q) {
    // A map read again now and then: replicas come and go (and a master's replica is listed
    // only once it has synced) without any redirection telling.
    if (mode_ == Mode::cluster && std::chrono::steady_clock::now() - mapped_at_ > kMapAge)
        mode_ = Mode::unknown;
    if (mode_ == Mode::unknown)
        if (auto d = discover(); !d)
            return std::unexpected(d.error());
    auto keys = keys_of(q.policy);
    const uint16_t slot = key_slot(keys[0]);
    RedisNode target = single_;
    size_t replicas = 0;
    if (mode_ == Mode::cluster) {
        const Range *g = range_of(slot);
        if (!g) {
            mode_ = Mode::unknown; // read the map again next time
            return std::unexpected(
                fmt::format("redis cluster: no node serves slot {} (of '{}')", slot, keys[0]));
        }
        target = g->master;
        replicas = g->replicas;
    }
    // Any failure below: this node's connection goes (a late reply is never read), and in a
    // cluster the slot map is read again before the next exchange (a failover, a reshard).
    auto fail = [&](const RedisNode &n, std::string why) -> Result<Reply> {
        drop(n);
        mode_ = Mode::unknown;
        return std::unexpected(std::move(why));
    };
    bool asking = false;
    std::string last_redirect;
    for (int hop = 0; hop <= kHops; ++hop) {
        auto c = conn(target, true);
        if (!c)
            return fail(target, c.error());
        redisContext *ctx = (*c)->ctx;
        if (asking) {
            ReplyPtr a(static_cast<redisReply *>(redisCommand(ctx, "ASKING")));
            if (!a || a->type == REDIS_REPLY_ERROR)
                return fail(target, fmt::format("redis://{}: ASKING: {}", target.text(),
                                                a ? reply_text(a.get()) : ctx->errstr));
        }
        std::vector<std::string> args = {"EVALSHA",
                                         (*c)->sha,
                                         "4",
                                         keys[0],
                                         keys[1],
                                         keys[2],
                                         keys[3],
                                         q.node,
                                         std::to_string(q.cir),
                                         std::to_string(q.cbs),
                                         std::to_string(q.run_rate),
                                         std::to_string(q.run_cap),
                                         std::to_string(q.run_epoch),
                                         std::to_string(q.demand),
                                         std::to_string(q.ttl_us),
                                         std::to_string(q.settle_us),
                                         std::to_string(q.level_us),
                                         q.instance};
        std::vector<const char *> argv;
        std::vector<size_t> lens;
        for (auto &a : args) {
            argv.push_back(a.data());
            lens.push_back(a.size());
        }
        ReplyPtr r(static_cast<redisReply *>(
            redisCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), lens.data())));
        if (!r)
            return fail(target, fmt::format("redis: {}", ctx->errstr));
        if (r->type == REDIS_REPLY_ERROR) {
            std::string why = reply_text(r.get());
            const bool moved = why.starts_with("MOVED "), ask = why.starts_with("ASK ");
            if (moved || ask) {
                auto to = redirect_target(why, target);
                if (!to)
                    return fail(target, fmt::format("redis: a redirection to nowhere: {}", why));
                last_redirect = why;
                if (moved)
                    mode_ = Mode::unknown; // the map is out of date: read it again after this
                target = *to;
                asking = ask;
                continue;
            }
            // NOSCRIPT after a restart: the script is loaded again on reconnecting.
            return fail(target, fmt::format("redis: {}", why));
        }
        // Eleven counts, the refusal flag, and the holding instance (a string).
        constexpr size_t kCounts = 12, kFields = 13;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != kFields)
            return fail(target,
                        fmt::format("redis: unexpected reply to the fleet script ({})",
                                    r->type == REDIS_REPLY_ARRAY
                                        ? fmt::format("{} fields, not {}", r->elements, kFields)
                                        : "not an array"));
        uint64_t v[kCounts];
        for (size_t i = 0; i < kCounts; ++i) {
            if (r->element[i]->type != REDIS_REPLY_INTEGER || r->element[i]->integer < 0)
                return fail(
                    target,
                    fmt::format("redis: field {} of the fleet script's reply is not a count",
                                i + 1));
            v[i] = static_cast<uint64_t>(r->element[i]->integer);
        }
        const redisReply *h = r->element[kCounts];
        if (h->type != REDIS_REPLY_STRING)
            return fail(target, "redis: the fleet script's reply names no holder");
        Reply out;
        out.rate = v[0], out.cap = v[1], out.hosts = v[2], out.cir = v[3], out.cbs = v[4];
        out.now_us = v[5], out.mismatch = v[6] != 0, out.epoch = v[7], out.fair = v[8];
        out.leased = v[9], out.older = v[10] != 0, out.held = v[11] != 0;
        out.holder.assign(h->str, h->len);
        // A master with replicas: the lease is safe from a failover once one of them has it.
        // WAIT's own timeout stays within the call's (hiredis's) timeout. After a redirection
        // the map's count is not this node's: WAIT in any case (a node without replicas says
        // 0, and the host takes no raise until the map is read again).
        if (replicas > 0 || hop > 0) {
            long long ms = std::max<long long>(1, timeout_.count() / 2);
            ReplyPtr w(static_cast<redisReply *>(redisCommand(ctx, "WAIT 1 %lld", ms)));
            if (!w)
                return fail(target, fmt::format("redis: WAIT: {}", ctx->errstr));
            out.replicated = w->type == REDIS_REPLY_INTEGER && w->integer >= 1;
        }
        return out;
    }
    return fail(target, fmt::format("redis cluster: slot {} still redirected after {} hops (last: "
                                    "{}): its nodes disagree on who serves it",
                                    slot, kHops, last_redirect));
}

} // namespace tricolor::fleet
