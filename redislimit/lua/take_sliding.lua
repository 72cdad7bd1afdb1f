-- take_sliding.lua: the plain decision of a sliding log, a script of its
-- own: take n under one limiter, as lua/sliding.lua's take does, with
-- nothing else in the script (the full script defines its functions and
-- tables anew on every call, which costs the server more than the decision
-- itself). A sliding log's entries mean the same under any limit, so this
-- script never hands a take to the full one.
--
-- KEYS[1] the log, in any of sliding.lua's shapes. ARGV: the expiry in ms
-- of a log of the appendable shape (below: the period and the head's
-- epoch, rounded up, and a ms); the head (below), which names the period
-- in µs and the events; n, left out for 1 (an ARGV costs the server about
-- 1.2k instructions); and only in the package's tests, after n, the time,
-- seconds and ns (prelude.lua). short is set before this file
-- (scripts.go). The reply is sliding.lua's six integers, or, for an
-- admission at the server's time on a log of up to short entries, the log
-- it wrote, from which the caller reads the rest (take.go's slidingFresh).
--
-- What the server spends on a call is mostly its commands and the strings
-- made and read: a redis.call costs about 3k instructions before its work,
-- a Lua function call or a new string about 1k, reading a number 1k. So the
-- common cases read no number on the server:
--
-- A key without a log: TIME and one SET, which writes the log of one entry
-- unless the key exists (NX) and reads it in the same command (GET).
--
-- A key that comes back soon: the log that SET read, if it is of the
-- appendable shape under this head and epoch with room for one more entry,
-- takes the entry by one APPEND. That shape is
--
--   head epoch ' e1' ' e2' ...
--
-- head = '@', a letter for the epoch's digits d ('a' + d - 1), a digit for
-- min(events, short), the period in µs, '/', the events, ':' (take.go's
-- slidingHead); epoch = the first d digits of the time of the log's last
-- SET, 16 digits in µs: its 10^(16 - d) µs, the largest power of ten not
-- above the period, hold that time; each entry is a time of 16 digits in
-- µs, so each ' e' is 17 bytes, and the byte length of the log gives its
-- count. An entry's time is the
-- greatest of its own and those before it: APPEND does not read the log, so
-- an entry appended after a server's clock stepped back may be less than
-- the one before it, and counts as that one, which is the time the full
-- script would have recorded (it decides as of its newest entry then). The
-- log written by a SET expires a period and an epoch after the epoch's
-- start, or later: so it outlives by a period every entry appended within
-- its epoch, and a take within it needs no expiry set. A log whose entries
-- have left the window keeps them until a SET: they count for the room
-- (fewer than min(events, short) entries in all), not in a decision,
-- which is therefore the full script's: count + 1 <= events in the window.
--
-- A key that comes back in a later epoch (its log, under this head, holds
-- entries of that epoch only, all before now), or whose log is full: the
-- log is written anew by one SET, now's epoch, its entries as bytes, and
-- the new one, if that fits the room. A full log first loses the entries
-- that left the window as of now, read from the oldest until one is in
-- it (a clock stepped back keeps more: never fewer in a decision). At a
-- period of a second and a key coming back every half second, every
-- other take is of this kind.
--
-- Every other take (n > 1, another head or a later epoch, a full log none
-- of whose entries left, an older version's shape '@e1 e2 …', a list, a
-- time not of 16 digits) reads the log, decides and writes it back as
-- sliding.lua does: the appendable shape if it is of up to short entries
-- of 16 digits and the server's clock did not step back, '@e1 e2 …' with
-- the newest entry's expiry if it did, a list if it is longer.

-- What follows up to "Per key" depends on ARGV and the time alone: a batch
-- (lua/take_batch.lua) runs it once for all its keys.
local head, n = ARGV[2], ARGV[3] or '1'
-- app: ' ' and the time of an admission now, as the log writes it (µs
-- since the Unix epoch); clock: that time as a number, once it is needed;
-- life: what a key's expiry adds under the tests' clock (prelude.lua's
-- ttl).
local app, clock, life, epoch
-- digits: the epoch's, as a letter; room: min(events, short), as a digit.
local digits, room = string.byte(head, 2, 3)
if ARGV[4] then
  clock = tonumber(ARGV[4]) * 1e6 + math.floor(tonumber(ARGV[5]) / 1000)
  app, life = ' ' .. string.format('%d', clock), 3600000
  epoch = string.sub(app, 2, digits - 95)
else
  local time = redis.call('TIME')
  local s, us = time[1], time[2]
  if #us == 6 then
    app = ' ' .. s .. us
  else
    app = ' ' .. s .. string.sub('00000' .. us, -6)
  end
  -- An epoch of a second (a period of 1 to 10 s) is TIME's seconds.
  if digits == 106 then epoch = s else epoch = string.sub(app, 2, digits - 95) end
  life = 0
end
local prefix = head .. epoch
local fresh = prefix .. app

-- Per key.
local key = KEYS[1]

-- A list (a long log, or an older version's) fails the SET or the GET with
-- WRONGTYPE: pcall, and read it as a list below.
local stored
if n == '1' and #app == 17 then
  stored = redis.pcall('SET', key, fresh, 'NX', 'PX', ARGV[1], 'GET')
  if not stored then return fresh end
  -- (A string's err is the string library's: nil.)
  local same = not stored.err and string.find(stored, prefix, 1, true) == 1
  if same and #stored < #prefix + 17 * (room - 48) - 16 then
    redis.call('APPEND', key, app)
    return stored .. app
  end
  if (same or not stored.err and string.find(stored, head, 1, true) == 1 and string.sub(stored, #head + 1, #prefix) < epoch)
    and (#stored - #prefix) % 17 == 0 then
    -- Written anew in now's epoch (above).
    local at, full = #prefix + 1, 17 * (room - 48) - 16 -- at: the ' ' before the oldest entry kept
    if #stored - at + 1 >= full then
      local cut = (clock or string.sub(app, 2) + 0) - string.match(head, '^@..(%d+)/')
      while at < #stored and string.sub(stored, at + 1, at + 16) + 0 <= cut do at = at + 17 end
    end
    if #stored - at + 1 < full then
      local log = prefix .. string.sub(stored, at) .. app
      redis.call('SET', key, log, 'PX', ARGV[1])
      return log
    end
  end
else
  stored = redis.pcall('GET', key)
end
local list = type(stored) == 'table'
if list and not string.find(stored.err or '', 'WRONGTYPE', 1, true) then return stored end

-- The rest reads numbers, each by coercion (cheaper than tonumber's call).
local period, events = string.match(head, '^@..(%d+)/(%d+):$')
period, events = period + 0, events + 0
local n = n + 0
local entry = string.sub(app, 2)
local clock = clock or entry + 0

if not list then
  -- A string: times are its entries' times, each the greatest so far (see
  -- above); now is the time the decision is made at, the newest entry's if
  -- the server's clock stepped back. An appendable log's entries are read
  -- in place, 17 bytes each from its first ' ' (at), and only read again
  -- as text if one was out of order (sorted false); an older shape's into
  -- texts.
  local times, texts, at, sorted, now = {}, nil, 1, true, clock
  if stored then
    if (string.byte(stored, 2) or 0) >= 97 then
      at = string.find(stored, ' ', 1, true) or #stored + 1
      for i = at + 1, #stored, 17 do
        local t = string.sub(stored, i, i + 15) + 0
        if #times > 0 and t < times[#times] then t, sorted = times[#times], false end
        times[#times + 1] = t
      end
    else
      texts = {}
      for e in string.gmatch(string.sub(stored, 2), '[^ ]+') do
        local t = tonumber(e)
        if #times > 0 and t < times[#times] then e, t = texts[#texts], times[#times] end
        texts[#texts + 1], times[#times + 1] = e, t
      end
    end
    if #times > 0 and times[#times] > now then now = times[#times] end
  end
  -- first: the index of the oldest entry still in the window (from 1),
  -- oldest its time, nil for none.
  local first = 1
  while first <= #times and times[first] <= now - period do first = first + 1 end
  local count, oldest = #times - first + 1, times[first]
  if count + n > events then
    -- Refused: it fits once count + n - events entries have left, the last
    -- of them the (count + n - events)-th oldest in the window.
    local reset, refill = 0, 0
    if count > 0 then reset = times[#times] + period - clock end
    if oldest then refill = math.min(oldest + period - clock, 9e18) end
    local retry = times[first + count + n - events - 1] + period - clock
    return string.format('0 %d %d %d 0 %d', events - count, math.min(retry, 9e18), math.min(reset, 9e18), refill)
  end
  if now ~= clock then entry = string.format('%d', now) end
  -- kept: the texts of the entries in the window, when needed.
  local kept
  if not texts and not sorted then
    texts = {}
    for i = 1, #times do texts[i] = string.format('%d', times[i]) end
  end
  if texts then
    kept = {}
    for i = first, #texts do kept[#kept + 1] = texts[i] end
  end
  local left = now + period - clock
  if count + n <= short then
    if now == clock and #app == 17 and (not kept or count == 0 or (#kept[1] == 16 and string.byte(kept[1]) ~= 45)) then
      -- Entries of 16 digits (the oldest's and the newest's are, and
      -- those between lie between them): the appendable shape. Those of
      -- an appendable log in order are its bytes from the oldest kept on.
      local log, apps = nil, app
      if n > 1 then apps = string.rep(app, n) end
      if kept then
        log = prefix .. string.rep(' ', math.min(count, 1)) .. table.concat(kept, ' ') .. apps
      elseif count > 0 then
        log = prefix .. string.sub(stored, at + 17 * (first - 1)) .. apps
      else
        log = prefix .. apps
      end
      redis.call('SET', key, log, 'PX', ARGV[1])
      return log
    end
    if not kept then
      kept = {}
      for i = first, #times do kept[#kept + 1] = string.sub(stored, at + 17 * (i - 1) + 1, at + 17 * (i - 1) + 16) end
    end
    for i = 1, n do kept[#kept + 1] = entry end
    local log = '@' .. table.concat(kept, ' ')
    redis.call('SET', key, log, 'PX', string.format('%d', math.ceil(left / 1000 + life)))
    if now == clock then return log end
  else
    -- Too long for a string: the log becomes a list, in chunks that stay
    -- within Lua's stack.
    if not kept then
      kept = {}
      for i = first, #times do kept[#kept + 1] = string.sub(stored, at + 17 * (i - 1) + 1, at + 17 * (i - 1) + 16) end
    end
    if stored then redis.call('DEL', key) end
    if #kept > 0 then redis.call('RPUSH', key, unpack(kept)) end
    local todo = n
    repeat
      local chunk = math.min(todo, 1000)
      local batch = {}
      for i = 1, chunk do batch[i] = entry end
      redis.call('RPUSH', key, unpack(batch))
      todo = todo - chunk
    until todo == 0
    redis.call('PEXPIRE', key, string.format('%d', math.ceil(left / 1000 + life)))
  end
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
