-- take_fixed.lua: the plain decision of a fixed window, a script of its
-- own: take n under one limiter whose period is a whole number of ms, as
-- lua/fixed.lua's take does, with nothing else in the script.
--
-- KEYS[1] the state. ARGV: events; the period in ms; the expiry, ms since
-- the epoch, of the state of the window the caller expects the take in (a
-- ms before it ends); n (at most events: the caller refuses a larger n
-- without a call), left out for 1 (an ARGV costs the server about 1.2k
-- instructions); and only in the package's tests, after n, the time,
-- seconds and ns (prelude.lua).
--
-- The state this script writes is the count alone, a decimal integer, in
-- a key that expires at its window's last ms (a key holds while now <= its
-- expiry), or, written in that ms, at the window's end, a multiple of the
-- period (fixed.lua's read tells the two apart): while the key
-- holds, its window has not ended, so a take of a key that has one adds to
-- it (INCRBY) and reads no time. It decides on the count if the key's expiry
-- is the one expected: the window is that one, and the take is in it.
-- Otherwise (a window the caller did not expect, at a boundary, or a
-- count of another period or of a clock stepped back), or on any other
-- shape of state (INCRBY fails on it, and the caller takes the error to
-- mean the same), the take is undone and the reply is "full": the full
-- script decides, on the server's time. A take that does not fit is undone
-- too, and refused. A take that creates the key is a window's first: its
-- expiry is set at the window's last ms, the expected one by PEXPIREAT,
-- and TIME read after it says whether that was right.
--
-- The reply, for a window's first take, is "@seconds µs", the server's
-- time (the caller reads the window from it); "=count", the count after
-- the take; or, for a refusal, "!count seconds µs", the count it found and
-- the server's time.
--
-- miniredis does not expire keys on its own clock unless told to, and
-- Redis before 7.0 has no PEXPIRETIME: on a server without
-- redis.REDIS_VERSION (both) the reply is "no count", and the limiter
-- hands its fixed windows' takes to the full script from then on, which
-- writes states that store their window there.
--
-- Under the tests' clock, which Redis's expiries do not follow, the key
-- lives an hour and KEYS[1]..':x' holds its expiry on the tests' clock: a
-- count past it is deleted before the take, as Redis would have.

-- Per key. (A batch, lua/take_batch.lua, runs what follows for each key:
-- nothing before it but this script's comments, as the time a path reads
-- must follow its PEXPIREAT.)

-- s, us: the time, the tests' (set here), or TIME's, which a path reads
-- where it needs it.
local tests, s, us, n = ARGV[5], nil, nil, ARGV[4] or '1'
if tests then
  s, us = ARGV[5], string.format('%d', math.floor(ARGV[6] / 1000))
  local x = KEYS[1] .. ':x'
  local when = redis.call('GET', x)
  if when and ARGV[5] * 1000 + math.floor(ARGV[6] / 1e6) > tonumber(when) then
    local state = redis.pcall('GET', KEYS[1])
    if type(state) == 'string' and string.match(state, '^%d+$') then redis.call('DEL', KEYS[1]) end
    redis.call('DEL', x)
  end
end

local c = redis.call('INCRBY', KEYS[1], n)
-- A key INCRBY created holds n: 1 most often, told without reading n.
if c == 1 or n ~= '1' and c == n + 0 then
  -- A window's first take: its state expires at the window's last ms.
  if not redis.REDIS_VERSION then
    redis.call('DEL', KEYS[1])
    return 'no count'
  end
  -- The expiry expected, set before TIME is read: PEXPIREAT deletes the
  -- key if that time has passed as it runs (on Redis 7.0 and 7.1 on the
  -- clock then, since 7.2 on the one the script began at), which a TIME
  -- read after it shows.
  if not tests then
    redis.call('PEXPIREAT', KEYS[1], ARGV[3])
    local time = redis.call('TIME')
    s, us = time[1], time[2]
  end
  -- when: the expiry of the window that holds the time read, a ms before
  -- its end, a multiple of the period (of a second: no arithmetic); in
  -- the window's last ms its end (last): no command keeps a key whose
  -- expiry is the ms the script began in on Valkey and Redis 7.2 on.
  local when, last
  if ARGV[2] == '1000' then
    when, last = s .. '999', #us == 6 and us >= '999000'
    if last then when = string.format('%d', (s + 1) * 1000) end
  else
    local p = tonumber(ARGV[2])
    local ms = tonumber(s) * 1000 + math.floor(tonumber(us) / 1000)
    local e = ms - ms % p + p
    last = e - ms <= 1
    if last then when = string.format('%d', e) else when = string.format('%d', e - 1) end
  end
  if tests then
    redis.call('SET', KEYS[1], n, 'PX', 3600000)
    redis.call('SET', KEYS[1] .. ':x', when, 'PX', 3600000)
  elseif when ~= ARGV[3] then
    -- Another window than expected, or its last ms, where PEXPIREAT may
    -- have deleted the key.
    redis.call('SET', KEYS[1], n, 'PXAT', when)
  end
  return '@' .. s .. ' ' .. us
end

-- The expiry is compared as a number (reading ARGV's costs less than
-- printing PEXPIRETIME's); ms since the epoch are exact in a double.
local expected
if tests then
  expected = redis.call('GET', KEYS[1] .. ':x') == ARGV[3]
else
  expected = redis.call('PEXPIRETIME', KEYS[1]) == ARGV[3] + 0
end
if not expected then
  redis.call('DECRBY', KEYS[1], n)
  return 'full'
end
if c > ARGV[1] + 0 then
  -- A refusal tells when to retry from the server's time, which the
  -- caller's reckoning may be behind by a reply's way back.
  redis.call('DECRBY', KEYS[1], n)
  if not tests then
    local time = redis.call('TIME')
    s, us = time[1], time[2]
  end
  return string.format('!%d ', c - n) .. s .. ' ' .. us
end
return string.format('=%d', c)
