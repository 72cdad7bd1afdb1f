-- prelude.lua: the start of every script. Each algorithm's file (bucket.lua,
-- fixed.lua, sliding.lua) is appended to this one to make its script, so
-- that one call runs both, atomically.
--
-- Every script takes one key, so that it runs on any Redis Cluster node:
-- KEYS[1]  the key's state, whose shape the algorithm's file describes.
-- ARGV[1]  the mode: "take": admit n events if all n fit, else nothing;
--          "peek": report whether 1 more fits, writing nothing;
--          "refund": give back n events that were admitted.
-- ARGV[2]  n, 1 <= n <= the quota (checked by the caller).
-- ARGV[3], ARGV[4]  the algorithm's two parameters.
-- ARGV[5]  for "refund": the mark of the admission to give back, which
--          "take" returned when it admitted (the algorithm's file says what
--          it is); otherwise 0.
--
-- Every script returns reply(allowed, remaining, retry-after, reset-after,
-- mark): mark is an admission's, 0 for anything else.

-- Redis 3.2 to 4: replicate this script's writes, not the script, so that
-- reading TIME before writing is allowed. Redis 5 and later always do (7
-- keeps the function only as a no-op).
if redis.replicate_commands then redis.replicate_commands() end

local key = KEYS[1]
local mode = ARGV[1]
local n = tonumber(ARGV[2])
local mark = ARGV[5]
if mode ~= 'take' and mode ~= 'peek' and mode ~= 'refund' then
  return redis.error_reply('redislimit: unknown mode ' .. tostring(mode))
end

-- Every decision is made on the server's clock, never the caller's, so that
-- instances whose clocks disagree still agree. TIME is {seconds, µs}.
local time = redis.call('TIME')
local now_s, now_us = tonumber(time[1]), tonumber(time[2])

-- reply returns the five integers of a decision in one string, "allowed
-- remaining retry-after reset-after mark", which the client reads with
-- fewer allocations than an array. allowed is 0 or 1; the unit of the
-- times is the algorithm's; mark (a string of digits) is an admission's.
local function reply(allowed, remaining, retry, reset, m)
  return string.format('%d %d %d %d %s', allowed, remaining, retry, reset, m or '0')
end
