-- fleet.lua: the instances of a limiter that announce themselves on Redis
-- (heartbeat.go), so that each learns the fleet's size while Redis answers
-- and its failure policy divides the limit by it while Redis does not.
--
-- KEYS[1]  the fleet: a sorted set, member an instance's id, score the time
--          its announcement expires, in µs since the Unix epoch on Redis
--          time. One key, so on Redis Cluster it is in one slot whatever
--          its name.
-- ARGV[1]  the mode: "beat" announces the instance ARGV[2] until now +
--          ARGV[3] µs; "leave" withdraws it (Close).
-- ARGV[2]  the instance's id (hex digits).
-- ARGV[3]  ttl: how long an announcement lives, in µs (> 0).
-- Then, only in the package's own tests, two more: the time, in seconds
-- since the Unix epoch and ns within the second, instead of the server's.
--
-- Both modes first drop the announcements that have expired (score <= now):
-- an instance that died, or lost Redis, for longer than ttl is no longer
-- counted. The reply is the number of live instances after the call.

if redis.replicate_commands then redis.replicate_commands() end

local z, mode, id, ttl = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
if #KEYS ~= 1 or not ttl or ttl <= 0 or (mode ~= 'beat' and mode ~= 'leave') then
  return redis.error_reply('redislimit: fleet: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end

local now
local fixed_clock = ARGV[4] ~= nil
if fixed_clock then
  now = tonumber(ARGV[4]) * 1000000 + math.floor(tonumber(ARGV[5]) / 1000)
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function int(x) return string.format('%d', x) end

redis.call('ZREMRANGEBYSCORE', z, '-inf', int(now))
if mode == 'beat' then
  redis.call('ZADD', z, int(now + ttl), id)
  -- The set lives as long as its newest announcement, this one; under the
  -- tests' clock, which does not move with Redis's, an hour longer.
  local ms = math.ceil(ttl / 1000)
  if fixed_clock then ms = ms + 3600000 end
  redis.call('PEXPIRE', z, int(ms))
else
  redis.call('ZREM', z, id)
end
return redis.call('ZCARD', z)
