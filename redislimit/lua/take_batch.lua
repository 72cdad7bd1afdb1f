-- take_batch.lua: several plain takes of one algorithm in one call, each
-- decided as its own script would decide it, in the order given. scripts.go
-- puts the plain script (lua/take_bucket.lua, take_fixed.lua or
-- take_sliding.lua) in the function take below, where its KEYS and ARGV
-- are one take's; a bucket's and a sliding log's read TIME through
-- server_time, once a call (a fixed window's reads it itself: its
-- PEXPIREAT must come before the TIME that checks it).
--
-- Why: a call costs the server about 7k instructions before its script
-- runs a line, and TIME 6.8k; a bucket's take of a key without state is
-- 31k in all. The coalescer (coalesce.go) sends the takes that meet in
-- flight together; one call for all of them pays those once.
--
-- KEYS: one state per take. ARGV[1]: how many arguments each take has,
-- all the same; then each take's arguments in the order of KEYS. The
-- reply is each take's, in that order: its script's reply, or, for a take
-- whose script failed (an error a command replied, such as WRONGTYPE, or
-- one of Lua's), '~' and the error, so that one take's failure is its own.

local time
local function server_time()
  if not time then time = redis.call('TIME') end
  return time
end

local take = function(KEYS, ARGV)
--{take}
end

local stride, out, keys, a = ARGV[1] + 0, {}, {}, 2
for i = 1, #KEYS do
  keys[1] = KEYS[i]
  local ok, reply = pcall(take, keys, {unpack(ARGV, a, a + stride - 1)})
  -- A command's error is caught as {err = …} or as its text (Redis 7.0),
  -- which begins with a code in capitals; anything else is Lua's.
  if type(reply) == 'table' then reply, ok = reply.err, false end
  if not ok then
    reply = tostring(reply)
    if not string.find(reply, '^%u+ ') then reply = 'ERR Error running script: ' .. reply end
    reply = '~' .. reply
  end
  out[i] = reply
  a = a + stride
end
return out
