-- take_sliding.lua: the plain decision of a sliding log, a script of its
-- own: take n under one limiter, as lua/sliding.lua's take does, with
-- nothing else in the script (the full script defines its functions and
-- tables anew on every call, which costs the server more than the decision
-- itself). A sliding log's state means the same under any limit, so this
-- script never hands a take to the full one.
--
-- KEYS[1] the log, in either of sliding.lua's shapes: a string of at most
-- short entries, or a list. ARGV: n; the expiry in ms of a log whose
-- newest entry is now (the period, rounded up); "events period" (the
-- period in µs); and only in the package's tests the time, seconds and ns
-- (prelude.lua). short is set before this file (scripts.go). The reply is
-- sliding.lua's six integers, or, for an admission on a log of the short
-- shape at the server's time, the log it wrote, from which the caller
-- reads the rest: its entries are the window's, the newest the mark.
--
-- As in take_bucket.lua, the common case costs TIME and one SET: a key
-- without a log takes one event by writing the log of that one entry
-- unless the key exists (NX), reading it in the same command (GET), with
-- no number read or printed on the server. A key that comes back within a
-- period costs one SET more.

local key = KEYS[1]
-- entry: the time of an admission now, as the log writes it (µs since the
-- Unix epoch); clock: that time as a number, once it is needed; life:
-- what a key's expiry adds under the tests' clock (prelude.lua's ttl).
local entry, clock, life
if ARGV[4] then
  clock = tonumber(ARGV[4]) * 1e6 + math.floor(tonumber(ARGV[5]) / 1000)
  entry, life = string.format('%d', clock), 3600000
else
  local time = redis.call('TIME')
  entry, life = time[1] .. string.sub('00000' .. time[2], -6), 0
end

-- A list (a long log, or an older version's) fails the SET or the GET with
-- WRONGTYPE: pcall, and read it as a list below.
local stored
if ARGV[1] == '1' then
  stored = redis.pcall('SET', key, '@' .. entry, 'NX', 'PX', ARGV[2], 'GET')
  if not stored then return '@' .. entry end
else
  stored = redis.pcall('GET', key)
end
local list = type(stored) == 'table'
if list and not string.find(stored.err or '', 'WRONGTYPE', 1, true) then return stored end

local n, sp = 1, string.find(ARGV[3], ' ', 1, true)
if ARGV[1] ~= '1' then n = tonumber(ARGV[1]) end
local events, period = tonumber(string.sub(ARGV[3], 1, sp - 1)), tonumber(string.sub(ARGV[3], sp + 1))
clock = clock or tonumber(entry)

if not list then
  -- The short shape: '@', then the entries separated by spaces, oldest
  -- first. As sliding.lua's read: count the entries in the window, from
  -- from (where the oldest of them begins in stored; oldest its time, nil
  -- for none); newest the last entry's time, and now the time the decision
  -- is made at, newest if the server's clock stepped back. No table is
  -- made: a call's garbage costs the server too.
  local now, newest, count, from, oldest = clock, 0, 0, 2, nil
  if stored then
    count = 1
    local newestAt, space = 2, string.find(stored, ' ', 2, true)
    local first = space -- the end of the first entry, nil for one
    while space do
      count, newestAt = count + 1, space + 1
      space = string.find(stored, ' ', newestAt, true)
    end
    newest = tonumber(string.sub(stored, newestAt))
    if newest > now then now = newest end
    if first then oldest = tonumber(string.sub(stored, 2, first - 1)) else oldest = newest end
    while oldest <= now - period do -- the oldest entry has left the window
      count = count - 1
      if count == 0 then
        oldest = nil
        break
      end
      from, first = first + 1, string.find(stored, ' ', first + 1, true)
      if first then oldest = tonumber(string.sub(stored, from, first - 1)) else oldest = newest end
    end
  end
  if count + n > events then
    -- Refused: it fits once count + n - events entries have left, the last
    -- of them the (count + n - events)-th oldest in the window.
    local reset, refill = 0, 0
    if count > 0 then reset = newest + period - clock end
    if oldest then refill = math.min(oldest + period - clock, 9e18) end
    local at = from
    for _ = 2, count + n - events do at = string.find(stored, ' ', at, true) + 1 end
    local last = string.find(stored, ' ', at, true)
    local retry = tonumber(string.sub(stored, at, (last or 0) - 1)) + period - clock
    return string.format('0 %d %d %d 0 %d', events - count, math.min(retry, 9e18), math.min(reset, 9e18), refill)
  end
  local px = ARGV[2]
  if now ~= clock then
    entry, px = string.format('%d', now), string.format('%d', math.ceil((now + period - clock) / 1000 + life))
  end
  if count + n <= short then
    local log
    if n == 1 and count > 0 and from == 2 then
      log = stored .. ' ' .. entry -- none left the window: the usual case
    else
      log = '@'
      if count > 0 then log = '@' .. string.sub(stored, from) .. ' ' end
      if n > 1 then log = log .. string.rep(entry .. ' ', n - 1) end
      log = log .. entry
    end
    redis.call('SET', key, log, 'PX', px)
    if now == clock then return log end
  else
    -- Too long for the short shape: the log becomes a list, in chunks
    -- that stay within Lua's stack.
    local batch = {}
    if count > 0 then
      for e in string.gmatch(string.sub(stored, from), '[^ ]+') do batch[#batch + 1] = e end
    end
    if stored then redis.call('DEL', key) end
    local todo = n
    repeat
      local chunk = math.min(todo, 1000 - #batch)
      for i = 1, chunk do batch[#batch + 1] = entry end
      redis.call('RPUSH', key, unpack(batch))
      todo, batch = todo - chunk, {}
    until todo == 0
    redis.call('PEXPIRE', key, px)
  end
  local left = now + period - clock
  return string.format('1 %d 0 %d %s %d', events - count - n, math.min(left, 9e18), entry, math.min((oldest or now) + period - clock, 9e18))
end

-- A list: as sliding.lua's read. first is the index of the oldest entry
-- still in the window, oldest its time (nil for none); now is the time the
-- decision is made at, the newest entry's if the server's clock stepped
-- back. A list of fewer than tailSize entries is read whole in one
-- command; a longer one an entry at a time (LINDEX), with a binary search
-- for first, as sliding.lua reads it.
local tailSize = 8
local tail = redis.call('LRANGE', key, -tailSize, -1)
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
entry = string.format('%d', now)
local todo = n
while todo > 0 do
  local chunk = math.min(todo, 1000)
  local batch = {}
  for i = 1, chunk do batch[i] = entry end
  redis.call('RPUSH', key, unpack(batch))
  todo = todo - chunk
end
-- The key expires when its newest entry leaves the window on the server's
-- clock.
local left = now + period - clock
redis.call('PEXPIRE', key, math.ceil(left / 1000 + life))
return string.format('1 %d 0 %d %s %d', events - count - n, math.min(left, 9e18), entry, math.min((oldest or now) + period - clock, 9e18))
