-- concurrency.lua: one key's holds under a Concurrency (concurrency.go), a
-- script of its own. Each call is one of four modes, run atomically.
--
-- KEYS[1]  the holds: a sorted set, member a hold's id, score the time it
--          expires, in µs since the Unix epoch on Redis time.
-- KEYS[2]  the slots: a hash, field a hold's id, value "n acquired_µs" (the
--          slots it holds and when it was acquired), and field "#" the sum
--          of every hold's n. Hold ids never are "#" (concurrency.go makes
--          them hex digits, a dot and a number).
-- KEYS[3]  the queue: a sorted set, member a waiter's ticket, score the
--          time it joined (µs on Redis time): the fleet's waiters of the
--          key, one per instance (its oldest Acquire), served first come,
--          first served.
-- KEYS[4]  the tickets' expiries: a sorted set, member a ticket, score the
--          time it expires unless its waiter asks again: a waiter that
--          vanished leaves the queue then.
-- All are tagged alike (prefix{key}, prefix{key}:n, :q, :qx), so on Redis
-- Cluster they share a slot.
--
-- ARGV[1]  the mode: "acquire" records the hold ARGV[2] of n slots if the
--          key's holds leave room for n under limit; "release" drops the
--          hold ARGV[2], if it is still there; "renew" moves its expiry to
--          now + expiry (never past acquired + maxhold); "peek" writes
--          nothing but what every mode does first.
-- ARGV[2]  the hold's id ("" for peek).
-- ARGV[3]  n, ARGV[4] limit: the slots asked for, and the most the key may
--          hold (1 <= n <= limit, checked by the caller; the instance's
--          limit, which travels with each call).
-- ARGV[5]  expiry, ARGV[6] maxhold: in µs, how long a hold lives without a
--          renewal, and how long it may live at all (0: for ever).
-- ARGV[7]  a waiter's ticket ("" for none), ARGV[8] how long it lives, in
--          µs, without the waiter asking again. Acquire with a ticket
--          joins the queue (or stays in it) and acquires only if the
--          ticket is first and the slots fit, leaving the queue then;
--          acquire without one (TryAcquire), and peek, pass only if no
--          one waits. "leave" takes the ticket out of the queue (a waiter
--          that gave up).
-- Then, only in the package's own tests, two more: the time, in seconds
-- since the Unix epoch and ns within the second, instead of the server's.
--
-- Every mode first drops the holds that have expired (score <= now) and
-- takes their slots out of "#": a holder that died, or was paused past its
-- expiry, has lost them.
--
-- The reply is one string, "ok held next reclaimed": ok is 1 if the mode
-- did what it asked (acquired, released or renewed a live hold; for peek,
-- 1 slot is free), held the slots held after the call, next the µs until
-- the first hold expires (0: none is held), reclaimed the slots of expired
-- holds this call dropped. A refused acquire with a ticket adds a fifth
-- number, "ahead": the tickets before it in the queue.

if redis.replicate_commands then redis.replicate_commands() end

local z, h, q, qx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mode, id = ARGV[1], ARGV[2]
local n, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local expiry, maxhold = tonumber(ARGV[5]), tonumber(ARGV[6])
local ticket, ticketttl = ARGV[7], tonumber(ARGV[8])
if #KEYS ~= 4 or not (n and limit and expiry and maxhold and ticket and ticketttl) then
  return redis.error_reply('redislimit: concurrency: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end
if mode ~= 'acquire' and mode ~= 'release' and mode ~= 'renew' and mode ~= 'peek' and mode ~= 'leave' then
  return redis.error_reply('redislimit: concurrency: unknown mode ' .. tostring(mode))
end

-- now: µs since the Unix epoch, exact in a double for 285 years.
local now
local fixed_clock = ARGV[9] ~= nil
if fixed_clock then
  now = tonumber(ARGV[9]) * 1000000 + math.floor(tonumber(ARGV[10]) / 1000)
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Numbers go to Redis through string.format: Lua's own conversion keeps 14
-- digits, and a time in µs has 16.
local function int(x) return string.format('%d', x) end

-- slots returns the n and the acquisition time a hold's value records.
local function slots(v)
  local a, b = string.match(v, '^(%d+) (%d+)$')
  return tonumber(a) or 0, tonumber(b) or 0
end

-- Drop the expired holds.
local reclaimed = 0
local expired = redis.call('ZRANGEBYSCORE', z, '-inf', int(now))
if #expired > 0 then
  for _, e in ipairs(expired) do
    local v = redis.call('HGET', h, e)
    if v then
      reclaimed = reclaimed + slots(v)
      redis.call('HDEL', h, e)
    end
  end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', int(now))
  redis.call('HINCRBY', h, '#', -reclaimed)
end
local held = math.max(tonumber(redis.call('HGET', h, '#')) or 0, 0)

-- Drop the tickets that expired: their waiters stopped asking.
local gone = redis.call('ZRANGEBYSCORE', qx, '-inf', int(now))
if #gone > 0 then
  redis.call('ZREM', q, unpack(gone))
  redis.call('ZREMRANGEBYSCORE', qx, '-inf', int(now))
end
-- head is the ticket at the head of the queue, false if none waits.
local head = redis.call('ZRANGE', q, 0, 0)[1] or false

-- queued writes ticket's expiry (and, if it is new, its place at the back),
-- and has both queue keys live as long as their newest ticket.
local function queued()
  if not redis.call('ZSCORE', q, ticket) then
    redis.call('ZADD', q, int(now), ticket)
    head = redis.call('ZRANGE', q, 0, 0)[1]
  end
  redis.call('ZADD', qx, int(now + ticketttl), ticket)
  local ms = math.ceil(ticketttl / 1000) + 1000
  if fixed_clock then ms = ms + 3600000 end
  redis.call('PEXPIRE', q, int(ms))
  redis.call('PEXPIRE', qx, int(ms))
end

-- unqueue takes ticket out of the queue.
local function unqueue()
  redis.call('ZREM', q, ticket)
  redis.call('ZREM', qx, ticket)
end

-- finish replies, and leaves both keys to expire a minute after the last
-- hold (so that the next call, if any comes by then, finds the expired
-- holds and counts them as reclaimed), or deletes them if none is left.
-- wrote says that a hold's expiry moved up, so the keys' must follow.
-- Under the tests' clock, which does not move with Redis's, a key lives an
-- hour longer, so that it never expires while the test's time stands
-- still.
local function finish(ok, wrote)
  local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  if held <= 0 or #first == 0 then
    redis.call('DEL', z, h)
    return string.format('%d 0 0 %d', ok, reclaimed)
  end
  if wrote then
    local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
    local ms = math.ceil((tonumber(last[2]) - now) / 1000) + 60000
    if fixed_clock then ms = ms + 3600000 end
    redis.call('PEXPIRE', z, int(ms))
    redis.call('PEXPIRE', h, int(ms))
  end
  return string.format('%d %d %d %d', ok, held, tonumber(first[2]) - now, reclaimed)
end

if mode == 'leave' then
  unqueue()
  return finish(1, false)
end

if mode == 'peek' then
  if held + 1 <= limit and not head then return finish(1, false) end
  return finish(0, false)
end

if mode == 'acquire' then
  if ticket ~= '' then
    queued()
    if head ~= ticket or held + n > limit then
      return finish(0, false) .. ' ' .. redis.call('ZRANK', q, ticket)
    end
    unqueue()
  elseif head or held + n > limit then
    return finish(0, false)
  end
  local exp = now + expiry
  if maxhold > 0 then exp = math.min(exp, now + maxhold) end
  redis.call('ZADD', z, int(exp), id)
  redis.call('HSET', h, id, int(n) .. ' ' .. int(now))
  held = tonumber(redis.call('HINCRBY', h, '#', int(n)))
  return finish(1, true)
end

-- release and renew: of a live hold only. One that expired was dropped
-- above (its slots counted in reclaimed); one of another id is not there.
local v = redis.call('HGET', h, id)
if not v then return finish(0, false) end
local k, at = slots(v)
if mode == 'release' then
  redis.call('HDEL', h, id)
  redis.call('ZREM', z, id)
  held = tonumber(redis.call('HINCRBY', h, '#', int(-k)))
  return finish(1, false)
end
local exp = now + expiry
if maxhold > 0 then exp = math.min(exp, at + maxhold) end
local cur = tonumber(redis.call('ZSCORE', z, id)) or 0
if exp <= cur then return finish(1, false) end
redis.call('ZADD', z, 'XX', int(exp), id)
return finish(1, true)
