-- take_fixed.lua: the plain decision of a fixed window, a script of its
-- own: take n under one limiter whose state counts in this limit's period,
-- as lua/fixed.lua's take does, with nothing else in the script. A state
-- written under another period is the full script's: the reply is then
-- "full", and nothing is written. So is a state of an older shape: a
-- string "@…", which the full script reads and writes anew, or a hash,
-- on which the SET fails (WRONGTYPE), which the caller takes to mean the
-- same (redis.pcall would cost every call more than the SET's GET).
--
-- KEYS[1] the state, "=count flag period seconds µs" (fixed.lua says the
-- shape). ARGV: the head of a state of n events under this limit,
-- "=n flag period " (n in 16 characters, right-aligned; flag '#' for a
-- period of whole seconds, ':' for another; n at most events: the caller
-- refuses a larger n without a call); the expiry in ms of the state of a window's first
-- take (one period, rounded up: the window that holds now ends no later;
-- or 0, for a period longer than a second: the window's end, which the
-- script computes); events; and only in the package's tests the time,
-- seconds and ns (prelude.lua).
--
-- The reply, for an admission, is the state of a window's first take,
-- which it wrote (the head, then the time: "=n flag period seconds µs"),
-- or "=count seconds µs", the window's count after the take (16
-- characters) and the time of the take; the caller reads the rest from
-- either: the window that holds that time, and the µs until it ends.
-- Otherwise it is fixed.lua's five integers.
--
-- As in take_bucket.lua, the take of a window's first event costs TIME and
-- one SET, of one string made of TIME's strings and ARGV's as they are: a
-- state of an earlier window has expired, and the take writes its state
-- unless one exists (NX), reading it in the same command (GET). A take
-- within the same second as the state's time, under a period of whole
-- seconds, is in the state's window: it reads no number but the two
-- counts and events, and writes the count alone, in place (SETRANGE, which
-- keeps the expiry), the width of the field kept by its 16 characters.

local s, us = ARGV[4], nil
if s then
  us = string.format('%d', math.floor(ARGV[5] / 1000))
else
  local time = redis.call('TIME')
  s, us = time[1], time[2]
end
local head, px = ARGV[1], ARGV[2]
local fresh = head .. s .. ' ' .. us
if px == '0' then -- a period longer than a second: the state expires at its window's end
  local period = tonumber(string.sub(head, 19, -2))
  local left = period - (tonumber(s) * 1e6 + tonumber(us)) % period
  px = string.format('%d', math.ceil(left / 1000) + (ARGV[4] and 3600000 or 0))
end
local stored = redis.call('SET', KEYS[1], fresh, 'NX', 'PX', px, 'GET')
if not stored then return fresh end

-- e: the end of "flag period seconds " in fresh, from byte 18. Equal in
-- the state: the same period, and the same second.
local e = #head + #s + 1
if string.sub(stored, 18, e) == string.sub(fresh, 18, e) and string.byte(head, 18) == 35 then
  local count = string.sub(stored, 2, 17) + string.sub(head, 2, 17)
  if count <= ARGV[3] + 0 then
    local text = string.format('=%16d', count)
    redis.call('SETRANGE', KEYS[1], '0', text)
    return text .. ' ' .. s .. ' ' .. us
  end
end
if string.byte(stored) ~= 61 then return 'full' end -- '@': an older shape

local f1 = string.find(stored, ' ', 19, true)
local f2 = string.find(stored, ' ', f1 + 1, true)
local periodText = string.sub(head, 19, -2)
if string.sub(stored, 19, f1 - 1) ~= periodText then return 'full' end
local n, period, events = tonumber(string.sub(head, 2, 17)), tonumber(periodText), tonumber(ARGV[3])
local now, life = tonumber(s) * 1e6 + tonumber(us), 0
if ARGV[4] then life = 3600000 end -- prelude.lua's ttl under the tests' clock
local t = tonumber(string.sub(stored, f1 + 1, f2 - 1)) * 1e6 + tonumber(string.sub(stored, f2 + 1))
local w = (t - t % period) / period
-- Time only moves forward inside the state: a state of a later window (the
-- server's clock stepped back) is decided at that window's start.
local at = math.max(now, w * period)
local into = at % period
local window = (at - into) / period
local left = period - into + at - now
local count = 0
if w == window then count = tonumber(string.sub(stored, 2, 17)) end

if count + n > events then
  local reset = 0
  if count > 0 then reset = left end
  return string.format('0 %d %d %d 0', events - count, math.min(left, 9e18), math.min(reset, 9e18))
end
if w ~= window then
  -- A state of an earlier window: this take is the first of its own.
  redis.call('SET', KEYS[1], fresh, 'PX', string.format('%d', math.ceil(left / 1000) + life))
  return fresh
end
local text = string.format('=%16d', count + n)
if at == now then
  -- The state's time becomes now's, in the same window, so that the takes
  -- in this second find it. A state of this window expires at its end or
  -- later already: whoever wrote the window set it.
  redis.call('SET', KEYS[1], text .. string.sub(fresh, 18), 'KEEPTTL')
  return text .. ' ' .. s .. ' ' .. us
end
-- A state of a later window (a clock stepped back): its time stays in it.
redis.call('SETRANGE', KEYS[1], '0', text)
return string.format('1 %d 0 %d %d', events - count - n, math.min(left, 9e18), window)
