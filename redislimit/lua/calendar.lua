-- calendar.lua: a fixed window on the periods of a calendar in a time zone
-- (keylimit.PerCalendar), after prelude.lua.
--
-- Redis has no tz database, so the caller computes the window from the
-- zone's rules, at its own time, and passes it; the script decides on the
-- server's clock, and refuses to decide in a window that does not hold the
-- server's time: the call's reply is the error "redislimit: calendar stale T",
-- T the server's time in µs, and the caller computes the window at T and
-- calls again (once: see calendar.go). Every instance computes the same
-- window for the same time from the same zone.
--
-- KEYS[i]  a hash {w = the start of the window counted in, e = its end,
--          both in seconds since the Unix epoch, c = admissions in it},
--          expiring at the window's end on the server's clock. The window
--          is stored, not trusted to expiry, as in fixed.lua.
-- Parameters: the window's start in seconds since the Unix epoch, and its
-- length in seconds × 2^31 + the events per window (a calendar window on
-- Redis admits fewer than 2^31 events; the sum is exact in a double).
-- Times in the reply are in µs; the mark of an admission is its window's
-- start.
--
-- A count of another window that has not ended (the key's zone changed)
-- becomes the count of the new zone's window that holds the old window's
-- last second, written so by the first take or peek: a change of zone
-- never gives a fresh quota, nor ends the window earlier than the old zone
-- would have, as in memory. The caller passes the window at its time, and
-- at that second's instead when the script names it (stale).

if uses.calendar then
  local calendar = {}
  algs.calendar = calendar

  local function store(s, k)
    if k <= 0 then
      redis.call('DEL', s.key)
      return
    end
    redis.call('HSET', s.key, 'w', s.windowText, 'e', s.stopText, 'c', k)
    redis.call('PEXPIRE', s.key, ttl(s.left / 1000))
  end

  function calendar.read(key, start, packed)
    local events = packed % 2147483648
    local stop = start + (packed - events) / 2147483648
    local now = now_s * 1e6 + now_us
    local at = now
    local state = redis.call('HMGET', key, 'w', 'e', 'c')
    local w, e, c
    -- held: the time the window passed must hold.
    local held = at
    if state[1] then
      w, e, c = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
      -- Time only moves forward inside the state.
      at = math.max(now, w * 1e6)
      held = at
      if w ~= start and at < e * 1e6 and mode ~= 'refund' then
        -- Another zone's window that has not ended: the count goes to the
        -- window that holds its last second (boundaries are whole seconds).
        held = math.max(at, (e - 1) * 1e6)
      end
    end
    if held < start * 1e6 or held >= stop * 1e6 then
      -- Not error({err = ...}): miniredis's Lua does not take a table for
      -- an error reply; decide.lua returns one for a state marked stale.
      return {stale = held}
    end
    local s = {key = key, events = events, count = 0, windowText = string.format('%d', start),
      stopText = string.format('%d', stop), left = stop * 1e6 - now}
    if state[1] then
      s.stored = true
      if w == start then
        s.count, s.kept = c, true
      elseif mode ~= 'refund' and at < e * 1e6 then
        s.count = c
        store(s, c)
      end
    end
    return s
  end

  counted(calendar, store)
end
