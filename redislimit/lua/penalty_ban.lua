-- penalty_ban.lua: how long a Penalty's ban of one key has left, as Redis
-- holds it; an instance asks when an announcement names the key, since an
-- announcement is anyone's to publish.
--
-- KEYS[1]  the key's ban (see penalty.lua): its end, in µs since the Unix
--          epoch
-- ARGV[1]  the most to answer, in µs: the ban's length
-- Then, only in the package's own tests, two more: the time, in seconds
-- since the Unix epoch and ns within the second, instead of the server's.
--
-- The reply is the µs until the ban ends, at most ARGV[1]; 0 if there is
-- no ban, or the key holds no number.

local now
if #ARGV >= 3 then
  now = tonumber(ARGV[2]) * 1000000 + math.floor(tonumber(ARGV[3]) / 1000)
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local ban = tonumber(redis.call('GET', KEYS[1]) or '0')
if ban == nil or ban <= now then
  return 0
end
return math.min(ban - now, tonumber(ARGV[1]))
