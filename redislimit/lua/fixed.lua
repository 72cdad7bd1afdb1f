-- fixed.lua: a fixed-window counter, after prelude.lua.
--
-- The same algorithm as keylimit.FixedWindow: windows of one period each,
-- aligned to multiples of the period since the Unix epoch, so every instance
-- (and the in-memory limiter) agrees on where a window starts; at most
-- events admissions per window.
--
-- KEYS[i]  a hash {w = window index, c = admissions in it, p = the period
--          the window is one of, in µs}, expiring at the end of window w,
--          when the state is the same as no state at all. The window index
--          is stored, not trusted to expiry: PEXPIRE has ms resolution and
--          may lag, so a state left over from an earlier window is
--          recognised and ignored. (A state without p is of the period of
--          the limit that reads it.)
-- Parameters: the period in µs (the caller requires a whole number of µs),
-- and the events per window.
-- Remaining is in events; times in the reply are in µs, the resolution of
-- TIME: Unix time in µs (about 2^51) is exact in a Lua double, and so is
-- every sum below. The mark of an admission is its window's index.
--
-- A change of limit keeps the count, as the in-memory window does: a count
-- of a window of another period, if that window has not ended, becomes the
-- count of the window of this period that holds now (or that window's
-- start, if the clock stepped back before it), written so by the first
-- take or peek under the new limit (a refund passes the admission's limit,
-- and converts nothing). The count may be above events: Remaining is then
-- 0.

-- floorMod is x mod m in [0, m), for x of either sign; fmod is exact on
-- doubles.
local function floorMod(x, m)
  local r = math.fmod(x, m)
  if r < 0 then r = r + m end
  return r
end

algs.fixed = function(key, period, events)
  local o = {}
  local now = now_s * 1e6 + now_us -- µs since the Unix epoch
  local at = now -- the time the decision is made at

  local count = 0
  local state = redis.call('HMGET', key, 'w', 'c', 'p')
  local w, c, p
  if state[1] then
    w, c, p = tonumber(state[1]), tonumber(state[2]), tonumber(state[3]) or period
    -- Time only moves forward inside the state: if the server's clock
    -- stepped back before the stored window began, decide as at its start,
    -- so that its count is not forgotten.
    at = math.max(now, w * p)
  end
  local into = floorMod(at, period)
  local window = (at - into) / period
  -- left: µs until this window ends, on the server's clock (which may be
  -- behind at, the time the decision is made at).
  local left = period - into + at - now
  local convert = false
  if state[1] then
    if p == period then
      if w == window then count = c end
    else
      convert = mode ~= 'refund'
      if at < (w + 1) * p then
        count = c -- carried from a window of another period that has not ended
      end
    end
  end
  local windowText = int(window)

  -- reset: until the quota is whole again; 0 when nothing was admitted.
  local function reset(k)
    if k > 0 then return left end
    return 0
  end

  -- store writes count k for this window, or deletes the state when k is
  -- 0. The key expires when the window ends on the server's clock.
  local function store(k)
    if k <= 0 then
      redis.call('DEL', key)
      return
    end
    redis.call('HSET', key, 'w', windowText, 'c', k, 'p', int(period))
    expire(key, left / 1000)
  end

  if convert then
    store(count)
  end

  function o.fits(k)
    return count + k <= events
  end

  -- Refused: nothing is written; the next window starts afresh.
  function o.refused(k)
    return reply(0, events - count, left, reset(count))
  end

  function o.peek()
    if o.fits(1) then
      return reply(1, events - count, 0, reset(count))
    end
    return o.refused(1)
  end

  function o.admit(k)
    store(count + k)
    return reply(1, events - count - k, 0, left, windowText)
  end

  -- refund gives back only while the admission's window is the current
  -- one, counted in the admission's period (the caller passes the
  -- parameters of the admission's limit): the events of a window that has
  -- ended are gone already, and must not come off the next window's count.
  function o.refund(k, mark)
    if state[1] and p == period and mark == windowText then
      local left_count = math.max(count - k, 0)
      if left_count ~= count then store(left_count) end
      count = left_count
    end
    return reply(1, events - count, 0, reset(count))
  end

  return o
end
