-- bucket.lua: a GCRA token bucket, after prelude.lua.
--
-- The same algorithm as keylimit.TokenBucket: the key's state is its
-- theoretical arrival time (TAT), the instant its bucket is full again. The
-- tokens at time now are (now + tau - TAT) / interval, so refill is never
-- stored and no fraction of a token is lost.
--
-- KEYS[i]  a string "TAT interval hold": the TAT in ns since the Unix
--          epoch in decimal (seconds, then 9 digits of ns), the interval it
--          counts in, that of the limit it was written under, and the
--          longest lease time (ns) of the leases written to it, absent
--          until one is; expiring at the TAT itself, when the bucket is full
--          and the state is the same as no state at all. (A state of the
--          TAT alone counts in the interval of the limit that reads it.)
--          Or, as the plain take writes it (take_bucket.lua: on a key
--          without state, or on a state that keeps no lease time),
--          "@seconds ns a interval": the TAT is the time
--          seconds + ns (ns within the second, not padded) plus a ns, and
--          the key expires at the TAT rounded up to a ms. The leading '@'
--          keeps a version without this shape from reading it as a TAT:
--          its arithmetic fails on it, and the call is a script error.
-- Parameters: interval, ns per token (Limit.Interval()); tau, burst ×
-- interval in ns, how far the TAT may run ahead of now.
-- Times in the reply are in ns; remaining is in tokens. The mark of an
-- admission is the TAT it wrote, as stored.
--
-- A change of limit keeps the key's debt in tokens, as the in-memory
-- bucket does: a TAT that counts in another interval is read as as many
-- tokens owed in this one, rounded up, however many that is beyond the
-- burst, so that no change of limit creates capacity. The first take or
-- peek under the new limit writes the state in its interval (a refund
-- passes the admission's limit, and converts nothing). Intervals are
-- compared as stored, in decimal.
--
-- A lease (WithLeases) takes n + x events that the instance spends at any
-- time within hold ns from now: it moves the TAT to max(TAT, now + hold) +
-- (n + x) × interval, and fits if that is at most now + tau. So each
-- event of a lease counts from the latest time it may be spent, and fits as
-- at the earliest: any interval of time then holds at most burst + its
-- length / interval events spent, however the instances spend their leases
-- (DESIGN.md, "Leases"). A refund, and what an ended lease gives back, then
-- gives back hold less: a lease written after the admission counted from
-- up to hold ahead of now, and did not depend on it.
--
-- Arithmetic: Lua numbers are doubles, exact for integers below 2^53. Unix
-- time in ns (about 2^61) is not, so times are kept as whole seconds plus ns
-- within the second, and only differences from now are formed; the caller
-- keeps tau + interval below 2^52, so every difference is exact.

if uses.bucket then
  local bucket = {}
  algs.bucket = bucket
  local span = 2 ^ 52 -- the most a debt is kept at, in ns

  -- since returns how far the time t, stored as seconds then 9 digits of
  -- ns, is after now, in ns.
  local function since(t)
    return (tonumber(string.sub(t, 1, -10)) - now_s) * 1e9 + (tonumber(string.sub(t, -9)) - now_ns)
  end

  -- scale returns ceil(x × mul / div), exactly, at most span: x ns of debt
  -- in intervals of div ns, as ns in intervals of mul ns. product(a, b) is
  -- a × b as hi × 2^52 + lo (0 <= lo < 2^52), exactly, for integers
  -- 0 <= a, b <= 2^52: each partial product of 26-bit halves is below 2^52.
  local function scale(x, mul, div)
    local half = 2 ^ 26
    local function product(a, b)
      local ah, al = math.floor(a / half), a % half
      local bh, bl = math.floor(b / half), b % half
      local mid = ah * bl + al * bh
      local mh = math.floor(mid / half)
      local lo = (mid - mh * half) * half + al * bl
      local carry = math.floor(lo / span)
      return ah * bh + mh + carry, lo - carry * span
    end
    x = math.min(x, span)
    local c = math.ceil(x / div * mul) -- within a few ns of the answer
    if c >= span then return span end
    local xh, xl = product(x, mul)
    -- covers reports whether c × div >= x × mul.
    local function covers(c)
      local h, l = product(c, div)
      return h > xh or (h == xh and l >= xl)
    end
    while not covers(c) do c = c + 1 end
    while c > 0 and covers(c - 1) do c = c - 1 end
    return math.min(c, span)
  end

  -- store sets the TAT of s's key to now + a (a > 0), in s's interval, and
  -- makes the key expire then. It returns the TAT as stored.
  local function store(s, a)
    local total = now_ns + a
    local ns = math.fmod(total, 1e9)
    local tat = string.format('%d%09d', now_s + (total - ns) / 1e9, ns)
    local state = tat .. ' ' .. s.unit
    if s.hold > 0 then state = state .. string.format(' %d', s.hold) end
    redis.call('SET', s.key, state, 'PX', ttl(a / 1e6))
    return tat
  end

  -- remaining: whole tokens in a bucket whose TAT is now + a.
  local function remaining(s, a)
    return math.min(math.max(math.floor((s.tau - a) / s.interval), 0), s.burst)
  end

  -- read: s.ahead = TAT - now, in ns, in the interval the state counts in;
  -- s.base = max(TAT, now) - now in this limit's interval (a bucket never
  -- holds more than burst tokens); s.kept tells whether the state counted
  -- in this interval before this call. A missing key is a full bucket.
  function bucket.read(key, interval, tau)
    local s = {key = key, interval = interval, tau = tau, burst = math.floor(tau / interval),
      ahead = 0, unit = string.format('%d', interval), stored = false, hold = 0}
    local stored = redis.call('GET', key)
    if stored then
      s.stored = true
      local unit = s.unit
      if string.byte(stored) == 64 then -- '@': a fresh take's state
        local f1 = string.find(stored, ' ', 2, true)
        local f2 = string.find(stored, ' ', f1 + 1, true)
        local f3 = string.find(stored, ' ', f2 + 1, true)
        s.ahead = (tonumber(string.sub(stored, 2, f1 - 1)) - now_s) * 1e9 + (tonumber(string.sub(stored, f1 + 1, f2 - 1)) - now_ns)
          + tonumber(string.sub(stored, f2 + 1, f3 - 1))
        unit = string.sub(stored, f3 + 1)
      else
        local tat = stored
        local sp = string.find(stored, ' ', 1, true)
        if sp then
          tat, unit = string.sub(stored, 1, sp - 1), string.sub(stored, sp + 1)
          sp = string.find(unit, ' ', 1, true)
          if sp then
            s.hold = tonumber(string.sub(unit, sp + 1)) or 0
            unit = string.sub(unit, 1, sp - 1)
          end
        end
        s.ahead = since(tat)
      end
      s.same = unit == s.unit
      s.kept = s.same
      if s.ahead > 0 and not s.same and mode ~= 'refund' then
        -- Counted under a limit of another interval: keep the debt in
        -- tokens, and write it so.
        s.ahead = scale(s.ahead, interval, tonumber(unit))
        store(s, s.ahead)
        s.same = true
      end
    end
    s.base = math.max(s.ahead, 0)
    return s
  end

  function bucket.fits(s, k)
    return s.base + k * s.interval <= s.tau
  end

  -- Refused: nothing is written. The request passes once the TAT that
  -- admitting it gives is no more than tau ahead.
  function bucket.refused(s, k)
    return reply(0, remaining(s, s.base), s.base + k * s.interval - s.tau, s.base)
  end

  function bucket.peek(s)
    if bucket.fits(s, 1) then
      return reply(1, remaining(s, s.base), 0, s.base)
    end
    return bucket.refused(s, 1)
  end

  function bucket.admit(s, k)
    local next = s.base + k * s.interval
    return reply(1, remaining(s, next), 0, next, store(s, next))
  end

  -- giveback gives back what the admission that wrote the TAT mark still
  -- holds (see keylimit's DESIGN.md, "Exact refunds"): it moved the TAT k
  -- intervals later; what of that lies ahead of now, less the longest
  -- lease time written (see above), and of the TAT, comes back. The caller
  -- passes the parameters of the admission's limit: a state that counted
  -- in another interval has been converted since, and gives nothing back.
  -- After the server's clock stepped back, now counts from TAT - tau, a
  -- time some admission reached.
  function bucket.giveback(s, k, mark)
    if not string.match(mark, '^%-?%d+$') or string.len(mark) < 10 then
      error('redislimit: refund of a malformed mark ' .. mark, 0)
    end
    if s.stored and s.kept then
      local ahead = s.ahead
      local skew = math.max(ahead - s.tau, 0)
      local back = math.min(k * s.interval, since(mark) - skew - s.hold, ahead - skew)
      if back > 0 then
        if ahead - back > 0 then
          store(s, ahead - back)
        else
          redis.call('DEL', s.key)
        end
        ahead = ahead - back
      end
      s.ahead = ahead
      s.base = math.max(ahead, 0)
    end
  end

  function bucket.refund(s, k, mark)
    bucket.giveback(s, k, mark)
    return reply(1, remaining(s, s.base), 0, s.base)
  end

  -- grant takes k (which fits) and up to want more, all to be spent
  -- within hold ns, counted from max(TAT, now + hold) (see above), and
  -- returns the events taken beyond k, the TAT written, ahead of now, and
  -- the lease's time. A paced lease (share true) lasts as long as the
  -- bucket's debt, base, if that is longer than hold: counted from its
  -- end, it moves the TAT as one of hold does, so it costs the fleet
  -- nothing, and gives an instance whose host runs it late longer to
  -- spend it.
  -- Once the bucket would hold, after k, less than refills in hold and
  -- than a 1/maxLeaseShare of its burst (the most a lease takes), and
  -- share is false, a lease takes at most 1/leaseShare of what it holds
  -- and leaves the rest to the next fetch, so that on a key a fleet
  -- drains, each fetch gets some, whatever their order (DESIGN.md,
  -- "Leases"); a paced lease (share true) is fair by its pace instead,
  -- and takes up to what the bucket holds. If not one more fits so, it
  -- is admit.
  -- leaseShare and maxLeaseShare are lease.go's constants, which
  -- scripts.go puts at the start of the script.
  local function grant(s, k, want, hold, share)
    if share then hold = math.max(hold, s.base) end
    local from = math.max(s.base, hold)
    local x = math.min(want, math.floor((s.tau - from) / s.interval) - k)
    local left = math.floor((s.tau - s.base) / s.interval) - k
    if not share and left < math.min(s.burst / maxLeaseShare, hold / s.interval) then
      x = math.min(x, math.floor(left / leaseShare))
    end
    if x < 1 then
      return 0, s.base + k * s.interval
    end
    s.hold = math.max(s.hold, hold)
    return x, from + (k + x) * s.interval, hold
  end

  -- lease admits k (which fits) and leases up to want more (grant). The
  -- mark is the TAT written. The reply is admit's, then the events leased,
  -- the pace (0: none, see paced) and the lease's time (0: hold).
  function bucket.lease(s, k, want, hold)
    local x, next = grant(s, k, want, hold, false)
    return reply(1, remaining(s, next), 0, next, store(s, next)) .. string.format(' %d 0 0', x)
  end

  -- fleet returns how many instances leased the key lately, id (this
  -- call's) included: KEYS[2] is a sorted set of instance ids scored by
  -- the ms of their last lease call on the server's clock. An instance
  -- counts for a window of max(64 × period, 3 × the fleet's scaled lease
  -- period) after its last call (the set's count before the oldest are
  -- dropped is the fleet the window is made for), so that one paced
  -- (below), or run late by its host, counts between its calls: a fleet
  -- counted short gets shares too large, which instances late to spend
  -- them lose; one counted long (instances gone count a window more) gets
  -- shorter paces from the set point (paced). Four commands a call; the set holds
  -- the instances of one window, and expires two windows after the last
  -- call.
  local function fleet(id, period, interval)
    local ms = now_s * 1000 + math.floor(now_ns / 1e6)
    redis.call('ZADD', KEYS[2], ms, id)
    local c = redis.call('ZCARD', KEYS[2])
    local w = math.ceil(math.max(64 * period, 3 * minShare * c * interval) / 1e6)
    local gone = redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('(%d', ms - w))
    redis.call('PEXPIRE', KEYS[2], ttl(2 * w))
    return math.max(c - gone, 1)
  end

  -- paced is a lease under the share rule (DESIGN.md, "Leases at
  -- scale"), for the instance id whose lease time is period. With a the
  -- instances that leased the key lately (fleet): if a fleet's share of a
  -- lease time's refill is minShare events or more (minShare × a ×
  -- interval <= period), or the instance is alone, it is lease. A larger
  -- fleet's lease period scales: P = minShare × a × interval, in which
  -- each instance's fair share is minShare events. A call takes k and up
  -- to want more, at most minShare in all (k alone if k is more), at most
  -- what the bucket holds beside the lease time, and the reply says when
  -- the instance may ask again, its pace: (k + x) × a × interval, the
  -- time the fleet's refill takes to give each instance as many, times f.
  -- f steers what the bucket holds after a call, L, to a set point S (2 ×
  -- minShare, at most half of M, what fits beside the lease time): f =
  -- (M - L) / (M - S), at most 2, 0 once L >= M. Below S, paces a little
  -- longer let the bucket hold enough for whole shares; above it, shorter
  -- ones drain a bucket the fleet leaves filling (instances that ask less,
  -- or come back late): max-min, what one does not take goes to those
  -- that keep asking. A call k does not fit is refused, with a pace of k ×
  -- a × interval / 2 (the instance waits a random part of it, from half):
  -- a fleet that finds the bucket empty does not ask again at once. A pace
  -- is at most maxPace periods. The lease is grant's (lasting as long as
  -- the bucket's debt, if longer than hold): the bound does not depend on
  -- the pace, which only the instance keeps.
  function bucket.paced(s, k, want, hold, period, id)
    local a = fleet(id, period, s.interval)
    local large = a > 1 and minShare * a * s.interval > period
    if not bucket.fits(s, k) then
      local pace = 0
      if large then pace = math.min(math.floor(k * a * s.interval / 2), maxPace * period) end
      return bucket.refused(s, k) .. string.format(' 0 %d 0', pace)
    end
    if not large then
      return bucket.lease(s, k, want, hold)
    end
    local x, next, life = grant(s, k, math.max(math.min(want, minShare - k), 0), hold, true)
    local most = math.floor((s.tau - hold) / s.interval)
    local pace = 0
    if most > 0 then
      local set = math.min(2 * minShare, math.floor(most / 2))
      local f = math.min((most - remaining(s, next)) / (most - set), 2)
      if f > 0 then pace = math.floor(math.min((k + x) * a * s.interval * f, maxPace * period)) end
    end
    if x < 1 then life = 0 end
    return reply(1, remaining(s, next), 0, next, store(s, next)) .. string.format(' %d %d %d', x, pace, life)
  end
end
