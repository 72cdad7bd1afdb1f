-- take_bucket.lua: the plain decision of a token bucket, a script of its
-- own: take n under one limiter whose state counts in this limit's
-- interval, as lua/bucket.lua's take does, with nothing else in the script.
-- A state written under another interval is the full script's to convert:
-- the reply is then "full", and nothing is written.
--
-- KEYS[1] the state (bucket.lua says its shapes). ARGV: "a interval", a =
-- n × interval (at most tau: the caller refuses a larger n without a
-- call); the expiry in ms of a fresh take's state (a ns, rounded up);
-- tau; and only in the package's tests the time, seconds and ns
-- (prelude.lua). The reply is bucket.lua's five integers, or, for an
-- admission on a key without state or with a state of that shape, the state
-- it wrote, "@seconds ns a interval" with a = TAT - now, from which the
-- caller reads the rest (bucket.lua).
--
-- What the server spends on a call is mostly its commands and the strings
-- made and parsed: a redis.call costs more than all the arithmetic around
-- it, reading a number from a string (strtod) or printing one (sprintf)
-- about a tenth of one. So the common case, a key without state, runs TIME
-- and one SET and makes one string, of TIME's strings and ARGV's as they
-- are: bucket.lua's fresh state, "@seconds ns a interval".

-- What follows up to "Per key" depends on ARGV and the time alone: a batch
-- (lua/take_batch.lua) runs it once for all its keys.
local s, ns, unit = ARGV[4], ARGV[5], '000 ' -- unit: what makes TIME's µs ns
if not s then
  local time = redis.call('TIME')
  s, ns = time[1], time[2]
else
  unit = ' '
end

-- A missing key is a full bucket: the take then writes now + n × interval
-- in this interval. So that this costs one command and not two, the script
-- writes that state unless the key exists (NX), and reads the key in the
-- same command (GET): a nil reply means there was none, and the state
-- written is the decision's; a state read means nothing was written, and
-- the decision is the read state's, as below.
local fresh = '@' .. s .. ' ' .. ns .. unit .. ARGV[1]

-- Per key.
local stored = redis.call('SET', KEYS[1], fresh, 'NX', 'PX', ARGV[2], 'GET')
if not stored then return fresh end

-- Numbers are read by coercion (cheaper than tonumber's call), and
-- ARGV[1] split by one match.
local now_s, now_ns, life = s + 0, ns + 0, 3600000 -- life: prelude.lua's ttl under the tests' clock
if unit ~= ' ' then now_ns, life = now_ns * 1000, 0 end
local next, interval = string.match(ARGV[1], '^(%d+) (.*)$')
local tau
next, tau = next + 0, ARGV[3] + 0
-- ahead: TAT - now, in ns; rest: the state after its TAT, kept as it is:
-- the interval, and the longest lease time written, if any.
local ahead, rest
if string.byte(stored) == 64 then -- '@': a fresh take's state
  -- One match, not finds and subs: 4.7k instructions less a take.
  local sec, ns0, a0
  sec, ns0, a0, rest = string.match(stored, '^@(%-?%d+) (%d+) (%d+) (.*)$')
  if rest ~= interval then return 'full' end -- another interval, or no such state
  ahead = (sec - now_s) * 1e9 + (ns0 - now_ns) + a0
else
  local tat = stored
  rest = interval
  local sp = string.find(stored, ' ', 1, true)
  if sp then
    tat, rest = string.sub(stored, 1, sp - 1), string.sub(stored, sp + 1)
    local hold = string.find(rest, ' ', 1, true)
    if (hold and string.sub(rest, 1, hold - 1) or rest) ~= interval then return 'full' end
  end
  ahead = (string.sub(tat, 1, -10) - now_s) * 1e9 + (string.sub(tat, -9) - now_ns)
end

-- An admission on a state that keeps no lease time writes the fresh take's
-- shape from now, "@seconds ns a interval" with a = TAT - now, which is
-- also the reply: the caller reads it as a fresh take's. So no TAT is
-- printed as ns since the epoch, and no reply of numbers.
local a = math.max(ahead, 0) + next
if a <= tau and rest == interval then
  local state = '@' .. s .. ' ' .. ns .. unit .. string.format('%d', a) .. ' ' .. interval
  redis.call('SET', KEYS[1], state, 'PX', string.format('%d', math.ceil(a / 1e6) + life))
  return state
end

local step = interval + 0
local base = math.max(ahead, 0)
next = base + next
local burst = math.floor(tau / step)
if next > tau then
  return string.format('0 %d %d %d 0', math.min(math.max(math.floor((tau - base) / step), 0), burst),
    math.min(next - tau, 9e18), math.min(base, 9e18))
end
local total = now_ns + next
local r = math.fmod(total, 1e9)
local tat = string.format('%d%09d', now_s + (total - r) / 1e9, r)
redis.call('SET', KEYS[1], tat .. ' ' .. rest, 'PX', string.format('%d', math.ceil(next / 1e6) + life))
return string.format('1 %d 0 %d %s', math.min(math.floor((tau - next) / step), burst), next, tat)
