-- SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
-- fleet.lua: one exchange between a host and the fleet bucket of one policy (docs/spec.md §10), run
-- atomically by EVALSHA. Units: 10^-6 bit (10^-6 packet in packet mode), so a rate of R bit/s
-- adds exactly R units per microsecond of Redis's own clock (TIME): host clocks do not matter.
-- Every quantity is an integer below 2^53 (CBS <= 2^30 bytes = 8.6e15 units, CIR <= 10^12), so
-- Lua's doubles hold them exactly; products are only formed where they stay below 2^53.
--
-- KEYS[1] bucket hash: cir, cbs, tokens (the fleet's unleased tokens), t (us of the last
--         refill), out (sum of the hosts' holdings)
-- KEYS[2] hash node -> holding: an upper bound of the tokens the node may still spend
-- KEYS[3] zset node -> Redis time (us) of the node's last exchange
-- ARGV: node, cir, cbs, report (what the node holds now, an upper bound), want, ttl_us,
--       reset (1: the node's record is void, e.g. after it ran on its fallback)
-- Invariant: tokens + out <= cbs, so the green bytes of all hosts over any window T are at
-- most CBS + CIR*T. Returns {grant, tokens, out, hosts, cir, cbs, now, mismatch}.
local function num(x) return string.format('%.0f', x) end
local node = ARGV[1]
local cir, cbs = tonumber(ARGV[2]), tonumber(ARGV[3])
local report, want = tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl, reset = tonumber(ARGV[6]), ARGV[7] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local b = redis.call('HMGET', KEYS[1], 'cir', 'cbs', 'tokens', 't', 'out')
local tokens, last, out, mismatch = 0, now, 0, 0
if b[1] then
    -- The first writer's parameters stand; a host asking with others is told so.
    local scir, scbs = tonumber(b[1]), tonumber(b[2])
    if scir ~= cir or scbs ~= cbs then mismatch = 1 end
    cir, cbs = scir, scbs
    tokens, last, out = tonumber(b[3]), tonumber(b[4]), tonumber(b[5])
end
-- A new (or restarted-empty) bucket starts with no unleased tokens: what hosts still hold
-- comes back with their reports, so the invariant holds across a restart.

-- Nodes silent for a lease (ttl) have revoked their tokens themselves (they do so after ttl
-- of their own clock, counted from before their last exchange reached Redis).
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', num(now - ttl), 'LIMIT', 0, 64)
for _, n in ipairs(gone) do
    local h = redis.call('HGET', KEYS[2], n)
    if h then out = out - tonumber(h) end
    redis.call('HDEL', KEYS[2], n)
    redis.call('ZREM', KEYS[3], n)
end

-- This node's holding: its report, never above what the fleet knows it was given.
local rec = redis.call('HGET', KEYS[2], node)
local held = report
if rec and not reset then
    held = math.min(held, tonumber(rec))
else
    held = math.min(held, cbs)
end
if rec then out = out - tonumber(rec) end
out = out + held

-- Refill on Redis's clock, capped so that tokens + out <= cbs.
if now > last then
    local dt = now - last
    local add
    if dt >= cbs / cir then add = cbs else add = cir * dt end
    local room = cbs - out - tokens
    if room < 0 then room = 0 end
    if add > room then add = room end
    tokens = tokens + add
    last = now
end

local grant = math.min(want, tokens)
if grant < 0 then grant = 0 end
tokens = tokens - grant
held = held + grant
out = out + grant

redis.call('HSET', KEYS[1], 'cir', num(cir), 'cbs', num(cbs), 'tokens', num(tokens),
           't', num(last), 'out', num(out))
redis.call('HSET', KEYS[2], node, num(held))
redis.call('ZADD', KEYS[3], num(now), node)
local hosts = redis.call('ZCARD', KEYS[3])
return {grant, tokens, out, hosts, cir, cbs, now, mismatch}
