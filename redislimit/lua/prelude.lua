-- prelude.lua: the start of the script. The script is this file, then each
-- algorithm's (bucket.lua, fixed.lua, sliding.lua), then decide.lua, so
-- that one call decides for one limiter or for several, atomically.
--
-- A call decides for one key under P limiters (P >= 1, one for each Redis
-- limiter that keylimit.All joined): KEYS[i] is the i-th limiter's state
-- of the key, whose shape its algorithm's file describes. On Redis Cluster
-- the keys share a hash slot: each is prefix{key}, tagged by the key.
--
-- ARGV[1]  the mode: "take": admit n events under every limiter if all n
--          fit under each, else under none; "peek": report whether 1 more
--          fits, writing nothing; "refund": give back an admission of n;
--          "lease" (one limiter only, a bucket or a fixed window): give back
--          what an ended lease left unused, then take n, and up to want
--          more for the instance to spend within the lease time (WithLeases).
-- ARGV[2]  n, 1 <= n <= every limiter's quota (checked by the caller).
-- Then four arguments per limiter, ARGV[4i-1 .. 4i+2] for the i-th:
--   the algorithm ("bucket", "fixed", "sliding", "calendar"), its two parameters for the
--   key's limit (each file says which), and for "refund" the mark of the
--   admission to give back, which "take" returned when it admitted (the
--   algorithm's file says what it is); for "lease" the mark of the ended
--   lease to give back from; otherwise 0, or for a fixed window "carry"
--   while the caller's limits changed lately (fixed.lua).
-- For "lease", five more: want, the most events to take beyond n; hold,
--   the lease time in ns, within which the instance spends them; the
--   events the ended lease left unused (0: none to give back); period,
--   the instance's lease time (WithLeases) in ns; and the instance's id. A
--   bucket's lease may name a second key, KEYS[2], the instances that
--   leased the key lately (a sorted set): the lease is then paced, under
--   the share rule (bucket.lua's paced).
-- Then, only in the package's own tests, two more: the time, in seconds
-- since the Unix epoch and ns within the second, instead of the server's.
--
-- The reply is one string of five integers per limiter, "allowed remaining
-- retry-after reset-after mark ...", which the client reads with fewer
-- allocations than an array. allowed is 0 or 1; the unit of the times is
-- the algorithm's; mark is an admission's, 0 for anything else. A "lease"
-- reply has a sixth: the events leased beyond n (0: a plain admission, or
-- none), a seventh: the pace, the ns before the instance asks again (0:
-- no pace), and an eighth: the lease's time in ns (0: hold).

-- Redis 3.2 to 4: replicate this script's writes, not the script, so that
-- reading TIME before writing is allowed. Redis 5 and later always do (7
-- keeps the function only as a no-op).
if redis.replicate_commands then redis.replicate_commands() end

local mode = ARGV[1]
local n = tonumber(ARGV[2])
local limiters = #KEYS
if mode ~= 'take' and mode ~= 'peek' and mode ~= 'refund' and mode ~= 'lease' then
  return redis.error_reply('redislimit: unknown mode ' .. tostring(mode))
end
-- extra: the arguments after the limiters' (a lease's five).
local extra = 0
if mode == 'lease' then
  extra = 5
  -- A bucket's paced lease names the fleet's set too (bucket.lua).
  if limiters == 2 and ARGV[3] == 'bucket' then limiters = 1 end
  if limiters ~= 1 or (ARGV[3] ~= 'bucket' and ARGV[3] ~= 'fixed') then
    return redis.error_reply('redislimit: a lease is for one bucket or fixed window')
  end
end
if limiters < 1 or #ARGV < 2 + 4 * limiters + extra then
  return redis.error_reply('redislimit: ' .. #ARGV .. ' arguments for ' .. limiters .. ' keys')
end

-- uses: the algorithms of this call. Each algorithm's file defines its
-- functions only if the call uses it: every function a script defines is
-- made anew on each call, and costs the server time.
local uses = {}
for i = 1, limiters do
  local alg = ARGV[4 * i - 1]
  if alg ~= 'bucket' and alg ~= 'fixed' and alg ~= 'sliding' and alg ~= 'calendar' then
    return redis.error_reply('redislimit: unknown algorithm ' .. tostring(alg))
  end
  uses[alg] = true
end

-- Every decision is made on the server's clock, never the caller's, so that
-- instances whose clocks disagree still agree. TIME is {seconds, µs}.
-- now_s is whole seconds since the Unix epoch, now_ns ns within the second,
-- now_us µs within it.
local now_s, now_ns
local fixed_clock = ARGV[3 + 4 * limiters + extra] ~= nil
if fixed_clock then
  now_s, now_ns = tonumber(ARGV[3 + 4 * limiters + extra]), tonumber(ARGV[4 + 4 * limiters + extra])
else
  local time = redis.call('TIME')
  now_s, now_ns = tonumber(time[1]), tonumber(time[2]) * 1000
end
local now_us = math.floor(now_ns / 1000)

-- ttl returns ms rounded up, for PX and PEXPIRE: a key never expires before
-- its state is the same as none. Under the tests' clock, which does not
-- move with Redis's, a key lives an hour longer, so that it never expires
-- while the test's time stands still: the script judges a state by its
-- content, never by its presence alone.
local function ttl(ms)
  if fixed_clock then ms = ms + 3600000 end
  return math.ceil(ms)
end

-- reply is one limiter's five integers; mark is a string of digits. Times
-- are capped within an int64 (a clock stepped far back makes them huge).
local function reply(allowed, remaining, retry, reset, mark)
  return string.format('%d %d %d %d %s', allowed, remaining, math.min(retry, 9e18), math.min(reset, 9e18), mark or '0')
end

-- algs maps an algorithm's name to its functions: read(key, p1, p2, mark)
-- returns the key's state under the limit (a table, converted to this
-- limit's terms and written so, for a take or a peek, if another limit
-- wrote it); fits(s, n) tells whether n fit, writing nothing; refused(s, n)
-- replies for n that does not fit; peek(s) replies for 1, writing nothing;
-- admit(s, n) and refund(s, n, mark) write and reply; a bucket and the
-- counted windows (counted, below) also have giveback(s, n, mark), refund
-- without the reply; a bucket and a fixed window also have
-- lease(s, n, want, hold), admit and lease more, whose reply has the sixth
-- integer.
local algs = {}

-- counted gives alg, a window that keeps one count per key (fixed.lua,
-- calendar.lua), the steps such windows take alike, each writing through
-- its own store(s, k), which writes count k of s's window or deletes the
-- state when k is 0. s has count, events, left (µs until the window ends
-- on the server's clock), windowText (an admission's mark), and stored and
-- kept (there was a state, counted in this window before this call).
local function counted(alg, store)
  -- reset: until the quota is whole again; 0 when nothing was admitted.
  local function reset(s, k)
    if k > 0 then return s.left end
    return 0
  end

  function alg.fits(s, k)
    return s.count + k <= s.events
  end

  -- Refused: nothing is written; the next window starts afresh.
  function alg.refused(s, k)
    return reply(0, s.events - s.count, s.left, reset(s, s.count))
  end

  function alg.peek(s)
    if alg.fits(s, 1) then
      return reply(1, s.events - s.count, 0, reset(s, s.count))
    end
    return alg.refused(s, 1)
  end

  function alg.admit(s, k)
    store(s, s.count + k)
    return reply(1, s.events - s.count - k, 0, s.left, s.windowText)
  end

  -- giveback gives back only while the admission's window is the current
  -- one, counted in the admission's terms (the caller passes the
  -- parameters of the admission's limit): the events of a window that has
  -- ended are gone already, and must not come off the next window's count.
  function alg.giveback(s, k, mark)
    if s.stored and s.kept and mark == s.windowText then
      local count = math.max(s.count - k, 0)
      if count ~= s.count then store(s, count) end
      s.count = count
    end
  end

  function alg.refund(s, k, mark)
    alg.giveback(s, k, mark)
    return reply(1, s.events - s.count, 0, reset(s, s.count))
  end
end
