-- take_fixed.lua: the plain decision of a fixed window, a script of its
-- own: take n under one limiter whose state counts in this limit's period,
-- as lua/fixed.lua's take does, with nothing else in the script. A state
-- written under another period is the full script's to convert: the reply
-- is then "full", and nothing is written.
--
-- KEYS[1] the state (fixed.lua says its shape). ARGV: n, period, events
-- (fixed.lua's parameters), and only in the package's tests the time,
-- seconds and ns (prelude.lua). The reply is fixed.lua's five integers.

local key, periodText = KEYS[1], ARGV[2]
local n, period, events = tonumber(ARGV[1]), tonumber(periodText), tonumber(ARGV[3])
-- life: what a key's expiry adds under the tests' clock (prelude.lua's ttl).
local now, life
if ARGV[4] then
  now, life = tonumber(ARGV[4]) * 1e6 + math.floor(tonumber(ARGV[5]) / 1000), 3600000
else
  local time = redis.call('TIME')
  now, life = tonumber(time[1]) * 1e6 + tonumber(time[2]), 0
end

local state = redis.call('HMGET', key, 'w', 'c', 'p')
local w, at, count = nil, now, 0
if state[1] then
  if state[3] and state[3] ~= periodText then return 'full' end
  w = tonumber(state[1])
  at = math.max(now, w * period)
end
local into = math.fmod(at, period)
if into < 0 then into = into + period end
local window = (at - into) / period
local left = period - into + at - now
if w == window then count = tonumber(state[2]) end

if count + n > events then
  local reset = 0
  if count > 0 then reset = left end
  return string.format('0 %d %d %d 0', events - count, math.min(left, 9e18), math.min(reset, 9e18))
end
local windowText = string.format('%d', window)
redis.call('HSET', key, 'w', windowText, 'c', count + n, 'p', periodText)
-- A state of this window expires at its end already: whoever wrote the
-- window set it, and a server clock stepped back since only makes it later.
if w ~= window then redis.call('PEXPIRE', key, math.ceil(left / 1000) + life) end
return string.format('1 %d 0 %d %s', events - count - n, math.min(left, 9e18), windowText)
