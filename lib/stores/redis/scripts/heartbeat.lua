-- Heartbeat: KEYS[1] is a sorted set of replica ids scored by their last beat
-- (Redis time, ms). ARGV: this replica's id, how long a beat counts (ms), and
-- '1' to leave (on close). Returns how many replicas are live, as a string.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local window = tonumber(ARGV[2])
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window)
return tostring(redis.call('ZCARD', KEYS[1]))
