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

-- rest: the state after its TAT, kept as it is: the interval, and the
-- longest lease time written, if any.
local ahead, rest = 0, unit
local stored = redis.call('GET', key)
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
local next = base + n * interval
local burst = math.floor(tau / interval)
if next > tau then
  return string.format('0 %d %d %d 0', math.min(math.max(math.floor((tau - base) / interval), 0), burst),
    math.min(next - tau, 9e18), math.min(base, 9e18))
end
local total = now_ns + next
local ns = math.fmod(total, 1e9)
local tat = string.format('%d%09d', now_s + (total - ns) / 1e9, ns)
redis.call('SET', key, tat .. ' ' .. rest, 'PX', math.ceil(next / 1e6) + life)
return string.format('1 %d 0 %d %s', math.min(math.floor((tau - next) / interval), burst), next, tat)
