-- fixed.lua: a fixed-window counter, after prelude.lua.
--
-- The same algorithm as keylimit.FixedWindow: windows of one period each,
-- aligned to multiples of the period since the Unix epoch, so every instance
-- (and the in-memory limiter) agrees on where a window starts; at most
-- events admissions per window.
--
-- KEYS[i]  the count alone, a decimal integer, as the plain take writes it
--          (take_fixed.lua): the admissions in the window that ends a ms
--          after the key's expiry, trusted to Redis's (a key holds while
--          now <= its expiry); a window of this period if that end is a
--          multiple of it, of another period otherwise; one that ends
--          more than a period after now is of a clock stepped back, or,
--          while the caller says its limit changed lately (the mark
--          "carry"), of a longer period: the state does not say which.
--          Or, as this script writes it, a string "=count flag period
--          seconds µs": the admissions in the window that holds the time
--          seconds + µs (µs within the second), one of period µs, stored,
--          not trusted to expiry. count takes 16 characters, right-aligned,
--          padded with spaces, not zeros, which miniredis's Lua reads as
--          octal (a FixedWindow counts at most 2^53 events per window).
--          flag is '#' if period is a whole number of seconds, ':' if not.
--          The key expires at the end of that window or later, when the
--          state is the same as no state at all. The plain take's INCRBY
--          fails on it (the caller hands the take here), and a version
--          without this shape fails on it too (WRONGTYPE: it reads a hash).
--          Or, as versions before it wrote the state, a string
--          "@seconds µs count period", or a hash {w = window index, c =
--          admissions in it, p = the period}, read as the same (a hash
--          without p is of the period of the limit that reads it), and
--          written in this shape by the first write.
--          Under the tests' clock, which Redis's expiries do not follow,
--          KEYS[i]..':x' holds a count's expiry on that clock, and a count
--          past it is no state (countExpiry).
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
  -- The key expires when the window ends on the server's clock: a count,
  -- as the plain take writes it, at the window's last ms; under a period
  -- not of whole ms, or on a server whose keys need not expire on its
  -- clock (miniredis: no redis.REDIS_VERSION), a state that stores its
  -- window.
  local function store(s, k)
    if k <= 0 then
      redis.call('DEL', s.key)
      return
    end
    if s.period % 1000 == 0 and redis.REDIS_VERSION then
      -- The window's last ms; in that ms, its end: no command keeps a key
      -- whose expiry is the ms the script began in on Valkey and Redis 7.2
      -- on (fixed.read tells the two apart).
      local stop = (s.window + 1) * s.period / 1000
      if stop - 1 > now_s * 1000 + math.floor(now_us / 1000) then stop = stop - 1 end
      local when = string.format('%d', stop)
      if fixed_clock then
        redis.call('SET', s.key, string.format('%d', k), 'PX', 3600000)
        redis.call('SET', s.key .. ':x', when, 'PX', 3600000)
      else
        redis.call('SET', s.key, string.format('%d', k), 'PXAT', when)
      end
      return
    end
    local start = s.window * s.period
    local sec = math.floor(start / 1e6)
    redis.call('SET', s.key, string.format('=%16d%s%s %d %d', k, s.flag, s.periodText, sec, start - sec * 1e6), 'PX', ttl(s.left / 1000))
  end

  -- countExpiry returns the expiry of a count that the plain take wrote
  -- (ms since the epoch; -1 if it has none), or -2 if it has passed: under
  -- the tests' clock, which Redis's expiries do not follow, key..':x'
  -- holds it on that clock (take_fixed.lua).
  local function countExpiry(key)
    if not fixed_clock then return redis.call('PEXPIRETIME', key) end
    local when = tonumber(redis.call('GET', key .. ':x') or '-1')
    if when >= 0 and now_s * 1000 + math.floor(now_ns / 1e6) > when then return -2 end
    return when
  end

  -- read: s.count is the admissions in the window that holds s.at, the
  -- time the decision is made at; s.left the µs until it ends on the
  -- server's clock (which may be behind s.at).
  function fixed.read(key, period, events, hint)
    local now = now_s * 1e6 + now_us -- µs since the Unix epoch
    local s = {key = key, period = period, events = events, count = 0, periodText = string.format('%d', period), flag = ':'}
    if period % 1e6 == 0 then s.flag = '#' end
    local state = redis.pcall('GET', key)
    local byte = state and type(state) ~= 'table' and string.byte(state)
    local carried -- the count of a window of another period that has not ended
    if byte and byte >= 48 and byte <= 57 then
      -- A digit: the count alone, which the plain take writes, expiring at
      -- its window's last ms (take_fixed.lua): a window of this period if
      -- it ends at a multiple of the period, of another's otherwise.
      local when = countExpiry(key)
      -- The window's end, µs: a ms after the expiry, or the expiry itself
      -- for a count written in its window's last ms (store).
      local stop = (when + 1) * 1000
      if when * 1000 % period == 0 then stop = when * 1000 end
      if when == -2 or (when >= 0 and stop <= now) then
        state = {} -- a window that has ended (on TIME, read after the key)
      elseif when >= 0 and stop % period == 0 and (stop - period <= now or hint ~= 'carry') then
        -- This period's window: now's, or a later one (a clock stepped
        -- back), unless the caller's limit changed lately (hint), when it
        -- may be a window of a longer period.
        state = {stop / period - 1, state, s.periodText}
      else
        -- A window of another period that holds now (or a count without
        -- an expiry).
        carried, state = tonumber(state), {}
      end
    elseif type(state) == 'table' or (state and byte ~= 61 and byte ~= 64) then
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
    elseif carried then
      s.stored = true
      if mode ~= 'refund' then
        s.count = carried
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
