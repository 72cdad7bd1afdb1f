-- take_fixed.lua: the plain decision of a fixed window, a script of its
-- own: take n under one limiter whose state counts in this limit's period,
-- as lua/fixed.lua's take does, with nothing else in the script. A state
-- written under another period is the full script's: the reply is then
-- "full", and nothing is written. So is a hash, as an older version wrote
-- the state: the SET fails on it (WRONGTYPE), which the caller takes to
-- mean the same (redis.pcall would cost every call more than the SET's
-- GET).
--
-- KEYS[1] the state (fixed.lua says its shapes). ARGV: "n period" (n at
-- most events: the caller refuses a larger n without a call); the expiry
-- in ms of the state of a window's first take (one period, rounded up:
-- the window that holds now ends no later; or 0, for a period longer than
-- a second: the window's end, which the script computes); events; and only in the
-- package's tests the time, seconds and ns (prelude.lua). The reply is
-- fixed.lua's five integers, or, for the take of a window's first event,
-- the state it wrote, "@seconds µs n period", from which the caller reads
-- the rest: the window that holds that time, and the µs until it ends.
--
-- As in take_bucket.lua, the common case costs TIME and one SET, of one
-- string made of TIME's strings and ARGV's as they are: a state of an
-- earlier window has expired, and the take of a window's first event
-- writes its state unless one exists (NX), reading it in the same command
-- (GET).

local s, us = ARGV[4], nil
if s then
  us = string.format('%d', math.floor(ARGV[5] / 1000))
else
  local time = redis.call('TIME')
  s, us = time[1], time[2]
end
local fresh, px = '@' .. s .. ' ' .. us .. ' ' .. ARGV[1], ARGV[2]
if px == '0' then -- a period longer than a second: the state expires at its window's end
  local period = tonumber(string.sub(ARGV[1], string.find(ARGV[1], ' ', 1, true) + 1))
  local left = period - (tonumber(s) * 1e6 + tonumber(us)) % period
  px = string.format('%d', math.ceil(left / 1000) + (ARGV[4] and 3600000 or 0))
end
local stored = redis.call('SET', KEYS[1], fresh, 'NX', 'PX', px, 'GET')
if not stored then return fresh end
if string.byte(stored) ~= 64 then return 'full' end

local sp = string.find(ARGV[1], ' ', 1, true)
local n, periodText, events = tonumber(string.sub(ARGV[1], 1, sp - 1)), string.sub(ARGV[1], sp + 1), tonumber(ARGV[3])
local period = tonumber(periodText)
local now, life = tonumber(s) * 1e6 + tonumber(us), 0
if ARGV[4] then life = 3600000 end -- prelude.lua's ttl under the tests' clock
-- The state: "@seconds µs count period", of the window that holds that time.
local f1 = string.find(stored, ' ', 2, true)
local f2 = string.find(stored, ' ', f1 + 1, true)
local f3 = string.find(stored, ' ', f2 + 1, true)
if string.sub(stored, f3 + 1) ~= periodText then return 'full' end
local t = tonumber(string.sub(stored, 2, f1 - 1)) * 1e6 + tonumber(string.sub(stored, f1 + 1, f2 - 1))
local w = (t - t % period) / period
-- Time only moves forward inside the state: a state of a later window (the
-- server's clock stepped back) is decided at that window's start.
local at = math.max(now, w * period)
local into = at % period
local window = (at - into) / period
local left = period - into + at - now
local count = 0
if w == window then count = tonumber(string.sub(stored, f2 + 1, f3 - 1)) end

if count + n > events then
  local reset = 0
  if count > 0 then reset = left end
  return string.format('0 %d %d %d 0', events - count, math.min(left, 9e18), math.min(reset, 9e18))
end
if w == window then
  -- A state of this window expires at its end or later already: whoever
  -- wrote the window set it, and a server clock stepped back since only
  -- makes it later.
  redis.call('SET', KEYS[1], string.sub(stored, 1, f2) .. string.format('%d ', count + n) .. periodText, 'KEEPTTL')
else
  redis.call('SET', KEYS[1], fresh, 'PX', string.format('%d', math.ceil(left / 1000) + life))
end
return string.format('1 %d 0 %d %d', events - count - n, math.min(left, 9e18), window)
