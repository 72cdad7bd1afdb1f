-- fixed.lua: a fixed-window counter, after prelude.lua.
--
-- The same algorithm as keylimit.FixedWindow: windows of one period each,
-- aligned to multiples of the period since the Unix epoch, so every instance
-- (and the in-memory limiter) agrees on where a window starts; at most
-- events admissions per window.
--
-- KEYS[i]  a string "=count flag period seconds µs": the admissions in the
--          window that holds the time seconds + µs (µs within the second),
--          one of period µs. count takes 16 characters, right-aligned (a
--          take writes it in place: take_fixed.lua), padded with spaces,
--          not zeros, which miniredis's Lua reads as octal (a FixedWindow
--          counts at most 2^53 events per window). flag is '#' if period
--          is a whole number of seconds, ':' if not: the plain take
--          compares the state's flag, period and second with its own, and
--          so tells a take in the state's second under such a period
--          without reading a number. The key expires at the end of that
--          window or later (the plain take of a window's first event,
--          take_fixed.lua, sets one period from its time if the period is
--          at most a second), when the state is the same as no state at
--          all. The window is stored, not trusted to expiry: PEXPIRE has
--          ms resolution and may lag, so a state left over from an earlier
--          window is recognised and ignored. The leading '=' keeps a
--          version without this shape from reading it: that one reads a
--          hash, and fails on a string (WRONGTYPE).
--          Or, as versions before it wrote the state, a string
--          "@seconds µs count period", or a hash {w = window index, c =
--          admissions in it, p = the period}, read as the same (a hash
--          without p is of the period of the limit that reads it), and
--          written in this shape by the first write.
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
--
-- A lease (WithLeases) counts its events in the window that holds now, and
-- the instance spends them before that window ends: the count stays exact.

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
    local start = s.window * s.period
    local sec = math.floor(start / 1e6)
    redis.call('SET', s.key, string.format('=%16d%s%s %d %d', k, s.flag, s.periodText, sec, start - sec * 1e6), 'PX', ttl(s.left / 1000))
  end

  -- read: s.count is the admissions in the window that holds s.at, the
  -- time the decision is made at; s.left the µs until it ends on the
  -- server's clock (which may be behind s.at).
  function fixed.read(key, period, events)
    local now = now_s * 1e6 + now_us -- µs since the Unix epoch
    local s = {key = key, period = period, events = events, count = 0, periodText = string.format('%d', period), flag = ':'}
    if period % 1e6 == 0 then s.flag = '#' end
    local state = redis.pcall('GET', key)
    local byte = state and type(state) ~= 'table' and string.byte(state)
    if type(state) == 'table' or (state and byte ~= 61 and byte ~= 64) then
      -- WRONGTYPE: a hash, as an older version wrote it. (A string of
      -- another shape is no state of a window: HMGET fails on it.)
      state = redis.call('HMGET', key, 'w', 'c', 'p')
    elseif byte == 61 then -- '=': "=count flag period seconds µs"
      local f1 = string.find(state, ' ', 19, true)
      local f2 = string.find(state, ' ', f1 + 1, true)
      local p = string.sub(state, 19, f1 - 1)
      local t = tonumber(string.sub(state, f1 + 1, f2 - 1)) * 1e6 + tonumber(string.sub(state, f2 + 1))
      state = {math.floor(t / tonumber(p)), string.sub(state, 2, 17), p}
    elseif state then -- '@': "@seconds µs count period", an older version's
      local f1 = string.find(state, ' ', 2, true)
      local f2 = string.find(state, ' ', f1 + 1, true)
      local f3 = string.find(state, ' ', f2 + 1, true)
      local p = string.sub(state, f3 + 1)
      local t = tonumber(string.sub(state, 2, f1 - 1)) * 1e6 + tonumber(string.sub(state, f1 + 1, f2 - 1))
      state = {math.floor(t / tonumber(p)), string.sub(state, f2 + 1, f3 - 1), p}
    else
      state = {}
    end
    local w, c, p
    local at = now
    if state[1] then
      w, c, p = tonumber(state[1]), tonumber(state[2]), state[3] or s.periodText
      s.stored, s.same = true, p == s.periodText
      s.kept = s.same -- counted in this period before this call
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

  counted(fixed, store)

  -- lease admits k (which fits) and takes up to want more in this window;
  -- hold does not matter here. If not one more fits, it is admit. The
  -- reply ends with the events leased, a pace of 0 (no pace: see
  -- bucket.lua's paced) and a lease time of 0 (the window's).
  function fixed.lease(s, k, want, hold)
    local x = math.min(want, s.events - s.count - k)
    if x < 1 then
      return fixed.admit(s, k) .. ' 0 0 0'
    end
    store(s, s.count + k + x)
    return reply(1, s.events - s.count - k - x, 0, s.left, s.windowText) .. string.format(' %d 0 0', x)
  end
end
