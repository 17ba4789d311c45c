-- The least any token bucket on one shared clock makes Redis do per call: read the
-- clock once (TIME), then per key read its state (GET) and write it back with a TTL
-- (SET PX), and answer one integer per key. No arithmetic, no parsing, no formatting.
-- Called with the consume or the settle script's arguments (which it ignores, but Redis still
-- receives and wraps them), so its cost is the floor of that call's shape:
--   npm run bench:redis-scripts -- --callgrind --dir floor=bench/redis-floor
local time = redis.call('TIME')
local out = {}
for i = 1, #KEYS do
  redis.call('GET', KEYS[i])
  redis.call('SET', KEYS[i], time[1], 'PX', 100000)
  out[i] = 1
end
return out
