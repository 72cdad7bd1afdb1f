-- sliding.lua: an exact sliding log, after prelude.lua.
--
-- The same algorithm as keylimit.SlidingWindow: the key keeps the times of
-- its admissions, and admits n iff fewer than events - n + 1 of them lie in
-- (now - period, now]. So no interval of length period ever holds more than
-- events admissions.
--
-- KEYS[i]  the admission times in µs since the Unix epoch, oldest first,
--          in one of three shapes. A log of at most short entries (set
--          before the script: take.go's slidingShort) is a string: '@'
--          and the entries separated by spaces, or the appendable shape
--          that take_sliding.lua writes and appends to (a head and an
--          epoch, then the entries; an entry counts as the greatest time
--          of it and those before it, and entries that left the window may
--          remain); a longer one is a list, and stays one until it expires
--          (so is an older version's list, which this version reads as it
--          is). An older version fails on the string (WRONGTYPE), and on
--          the appendable shape (a number it cannot read), rather than
--          misread it. The key expires when its newest entry leaves the
--          window (an appendable log up to an epoch later), and the state
--          is the same as none. This script writes '@e1 e2 …'.
-- Parameters: the period in µs (the caller requires a whole number of µs),
-- and the events per period.
-- Remaining is in events; times in the reply are in µs, the resolution of
-- TIME: Unix time in µs (about 2^51) is exact in a Lua double, and so is
-- every sum below. The mark of an admission is the time it recorded. The
-- reply has a sixth integer after prelude's five: the µs until the oldest
-- entry in the window leaves it, when more quota is available
-- (Result.RefillAfter; 0 for an empty window).
--
-- A change of limit needs nothing: the times mean the same under any
-- limit. The log holds at most events entries of the window, more only
-- after the limit was lowered, until they leave it.

if uses.sliding then
  local sliding = {}
  algs.sliding = sliding

  -- at: the admission time at index i of s's log (from 0; -1 the newest).
  local function at(s, i)
    if s.texts then
      if i < 0 then i = #s.texts + i end
      return tonumber(s.texts[i + 1])
    end
    return tonumber(redis.call('LINDEX', s.key, i))
  end

  -- store writes the entries texts (a table, oldest first; in the window,
  -- or after a refund those left) as the log of s, which expires in life
  -- µs: the short shape if they are few enough, else a list.
  local function store(s, texts, life)
    if #texts <= short then
      redis.call('SET', s.key, '@' .. table.concat(texts, ' '), 'PX', ttl(life / 1000))
      return
    end
    if s.stored then redis.call('DEL', s.key) end
    for from = 1, #texts, 1000 do
      redis.call('RPUSH', s.key, unpack(texts, from, math.min(from + 999, #texts)))
    end
    redis.call('PEXPIRE', s.key, ttl(life / 1000))
  end

  -- leaves: µs until the entry at index i leaves the window, on the
  -- server's clock (which may be behind s.now, the time the decision is
  -- made at).
  local function leaves(s, i)
    return at(s, i) + s.period - s.clock
  end

  local function reset(s, k)
    if k > 0 then return s.newest + s.period - s.clock end
    return 0
  end

  -- answer is reply with the sixth integer, refill: the µs until the entry
  -- of time oldest, the oldest in the window, leaves it; nil for none.
  local function answer(allowed, remaining, retry, reset, mark, s, oldest)
    local refill = 0
    if oldest then refill = math.min(oldest + s.period - s.clock, 9e18) end
    return reply(allowed, remaining, retry, reset, mark) .. string.format(' %d', refill)
  end

  -- read: s.first is the index of the oldest entry still in the window
  -- (t > now - period); entries before it have left, admit trims them, peek
  -- only skips them. The list is in order, so a binary search finds it in
  -- O(log events) LINDEX calls; usually the head is still in the window
  -- and one call suffices.
  function sliding.read(key, period, events)
    local clock = now_s * 1e6 + now_us -- µs since the Unix epoch
    local s = {key = key, period = period, events = events, clock = clock, now = clock, newest = 0, first = 0}
    -- The short shape, or none, in one GET; a list fails it (WRONGTYPE).
    local log = redis.pcall('GET', key)
    if type(log) ~= 'table' then
      s.texts, s.stored = {}, log
      if log then
        -- '@e1 e2 …', or the appendable shape, whose entries follow its
        -- head and epoch (take_sliding.lua), each counting as the greatest
        -- time so far.
        local from, top = 2, nil
        if (string.byte(log, 2) or 0) >= 97 then from = string.find(log, ' ', 1, true) or #log + 1 end
        for e in string.gmatch(string.sub(log, from), '[^ ]+') do
          local t = tonumber(e)
          if top and t < top then e = s.texts[#s.texts] else top = t end
          s.texts[#s.texts + 1] = e
        end
      end
      s.len = #s.texts
    elseif string.find(log.err or '', 'WRONGTYPE', 1, true) then
      s.len = redis.call('LLEN', key)
    else
      error(log.err, 0)
    end
    if s.len > 0 then
      s.newest = at(s, -1)
      -- Time only moves forward inside the state: if the server's clock
      -- stepped back, decide as of the newest admission, so the list stays
      -- in order and no entry leaves the window early.
      if s.newest > s.now then s.now = s.newest end
      s.oldest = at(s, 0)
      if s.oldest <= s.now - period then
        local lo, hi = 1, s.len -- at(lo - 1) has left; at(hi) is in, or hi == len
        while lo < hi do
          local mid = math.floor((lo + hi) / 2)
          if at(s, mid) <= s.now - period then lo = mid + 1 else hi = mid end
        end
        s.first = lo
        s.oldest = nil
        if lo < s.len then s.oldest = at(s, lo) end
      end
    end
    s.count = s.len - s.first
    return s
  end

  function sliding.fits(s, k)
    return s.count + k <= s.events
  end

  -- refused: k does not fit until count + k - events entries have left;
  -- the last of those to leave is the (count + k - events)-th oldest in the
  -- window.
  function sliding.refused(s, k)
    return answer(0, s.events - s.count, leaves(s, s.first + s.count + k - s.events - 1), reset(s, s.count), nil, s, s.oldest)
  end

  function sliding.peek(s)
    if sliding.fits(s, 1) then
      return answer(1, s.events - s.count, 0, reset(s, s.count), nil, s, s.oldest)
    end
    return sliding.refused(s, 1)
  end

  function sliding.admit(s, k)
    local entry = string.format('%d', s.now)
    -- The key expires when its newest entry leaves the window on the
    -- server's clock.
    local life = s.now + s.period - s.clock
    if s.texts then
      -- The entries in the window and k copies of now.
      local texts = {}
      for i = s.first + 1, s.len do texts[#texts + 1] = s.texts[i] end
      for i = 1, k do texts[#texts + 1] = entry end
      store(s, texts, life)
      return answer(1, s.events - s.count - k, 0, life, entry, s, s.oldest or s.now)
    end
    if s.first > 0 then
      redis.call('LTRIM', s.key, s.first, -1)
    end
    -- Push k copies of now, in chunks that stay within Lua's stack.
    local todo = k
    while todo > 0 do
      local chunk = math.min(todo, 1000)
      local batch = {}
      for i = 1, chunk do batch[i] = entry end
      redis.call('RPUSH', s.key, unpack(batch))
      todo = todo - chunk
    end
    redis.call('PEXPIRE', s.key, ttl(life / 1000))
    return answer(1, s.events - s.count - k, 0, life, entry, s, s.oldest or s.now)
  end

  -- refund forgets up to k entries of the admission's time, from the
  -- newest end: entries of equal times are alike, and entries the list no
  -- longer holds had left the window (trimmed by a later admission).
  function sliding.refund(s, k, mark)
    if not string.match(mark, '^%-?%d+$') then
      error('redislimit: refund of a malformed mark ' .. mark, 0)
    end
    local removed = 0
    if s.texts then
      -- As LREM from the newest end: up to k entries equal to mark.
      for i = s.len, 1, -1 do
        if removed < k and s.texts[i] == mark then
          table.remove(s.texts, i)
          removed = removed + 1
        end
      end
    else
      removed = redis.call('LREM', s.key, -k, mark)
    end
    local count, first = s.count, s.first - removed
    if tonumber(mark) > s.now - s.period then
      count, first = count - removed, s.first
    end
    if count <= 0 then
      redis.call('DEL', s.key)
      return answer(1, s.events, 0, 0, nil, s, nil)
    end
    local life = at(s, -1) + s.period - s.clock
    if s.texts then
      if removed > 0 then store(s, s.texts, life) end
    else
      redis.call('PEXPIRE', s.key, ttl(life / 1000))
    end
    return answer(1, s.events - count, 0, life, nil, s, at(s, first))
  end
end
