-- take_sliding.lua: the plain decision of a sliding log, a script of its
-- own: take n under one limiter, as lua/sliding.lua's take does, with
-- nothing else in the script (the full script defines its functions and
-- tables anew on every call, which costs the server more than the decision
-- itself). A sliding log's state means the same under any limit, so this
-- script never hands a take to the full one.
--
-- KEYS[1] the log (sliding.lua says its shape). ARGV: n, period, events
-- (sliding.lua's parameters), and only in the package's tests the time,
-- seconds and ns (prelude.lua). The reply is sliding.lua's six integers.

local key = KEYS[1]
-- life: what a key's expiry adds under the tests' clock (prelude.lua's ttl).
local clock, life
if ARGV[4] then
  clock, life = tonumber(ARGV[4]) * 1e6 + math.floor(tonumber(ARGV[5]) / 1000), 3600000
else
  local time = redis.call('TIME')
  clock, life = time[1] * 1e6 + time[2], 0
end

-- A key without a log (the usual case of a loose limit) takes one event
-- with TIME, LRANGE, RPUSH and PEXPIRE and nothing else: the reply is the
-- entry after '@', from which the caller reads the rest (remaining events
-- - 1, reset and refill after a period; take_bucket.lua says why).
local tail = redis.call('LRANGE', key, -8, -1)
if tail[1] == nil and ARGV[1] == '1' then
  local entry = string.format('%d', clock)
  redis.call('RPUSH', key, entry)
  redis.call('PEXPIRE', key, string.format('%d', math.ceil(ARGV[2] / 1000 + life)))
  return '@' .. entry
end
local n, period, events = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

-- As sliding.lua's read: first is the index of the oldest entry still in
-- the window, oldest its time (nil for none); now is the time the decision
-- is made at, the newest entry's if the server's clock stepped back. A log
-- of fewer than tailSize entries is read whole in one command, the usual
-- case of a loose limit; a longer one an entry at a time (LINDEX), with a
-- binary search for first, as sliding.lua reads it.
local tailSize = 8
local len, at = #tail, nil
if len < tailSize then
  at = function(i) return tonumber(tail[i + 1]) end
else
  len = redis.call('LLEN', key)
  at = function(i) return tonumber(redis.call('LINDEX', key, i)) end
end
local now, newest, first, oldest = clock, 0, 0, nil
if len > 0 then
  newest = tonumber(tail[#tail])
  if newest > now then now = newest end
  oldest = at(0)
  if oldest <= now - period then
    local lo, hi = 1, len -- the entry at lo - 1 has left; the one at hi is in, or hi == len
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if at(mid) <= now - period then lo = mid + 1 else hi = mid end
    end
    first, oldest = lo, nil
    if lo < len then oldest = at(lo) end
  end
end
local count = len - first

if count + n > events then
  local reset, refill = 0, 0
  if count > 0 then reset = newest + period - clock end
  if oldest then refill = math.min(oldest + period - clock, 9e18) end
  local retry = at(first + count + n - events - 1) + period - clock
  return string.format('0 %d %d %d 0 %d', events - count, math.min(retry, 9e18), math.min(reset, 9e18), refill)
end
if first > 0 then redis.call('LTRIM', key, first, -1) end
-- k copies of now, in chunks that stay within Lua's stack.
local entry = string.format('%d', now)
if n == 1 then
  redis.call('RPUSH', key, entry)
else
  local todo = n
  while todo > 0 do
    local chunk = math.min(todo, 1000)
    local batch = {}
    for i = 1, chunk do batch[i] = entry end
    redis.call('RPUSH', key, unpack(batch))
    todo = todo - chunk
  end
end
-- The key expires when its newest entry leaves the window on the server's
-- clock.
local left = now + period - clock
redis.call('PEXPIRE', key, math.ceil(left / 1000 + life))
return string.format('1 %d 0 %d %s %d', events - count - n, math.min(left, 9e18), entry, math.min((oldest or now) + period - clock, 9e18))
