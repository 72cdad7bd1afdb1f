-- take_bucket.lua: the plain decision of a token bucket, a script of its
-- own: take n under one limiter whose state counts in this limit's
-- interval, as lua/bucket.lua's take does, with nothing else in the script.
-- A state written under another interval is the full script's to convert:
-- the reply is then "full", and nothing is written.
--
-- KEYS[1] the state (bucket.lua says its shape). ARGV: n, interval, tau
-- (bucket.lua's parameters), and only in the package's tests the time,
-- seconds and ns (prelude.lua). The reply is bucket.lua's five integers.

local key, unit = KEYS[1], ARGV[2]
local n, interval, tau = tonumber(ARGV[1]), tonumber(unit), tonumber(ARGV[3])
-- life: what a key's expiry adds under the tests' clock (prelude.lua's ttl).
local now_s, now_ns, life
if ARGV[4] then
  now_s, now_ns, life = tonumber(ARGV[4]), tonumber(ARGV[5]), 3600000
else
  local time = redis.call('TIME')
  now_s, now_ns, life = tonumber(time[1]), tonumber(time[2]) * 1000, 0
end

-- tat: the TAT now + a as stored (seconds, then 9 digits of ns).
local function tatAt(a)
  local total = now_ns + a
  local ns = math.fmod(total, 1e9)
  return string.format('%d%09d', now_s + (total - ns) / 1e9, ns)
end

-- A missing key is a full bucket: the take then writes now + n × interval
-- in this interval. So that this, the common case of a loose limit, costs
-- one command and not two, the script writes that state unless the key
-- exists (NX), and reads the key in the same command (GET): a nil reply
-- means there was none, and the state written is the decision's; a state
-- read means nothing was written, and the decision is the read state's,
-- as below. (n × interval <= tau whenever n <= burst, as the caller
-- checks; otherwise the request is refused, below, without a write.)
local ahead, rest = 0, unit
local next = n * interval
local stored
if next <= tau then
  local tat = tatAt(next)
  stored = redis.call('SET', key, tat .. ' ' .. unit, 'NX', 'PX', math.ceil(next / 1e6) + life, 'GET')
  if not stored then
    return string.format('1 %d 0 %d %s', math.min(math.floor((tau - next) / interval), math.floor(tau / interval)), next, tat)
  end
else
  stored = redis.call('GET', key)
end
-- rest: the state after its TAT, kept as it is: the interval, and the
-- longest lease time written, if any.
if stored then
  local tat = stored
  local sp = string.find(stored, ' ', 1, true)
  if sp then
    tat, rest = string.sub(stored, 1, sp - 1), string.sub(stored, sp + 1)
    local hold = string.find(rest, ' ', 1, true)
    if (hold and string.sub(rest, 1, hold - 1) or rest) ~= unit then return 'full' end
  end
  ahead = (tonumber(string.sub(tat, 1, -10)) - now_s) * 1e9 + (tonumber(string.sub(tat, -9)) - now_ns)
end

local base = math.max(ahead, 0)
next = base + n * interval
local burst = math.floor(tau / interval)
if next > tau then
  return string.format('0 %d %d %d 0', math.min(math.max(math.floor((tau - base) / interval), 0), burst),
    math.min(next - tau, 9e18), math.min(base, 9e18))
end
local tat = tatAt(next)
redis.call('SET', key, tat .. ' ' .. rest, 'PX', math.ceil(next / 1e6) + life)
return string.format('1 %d 0 %d %s', math.min(math.floor((tau - next) / interval), burst), next, tat)
