-- decide.lua: the end of the script, after the algorithms' files: one
-- decision for the key under every limiter of the call, all or nothing.
--
-- take: n is admitted under every limiter if it fits under each, and then
-- written to every state; otherwise nothing is written, the first limiter
-- it does not fit reports its refusal, and the others what a peek would.
-- peek: each reports a peek. refund: each gives back its own admission (its
-- mark), as far as it still holds.

local states = {}
for i = 1, limiters do
  local at = 4 * i - 1
  local new = algs[ARGV[at]]
  if not new then
    fail('unknown algorithm ' .. tostring(ARGV[at]))
  end
  states[i] = new(KEYS[i], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]))
end

local out = {}
if mode == 'take' then
  local refuser = 0
  for i = 1, limiters do
    if not states[i].fits(n) then
      refuser = i
      break
    end
  end
  for i = 1, limiters do
    if refuser == 0 then
      out[i] = states[i].admit(n)
    elseif i == refuser then
      out[i] = states[i].refused(n)
    else
      out[i] = states[i].peek()
    end
  end
elseif mode == 'peek' then
  for i = 1, limiters do
    out[i] = states[i].peek()
  end
else
  for i = 1, limiters do
    out[i] = states[i].refund(n, ARGV[4 * i + 2])
  end
end
return table.concat(out, ' ')
