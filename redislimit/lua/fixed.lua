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

if uses.fixed then
  local fixed = {}
  algs.fixed = fixed

  -- store writes count k for s's window, or deletes the state when k is 0.
  -- The key expires when the window ends on the server's clock.
  local function store(s, k)
    if k <= 0 then
      redis.call('DEL', s.key)
      return
    end
    redis.call('HSET', s.key, 'w', s.windowText, 'c', k, 'p', s.periodText)
    redis.call('PEXPIRE', s.key, ttl(s.left / 1000))
  end

  -- reset: until the quota is whole again; 0 when nothing was admitted.
  local function reset(s, k)
    if k > 0 then return s.left end
    return 0
  end

  -- read: s.count is the admissions in the window that holds s.at, the
  -- time the decision is made at; s.left the µs until it ends on the
  -- server's clock (which may be behind s.at).
  function fixed.read(key, period, events)
    local now = now_s * 1e6 + now_us -- µs since the Unix epoch
    local s = {key = key, period = period, events = events, count = 0, periodText = string.format('%d', period)}
    local state = redis.call('HMGET', key, 'w', 'c', 'p')
    local w, c, p
    local at = now
    if state[1] then
      w, c, p = tonumber(state[1]), tonumber(state[2]), state[3] or s.periodText
      s.stored, s.same = true, p == s.periodText
      -- Time only moves forward inside the state: if the server's clock
      -- stepped back before the stored window began, decide as at its
      -- start, so that its count is not forgotten.
      at = math.max(now, w * tonumber(p))
    end
    -- fmod is exact on doubles; so is the division of a multiple of period.
    local into = math.fmod(at, period)
    if into < 0 then into = into + period end
    s.window = (at - into) / period
    s.windowText = string.format('%d', s.window)
    s.left = period - into + at - now
    if state[1] then
      if s.same then
        if w == s.window then s.count = c end
      elseif mode ~= 'refund' then
        -- Counted in a window of another period: carried if that window
        -- has not ended, and written so.
        if at < (w + 1) * tonumber(p) then s.count = c end
        store(s, s.count)
        s.same = true
      end
    end
    return s
  end

  function fixed.fits(s, k)
    return s.count + k <= s.events
  end

  -- Refused: nothing is written; the next window starts afresh.
  function fixed.refused(s, k)
    return reply(0, s.events - s.count, s.left, reset(s, s.count))
  end

  function fixed.peek(s)
    if fixed.fits(s, 1) then
      return reply(1, s.events - s.count, 0, reset(s, s.count))
    end
    return fixed.refused(s, 1)
  end

  function fixed.admit(s, k)
    store(s, s.count + k)
    return reply(1, s.events - s.count - k, 0, s.left, s.windowText)
  end

  -- refund gives back only while the admission's window is the current
  -- one, counted in the admission's period (the caller passes the
  -- parameters of the admission's limit): the events of a window that has
  -- ended are gone already, and must not come off the next window's count.
  function fixed.refund(s, k, mark)
    if s.stored and s.same and mark == s.windowText then
      local count = math.max(s.count - k, 0)
      if count ~= s.count then store(s, count) end
      s.count = count
    end
    return reply(1, s.events - s.count, 0, reset(s, s.count))
  end
end
