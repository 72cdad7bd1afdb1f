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
-- Modes: take n tokens; peek at 1; refund what an admission still holds.
-- Times in the reply are in ns; remaining is in tokens. The mark of an
-- admission is the TAT it wrote, as stored (seconds, then 9 digits of ns).
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
-- since returns how far the time t, stored as seconds then 9 digits of ns,
-- is after now, in ns.
local function since(t)
  return (tonumber(string.sub(t, 1, -10)) - now_s) * 1e9 + (tonumber(string.sub(t, -9)) - now_ns)
end

local ahead = 0
local stored = redis.call('GET', key)
if stored then
  ahead = since(stored)
end
-- base = max(TAT, now) - now: a bucket never holds more than burst tokens.
local base = math.max(ahead, 0)

-- remaining: whole tokens in a bucket whose TAT is now + a.
local function remaining(a)
  local r = math.floor((tau - a) / interval)
  return math.min(math.max(r, 0), burst)
end

-- store sets the TAT to now + a (a > 0) and makes the key expire then:
-- PX is rounded up to a whole ms, so the key never expires early. It
-- returns the TAT as stored.
local function store(a)
  local total = now_ns + a
  local ns = math.fmod(total, 1e9)
  local s = now_s + (total - ns) / 1e9
  local tat = string.format('%d%09d', s, ns)
  redis.call('SET', key, tat, 'PX', math.ceil(a / 1e6))
  return tat
end

if mode == 'take' then
  local next = base + n * interval
  if next > tau then
    -- Refused: nothing is written. The request passes once the TAT that
    -- admitting it gives is no more than tau ahead.
    return reply(0, remaining(base), next - tau, base)
  end
  return reply(1, remaining(next), 0, next, store(next))
end

if mode == 'peek' then
  local next = base + interval
  if next > tau then
    return reply(0, remaining(base), next - tau, base)
  end
  return reply(1, remaining(base), 0, base)
end

if mode == 'refund' then
  -- Give back what the admission that wrote the TAT mark still holds (see
  -- keylimit's DESIGN.md, "Exact refunds"): it moved the TAT n intervals
  -- later; what of that lies ahead of now, and of the TAT, comes back.
  -- After the server's clock stepped back, now counts from TAT - tau, a
  -- time some admission reached.
  if string.len(mark) < 10 then
    return redis.error_reply('redislimit: refund of a malformed mark ' .. mark)
  end
  local skew = math.max(ahead - tau, 0)
  local back = math.min(n * interval, since(mark) - skew, ahead - skew)
  if back > 0 then
    if ahead - back > 0 then
      store(ahead - back)
    else
      redis.call('DEL', key)
    end
    ahead = ahead - back
  end
  local a = math.max(ahead, 0)
  return reply(1, remaining(a), 0, a)
end
