-- bucket.lua: one decision of a GCRA token bucket, after prelude.lua.
--
-- The same algorithm as keylimit.TokenBucket: the key's whole state is its
-- theoretical arrival time (TAT), the instant its bucket is full again. The
-- tokens at time now are (now + tau - TAT) / interval, so refill is never
-- stored and no fraction of a token is lost.
--
-- KEYS[1]  the key's state: a string, the TAT in ns since the Unix epoch in
--          decimal (19 digits), expiring at the TAT itself, when the bucket
--          is full and the state is the same as no state at all.
-- ARGV[3]  interval: ns per token, Limit.Interval().
-- ARGV[4]  tau: burst × interval in ns, how far the TAT may run ahead of now.
-- Modes: take n tokens; peek at 1; refund n tokens, never above a full
-- bucket. Times in the reply are in ns; remaining is in tokens.
--
-- Arithmetic: Lua numbers are doubles, exact for integers below 2^53. Unix
-- time in ns (about 2^61) is not, so times are kept as whole seconds plus ns
-- within the second, and only differences from now are formed; the caller
-- keeps tau + interval below 2^52, so every difference is exact.

local interval = tonumber(ARGV[3])
local tau = tonumber(ARGV[4])
local burst = math.floor(tau / interval)

local now_ns = now_us * 1000 -- now is now_s seconds + now_ns ns

-- ahead = TAT - now, in ns. A missing key is a full bucket: TAT <= now.
local ahead = 0
local stored = redis.call('GET', key)
if stored then
  local tat_s = tonumber(string.sub(stored, 1, -10))
  local tat_ns = tonumber(string.sub(stored, -9))
  ahead = (tat_s - now_s) * 1e9 + (tat_ns - now_ns)
end
-- base = max(TAT, now) - now: a bucket never holds more than burst tokens.
local base = math.max(ahead, 0)

-- remaining: whole tokens in a bucket whose TAT is now + a.
local function remaining(a)
  local r = math.floor((tau - a) / interval)
  return math.min(math.max(r, 0), burst)
end

-- store sets the TAT to now + a (a > 0) and makes the key expire then:
-- PX is rounded up to a whole ms, so the key never expires early.
local function store(a)
  local total = now_ns + a
  local ns = math.fmod(total, 1e9)
  local s = now_s + (total - ns) / 1e9
  redis.call('SET', key, string.format('%d%09d', s, ns), 'PX', math.ceil(a / 1e6))
end

if mode == 'take' then
  local next = base + n * interval
  if next > tau then
    -- Refused: nothing is written. The request passes once the TAT that
    -- admitting it gives is no more than tau ahead.
    return reply(0, remaining(base), next - tau, base)
  end
  store(next)
  return reply(1, remaining(next), 0, next)
end

if mode == 'peek' then
  local next = base + interval
  if next > tau then
    return reply(0, remaining(base), next - tau, base)
  end
  return reply(1, remaining(base), 0, base)
end

if mode == 'refund' then
  -- Give back n tokens: the TAT moves back by n intervals, never before now.
  local back = base - n * interval
  if back > 0 then
    store(back)
  elseif stored then
    redis.call('DEL', key)
  end
  return reply(1, remaining(math.max(back, 0)), 0, math.max(back, 0))
end
