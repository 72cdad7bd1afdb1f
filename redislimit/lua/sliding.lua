-- sliding.lua: one decision of an exact sliding log, after prelude.lua.
--
-- The same algorithm as keylimit.SlidingWindow: the key keeps the times of
-- its admissions, and admits n iff fewer than events - n + 1 of them lie in
-- (now - period, now]. So no interval of length period ever holds more than
-- events admissions.
--
-- KEYS[1]  the key's state: a list of admission times in µs since the Unix
--          epoch, oldest first, at most events long; it expires when its
--          newest entry leaves the window, and the state is the same as none.
-- ARGV[3]  period in µs (the caller requires a whole number of µs).
-- ARGV[4]  events per period.
--
-- Modes: take n admissions; peek at 1; refund: forget the admission's own
-- entries, if they are still in the list. The mark of an admission is the
-- time it recorded (µs since the Unix epoch, in decimal).
-- Remaining is in events; times in the reply are in µs, the resolution of
-- TIME: Unix time in µs (about 2^51) is exact in a Lua double, and so is
-- every sum below.

local period = tonumber(ARGV[3])
local events = tonumber(ARGV[4])

local now = now_s * 1e6 + now_us -- µs since the Unix epoch

local len = redis.call('LLEN', key)
local newest = 0
if len > 0 then
  newest = tonumber(redis.call('LINDEX', key, -1))
  -- Time only moves forward inside the state: if the server's clock stepped
  -- back, decide as of the newest admission, so the list stays in order and
  -- no entry leaves the window early.
  if newest > now then now = newest end
end

-- at: the admission time at index i.
local function at(i)
  return tonumber(redis.call('LINDEX', key, i))
end

-- first: index of the oldest entry still in the window (t > now - period).
-- Entries before it have left; take trims them, peek only skips them. The
-- list is in order, so a binary search finds it in O(log events) LINDEX
-- calls; usually the head is still in the window and one call suffices.
local first = 0
if len > 0 and at(0) <= now - period then
  local lo, hi = 1, len -- at(lo - 1) has left; at(hi) is in, or hi == len
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if at(mid) <= now - period then lo = mid + 1 else hi = mid end
  end
  first = lo
end
local count = len - first

-- leaves: µs from now until the entry at index i leaves the window.
local function leaves(i)
  return at(i) + period - now
end

local function reset(c)
  if c > 0 then return newest + period - now end
  return 0
end

-- refused: n does not fit until count + n - events entries have left; the
-- last of those to leave is the (count + n - events)-th oldest in the window.
local function refused(need)
  return reply(0, events - count, leaves(first + count + need - events - 1), reset(count))
end

if mode == 'take' then
  if count + n > events then
    return refused(n)
  end
  if first > 0 then
    redis.call('LTRIM', key, first, -1)
  end
  -- Push n copies of now, in chunks that stay within Lua's stack.
  local entry = string.format('%d', now)
  local left = n
  while left > 0 do
    local chunk = math.min(left, 1000)
    local batch = {}
    for i = 1, chunk do batch[i] = entry end
    redis.call('RPUSH', key, unpack(batch))
    left = left - chunk
  end
  redis.call('PEXPIRE', key, math.ceil(period / 1000))
  return reply(1, events - count - n, 0, period, entry)
end

if mode == 'peek' then
  if count + 1 > events then
    return refused(1)
  end
  return reply(1, events - count, 0, reset(count))
end

if mode == 'refund' then
  -- Forget up to n entries of the admission's time, from the newest end:
  -- entries of equal times are alike, and entries the list no longer holds
  -- had left the window (trimmed by a later take).
  local removed = redis.call('LREM', key, -n, mark)
  if tonumber(mark) > now - period then
    count = count - removed
  end
  if count <= 0 then
    redis.call('DEL', key)
    return reply(1, events, 0, 0)
  end
  newest = tonumber(redis.call('LINDEX', key, -1))
  local ttl = newest + period - now
  redis.call('PEXPIRE', key, math.ceil(ttl / 1000))
  return reply(1, events - count, 0, ttl)
end
