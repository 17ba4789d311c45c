-- Heartbeat: KEYS[1] is a sorted set of replica ids scored by their last beat
-- (Redis time, ms). ARGV: this replica's id, how long a beat counts (ms), and
-- '1' to leave (on close). Returns, as strings, how many replicas are live and
-- whether this replica's id was new to the set ('1': its last beat was lost).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local window = tonumber(ARGV[2])
local added = 0
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  added = redis.call('ZADD', KEYS[1], now, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window)
return { tostring(redis.call('ZCARD', KEYS[1])), tostring(added) }
