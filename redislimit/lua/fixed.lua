-- fixed.lua: one decision of a fixed-window counter, after prelude.lua.
--
-- The same algorithm as keylimit.FixedWindow: windows of one period each,
-- aligned to multiples of the period since the Unix epoch, so every instance
-- (and the in-memory limiter) agrees on where a window starts; at most
-- events admissions per window.
--
-- KEYS[1]  the key's state: a hash {w = window index, c = admissions in it},
--          expiring at the end of window w, when the state is the same as no
--          state at all. The window index is stored, not trusted to expiry:
--          PEXPIRE has ms resolution and may lag, so a state left over from
--          an earlier window is recognised and ignored.
-- ARGV[3]  period in µs (the caller requires a whole number of µs).
-- ARGV[4]  events per window.
--
-- Modes: take n admissions; peek at 1; refund the n admissions of the
-- window mark, if it is still the state's. The mark of an admission is its
-- window's index.
-- Remaining is in events; times in the reply are in µs, the resolution of
-- TIME: Unix time in µs (about 2^51) is exact in a Lua double, and so is
-- every sum below.

local period = tonumber(ARGV[3])
local events = tonumber(ARGV[4])

local now = now_s * 1e6 + now_us -- µs since the Unix epoch
-- fmod is exact on doubles; so is the division of a multiple of period.
local into = math.fmod(now, period)
local window = (now - into) / period
local left = period - into -- µs until this window ends

-- count: admissions in the current window.
local count = 0
local state = redis.call('HMGET', key, 'w', 'c')
if state[1] and tonumber(state[1]) == window then
  count = tonumber(state[2])
end
local windowText = string.format('%d', window)

-- reset: until the quota is whole again; 0 when nothing was admitted.
local function reset(c)
  if c > 0 then return left end
  return 0
end

-- store writes count c for this window, or deletes the state when c is 0.
local function store(c)
  if c <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'w', string.format('%d', window), 'c', c)
  redis.call('PEXPIRE', key, math.ceil(left / 1000))
end

if mode == 'take' then
  if count + n > events then
    -- Refused: nothing is written; the next window starts afresh.
    return reply(0, events - count, left, reset(count))
  end
  store(count + n)
  return reply(1, events - count - n, 0, left, windowText)
end

if mode == 'peek' then
  if count + 1 > events then
    return reply(0, events - count, left, reset(count))
  end
  return reply(1, events - count, 0, reset(count))
end

if mode == 'refund' then
  -- Only while the admission's window is the current one: the events of a
  -- window that has ended are gone already, and must not come off the
  -- next window's count.
  if mark == windowText then
    local c = math.max(count - n, 0)
    if c ~= count then store(c) end
    count = c
  end
  return reply(1, events - count, 0, reset(count))
end
