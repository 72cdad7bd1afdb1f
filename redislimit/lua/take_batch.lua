-- take_batch.lua: several plain takes of one algorithm, with the same
-- arguments (a limiter's takes of one event, in one window), in one call,
-- each decided as its own script would decide it, in the order given.
-- scripts.go puts in the plain script (lua/take_bucket.lua, take_fixed.lua
-- or take_sliding.lua): what it runs before its line "-- Per key." (the
-- time and the strings made of it and ARGV, the same for every key) once,
-- here, and the rest in the function take, once for each key.
--
-- Why: a call costs the server about 7k instructions before its script
-- runs a line, TIME 6.8k, each ARGV 1.2k, and a string made 1k; a bucket's
-- take of a key without state is 31k in all. The coalescer (coalesce.go)
-- sends the takes that meet in flight together; one call for all of them
-- pays those once.
--
-- KEYS: one state per take; ARGV: the arguments of every take. The reply
-- is each take's, in the order of KEYS: its script's reply, or, for a take
-- whose script failed (an error a command replied, such as WRONGTYPE, or
-- one of Lua's), '~' and the error, so that one take's failure is its own.

--{before}
local take = function(KEYS)
--{per key}
end

local out, keys = {}, {}
for i = 1, #KEYS do
  keys[1] = KEYS[i]
  local ok, reply = pcall(take, keys)
  -- A command's error is caught as {err = …} or as its text (Redis 7.0),
  -- which begins with a code in capitals; anything else is Lua's.
  if type(reply) == 'table' then reply, ok = reply.err, false end
  if not ok then
    reply = tostring(reply)
    if not string.find(reply, '^%u+ ') then reply = 'ERR Error running script: ' .. reply end
    reply = '~' .. reply
  end
  out[i] = reply
end
return out
