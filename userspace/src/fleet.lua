-- SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
-- fleet.lua: one exchange between a host and the fleet of one policy (docs/fleet.md), run
-- atomically by EVALSHA. The fleet leases rates, not tokens: a host's committed bucket earns on
-- the host, exactly, at its leased rate (bit/s, or packet/s) and holds at most its leased cap
-- (bytes, or packets). For every host Redis counts the larger of the lease it gave the host last
-- and the lease the host said it ran when it asked (the host may run either until its next
-- exchange says which), and keeps the counted rates' sum <= CIR and the caps' sum <= CBS: so the
-- green bytes of all hosts over any window T are at most CBS + CIR*T.
-- Every quantity is an integer below 2^53 (CIR <= 10^12, CBS <= 2^30, sums over a few thousand
-- hosts), exact in Lua's doubles; no clock of a host is compared with Redis's.
-- O(1) per exchange but for the water level of the fair shares, computed from every host's want
-- once per level_us (O(N log N)), and the silent hosts dropped (at most 64 an exchange).
--
-- KEYS[1] hash: cir, cbs, born (Redis us when this state was made: the epoch of its leases),
--         settle (Redis us: until then no host's lease is raised), level (the fair shares' water
--         level; -1: every want is met), level_t (Redis us of its computation), rates, caps (the
--         sums of every host's counted lease)
-- KEYS[2] hash node -> "rate cap run_rate run_cap demand allow_rate allow_cap instance" (allow:
--         the largest lease it ran from before this state, see the settling below; instance:
--         the daemon that holds the name, see the names below)
-- KEYS[3] zset node -> Redis time (us) of the node's last exchange
-- KEYS[4] the token-grant version's bucket hash (tricolor:{NAME}:bucket), only read: its 't' is
--         the Redis time of that version's last exchange; within a lease, hosts of that version
--         share this policy's name and count only their own (the reply's 'older')
-- ARGV: node, cir, cbs, run_rate, run_cap, run_epoch (the epoch its running lease came from; 0
--       for none or its own fallback's), demand (bit/s or packet/s offered, all colours),
--       ttl_us (a host silent this long runs no lease of ours), settle_us, level_us, instance
--       (one per daemon's start, no spaces: HOST:PID:RANDOM)
-- Returns {rate, cap, hosts, cir, cbs, now, mismatch, epoch, fair, leased, older, held, holder}
--
-- Names: the sums count one lease per name, so two daemons under one name would both run it
-- (each as if it were the only one). A name belongs to the instance that holds a live lease
-- under it; another instance asking under it is refused (held = 1, holder = the holding
-- instance; nothing of it is written, its lease is nothing) until that lease has expired: a daemon
-- restarted under its name waits at most a lease, as a state that settles does.
local function num(x) return string.format('%.0f', x) end
local function fields(rec)
    local f = {}
    for x in string.gmatch(rec, '%S+') do f[#f + 1] = tonumber(x) end
    return f
end
local node = ARGV[1]
local cir, cbs = tonumber(ARGV[2]), tonumber(ARGV[3])
local run_rate, run_cap = tonumber(ARGV[4]), tonumber(ARGV[5])
local run_epoch, demand = tonumber(ARGV[6]), tonumber(ARGV[7])
local ttl, settle_us, level_us = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local instance = ARGV[11]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local b = redis.call('HMGET', KEYS[1], 'cir', 'cbs', 'born', 'settle', 'level', 'level_t',
                     'rates', 'caps')
local born, settle, mismatch = now, now + settle_us, 0
local level, level_t, rates, caps = -1, now - level_us, 0, 0
if b[1] then
    -- The first writer's parameters stand; a host asking with others is told so.
    local scir, scbs = tonumber(b[1]), tonumber(b[2])
    if scir ~= cir or scbs ~= cbs then mismatch = 1 end
    cir, cbs = scir, scbs
    born, settle = tonumber(b[3]), tonumber(b[4])
    level, level_t = tonumber(b[5]), tonumber(b[6])
    rates, caps = tonumber(b[7]), tonumber(b[8])
end
-- A host running a lease this state did not give (Redis lost its data, or the host ran on its
-- fallback): hosts not heard yet may run such leases too, for at most a lease from now. Until
-- then no lease is raised, so the sums stay what they were before the loss.
if run_epoch ~= born and (run_rate > 0 or run_cap > 0) and settle < now + ttl then
    settle = now + ttl
end

-- Hosts of the token-grant version that exchanged within a lease (KEYS[4]).
local ot = tonumber(redis.call('HGET', KEYS[4], 't') or '')
local older = 0
if ot and ot > now - ttl then older = 1 end

-- A node that runs no lease of ours any more: its record and its counted lease go.
local function drop(n, rec)
    if rec then
        local f = fields(rec)
        rates = rates - math.max(f[1], f[3])
        caps = caps - math.max(f[2], f[4])
    end
    redis.call('HDEL', KEYS[2], n)
    redis.call('ZREM', KEYS[3], n)
end

-- Nodes silent for a lease have stopped running theirs (after 0.9 lease of their own clock,
-- counted from before their last exchange reached Redis).
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', num(now - ttl), 'LIMIT', 0, 64)
for _, n in ipairs(gone) do
    drop(n, redis.call('HGET', KEYS[2], n))
end

-- The name: held by another instance whose lease is live, this one is refused. A record of the
-- version before instances (seven fields) is a holder too, unknown by name. An expired one the
-- loop above left (it drops 64 at most) is dropped here.
local rec = redis.call('HGET', KEYS[2], node)
if rec then
    local holder = 'an instance of an older tricolor'
    local k = 0
    for x in string.gmatch(rec, '%S+') do
        k = k + 1
        if k == 8 then holder = x end
    end
    if holder ~= instance then
        local seen = tonumber(redis.call('ZSCORE', KEYS[3], node) or '')
        if seen and seen > now - ttl then
            -- Nothing of this instance is written; the sums lose the silent hosts dropped above.
            redis.call('HSET', KEYS[1], 'rates', num(rates), 'caps', num(caps))
            return {0, 0, redis.call('ZCARD', KEYS[3]), cir, cbs, now, mismatch, born, 0, rates,
                    older, 1, holder}
        end
        drop(node, rec)
        rec = nil
    end
end

-- A host wants its demand and a sixteenth more (room to grow until its next exchange), at least
-- a floor that keeps an idle host's bucket filling: its first packets after a pause are green.
redis.call('ZADD', KEYS[3], num(now), node)
local n = redis.call('ZCARD', KEYS[3])
local floor_rate = math.floor(cir / (64 * n))
local function want(d) return math.max(d + math.floor(d / 16), floor_rate) end

-- The water level of the max-min fair shares of CIR by want: the smallest wants are met in full,
-- the rest of CIR split evenly (each host then gets min(want, level)). Once per level_us, from
-- every host's want; the sums of the counted leases are recounted with it.
if now - level_t >= level_us then
    local all = redis.call('HGETALL', KEYS[2])
    local list = {}
    rates, caps = 0, 0
    for i = 1, #all, 2 do
        local f = fields(all[i + 1])
        rates = rates + math.max(f[1], f[3])
        caps = caps + math.max(f[2], f[4])
        if all[i] ~= node then list[#list + 1] = want(f[5]) end
    end
    list[#list + 1] = want(demand)
    table.sort(list)
    local left, k = cir, #list
    level = -1
    for i, w in ipairs(list) do
        local even = math.floor(left / (k - i + 1))
        if w > even then
            level = even
            break
        end
        left = left - w
    end
    level_t = now
end

-- This node's lease: its fair share, within what the others are counted at. While the state
-- settles, no more than the largest lease it ran from before (one another state gave, or its
-- fallback's): each host within what it ran keeps the sums within what they were, and a lease
-- cut to let others run may grow back to it.
local old_rate, old_cap, allow_rate, allow_cap = 0, 0, 0, 0
if rec then
    local f = fields(rec)
    old_rate, old_cap = math.max(f[1], f[3]), math.max(f[2], f[4])
    allow_rate, allow_cap = f[6] or 0, f[7] or 0
end
if run_epoch ~= born then
    allow_rate, allow_cap = math.max(allow_rate, run_rate), math.max(allow_cap, run_cap)
end
local others_rate, others_cap = rates - old_rate, caps - old_cap
local fair = want(demand)
if level >= 0 and fair > level then fair = level end
if fair > cir then fair = cir end
local rate = math.min(fair, cir - others_rate)
local cap = math.min(math.floor(cbs / n), cbs - others_cap)
if now < settle then
    rate = math.min(rate, math.max(run_rate, allow_rate))
    cap = math.min(cap, math.max(run_cap, allow_cap))
end
if rate < 0 then rate = 0 end
if cap < 0 then cap = 0 end
rates = others_rate + math.max(rate, run_rate)
caps = others_cap + math.max(cap, run_cap)

redis.call('HSET', KEYS[1], 'cir', num(cir), 'cbs', num(cbs), 'born', num(born),
           'settle', num(settle), 'level', num(level), 'level_t', num(level_t),
           'rates', num(rates), 'caps', num(caps))
redis.call('HSET', KEYS[2], node,
           table.concat({num(rate), num(cap), num(run_rate), num(run_cap), num(demand),
                         num(allow_rate), num(allow_cap), instance}, ' '))
return {rate, cap, n, cir, cbs, now, mismatch, born, fair, rates, older, 0, ''}
