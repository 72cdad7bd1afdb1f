-- sliding.lua: an exact sliding log, after prelude.lua.
--
-- The same algorithm as keylimit.SlidingWindow: the key keeps the times of
-- its admissions, and admits n iff fewer than events - n + 1 of them lie in
-- (now - period, now]. So no interval of length period ever holds more than
-- events admissions.
--
-- KEYS[i]  a list of admission times in µs since the Unix epoch, oldest
--          first; it expires when its newest entry leaves the window, and
--          the state is the same as none.
-- Parameters: the period in µs (the caller requires a whole number of µs),
-- and the events per period.
-- Remaining is in events; times in the reply are in µs, the resolution of
-- TIME: Unix time in µs (about 2^51) is exact in a Lua double, and so is
-- every sum below. The mark of an admission is the time it recorded.
--
-- A change of limit needs nothing: the times mean the same under any
-- limit. The list holds at most events entries of the window, more only
-- after the limit was lowered, until they leave it.

algs.sliding = function(key, period, events)
  local o = {}
  local clock = now_s * 1e6 + now_us -- µs since the Unix epoch
  local now = clock -- the time the decision is made at

  local len = redis.call('LLEN', key)
  local newest = 0
  if len > 0 then
    newest = tonumber(redis.call('LINDEX', key, -1))
    -- Time only moves forward inside the state: if the server's clock
    -- stepped back, decide as of the newest admission, so the list stays in
    -- order and no entry leaves the window early.
    if newest > now then now = newest end
  end

  -- at: the admission time at index i.
  local function at(i)
    return tonumber(redis.call('LINDEX', key, i))
  end

  -- first: index of the oldest entry still in the window (t > now - period).
  -- Entries before it have left; admit trims them, peek only skips them.
  -- The list is in order, so a binary search finds it in O(log events)
  -- LINDEX calls; usually the head is still in the window and one call
  -- suffices.
  local first = 0
  if len > 0 and at(0) <= now - period then
    local lo, hi = 1, len -- at(lo - 1) has left; at(hi) is in, or hi == len
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if at(mid) <= now - period then lo = mid + 1 else hi = mid end
    end
    first = lo
  end
  local count = len - first

  -- leaves: µs until the entry at index i leaves the window, on the
  -- server's clock (which may be behind now, the time the decision is made
  -- at).
  local function leaves(i)
    return at(i) + period - clock
  end

  local function reset(k)
    if k > 0 then return newest + period - clock end
    return 0
  end

  function o.fits(k)
    return count + k <= events
  end

  -- refused: k does not fit until count + k - events entries have left; the
  -- last of those to leave is the (count + k - events)-th oldest in the
  -- window.
  function o.refused(k)
    return reply(0, events - count, leaves(first + count + k - events - 1), reset(count))
  end

  function o.peek()
    if o.fits(1) then
      return reply(1, events - count, 0, reset(count))
    end
    return o.refused(1)
  end

  function o.admit(k)
    if first > 0 then
      redis.call('LTRIM', key, first, -1)
    end
    -- Push k copies of now, in chunks that stay within Lua's stack.
    local entry = int(now)
    local todo = k
    while todo > 0 do
      local chunk = math.min(todo, 1000)
      local batch = {}
      for i = 1, chunk do batch[i] = entry end
      redis.call('RPUSH', key, unpack(batch))
      todo = todo - chunk
    end
    -- The key expires when its newest entry leaves the window on the
    -- server's clock.
    expire(key, (now + period - clock) / 1000)
    return reply(1, events - count - k, 0, now + period - clock, entry)
  end

  -- refund forgets up to k entries of the admission's time, from the
  -- newest end: entries of equal times are alike, and entries the list no
  -- longer holds had left the window (trimmed by a later admission).
  function o.refund(k, mark)
    if not string.match(mark, '^%-?%d+$') then
      fail('refund of a malformed mark ' .. mark)
    end
    local removed = redis.call('LREM', key, -k, mark)
    if tonumber(mark) > now - period then
      count = count - removed
    end
    if count <= 0 then
      redis.call('DEL', key)
      return reply(1, events, 0, 0)
    end
    newest = tonumber(redis.call('LINDEX', key, -1))
    expire(key, (newest + period - clock) / 1000)
    return reply(1, events - count, 0, newest + period - clock)
  end

  return o
end
