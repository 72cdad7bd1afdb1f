-- decide.lua: the end of the script, after the algorithms' files: one
-- decision for the key under every limiter of the call, all or nothing.
--
-- take: n is admitted under every limiter if it fits under each, and then
-- written to every state; otherwise nothing is written, the first limiter
-- it does not fit reports its refusal, and the others what a peek would.
-- peek: each reports a peek. refund: each gives back its own admission (its
-- mark), as far as it still holds. lease: one limiter gives back what an
-- ended lease left unused, then takes n and leases up to want more (a
-- bucket's, with the fleet's set as KEYS[2], under the share rule: paced
-- in bucket.lua).

-- stale is the reply to a call whose calendar window does not hold the
-- server's time (calendar.lua's read marks the state so): an error reply
-- returned from the main chunk, which redis-server and miniredis both pass
-- on as it is.
local function stale(s)
  return redis.error_reply(string.format('redislimit: calendar stale %d', s.stale))
end

-- One limiter, the usual call: no tables to gather the replies in.
if limiters == 1 then
  local alg = algs[ARGV[3]]
  local s = alg.read(KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6])
  if s.stale then return stale(s) end
  if mode == 'take' then
    if alg.fits(s, n) then return alg.admit(s, n) end
    return alg.refused(s, n)
  elseif mode == 'peek' then
    return alg.peek(s)
  elseif mode == 'lease' then
    local want, hold, give = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
    if give > 0 then alg.giveback(s, give, ARGV[6]) end
    if alg.paced and #KEYS == 2 then
      return alg.paced(s, n, want, hold, tonumber(ARGV[10]), ARGV[11])
    end
    if alg.fits(s, n) then return alg.lease(s, n, want, hold) end
    return alg.refused(s, n) .. ' 0 0 0'
  end
  return alg.refund(s, n, ARGV[6])
end

local used, states = {}, {}
for i = 1, limiters do
  local at = 4 * i - 1
  used[i] = algs[ARGV[at]]
  states[i] = used[i].read(KEYS[i], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), ARGV[at + 3])
  if states[i].stale then return stale(states[i]) end
end

local out = {}
if mode == 'take' then
  local refuser = 0
  for i = 1, limiters do
    if not used[i].fits(states[i], n) then
      refuser = i
      break
    end
  end
  for i = 1, limiters do
    if refuser == 0 then
      out[i] = used[i].admit(states[i], n)
    elseif i == refuser then
      out[i] = used[i].refused(states[i], n)
    else
      out[i] = used[i].peek(states[i])
    end
  end
elseif mode == 'peek' then
  for i = 1, limiters do
    out[i] = used[i].peek(states[i])
  end
else
  for i = 1, limiters do
    out[i] = used[i].refund(states[i], n, ARGV[4 * i + 2])
  end
end
return table.concat(out, ' ')
