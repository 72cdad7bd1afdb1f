-- penalty.lua: a Penalty's refusal of one key, shared by the fleet: the
-- key's latest refusals, and its ban once they come too close together.
--
-- KEYS[1]  the key's refusals: a list of their times, newest first, at most
--          m long, in µs since the Unix epoch; it expires `within` after
--          the latest.
-- KEYS[2]  the key's ban: its end, in µs since the Unix epoch; it expires
--          when the ban ends.
-- ARGV[1]  m, the refusals that start a ban (keylimit.Ban.Refusals)
-- ARGV[2]  within, in µs: a ban starts when the m-th latest refusal, this
--          one included, came less than this long ago
-- ARGV[3]  length, the ban's, in µs
-- ARGV[4]  the channel a ban is announced on, "" for none
-- ARGV[5]  the announcement's text before the ban's length: the limit and
--          the instance that asks, which a message carries as
--          "length limit instance key"
-- ARGV[6]  the key
-- Then, only in the package's own tests, two more: the time, in seconds
-- since the Unix epoch and ns within the second, instead of the server's.
--
-- The reply is "banned left started": banned 0 or 1; left, the µs until
-- the ban ends (0 if not banned); started 1 if this refusal started it.

if redis.replicate_commands then redis.replicate_commands() end

local now
if #ARGV >= 8 then
  now = tonumber(ARGV[7]) * 1000000 + math.floor(tonumber(ARGV[8]) / 1000)
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local ban = tonumber(redis.call('GET', KEYS[2]) or '0')
if ban > now then
  return '1 ' .. string.format('%d', ban - now) .. ' 0'
end

local m, within, length = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local count = redis.call('LPUSH', KEYS[1], string.format('%d', now))
if count > m then
  redis.call('LTRIM', KEYS[1], 0, m - 1)
  count = m
end
if count == m and now - tonumber(redis.call('LINDEX', KEYS[1], m - 1)) < within then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], string.format('%d', now + length), 'PX', math.ceil(length / 1000))
  if ARGV[4] ~= '' then
    redis.call('PUBLISH', ARGV[4], string.format('%d', length) .. ' ' .. ARGV[5] .. ' ' .. ARGV[6])
  end
  return '1 ' .. string.format('%d', length) .. ' 1'
end
redis.call('PEXPIRE', KEYS[1], math.ceil(within / 1000))
return '0 0 0'
