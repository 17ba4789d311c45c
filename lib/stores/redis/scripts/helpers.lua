-- The first lines of every script of the family but the heartbeat, prepended to
-- each when it is loaded (scripts.ts).
--
-- The clock: the time `now` (ms) from ARGV[1] ('' = Redis `TIME`), and from
-- ARGV[2] and ARGV[3] the TTL (ms) of a bucket that never refills and the flag
-- '1' that gives every key that TTL (a test clock).
local now
if ARGV[1] == '' then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
else
  now = tonumber(ARGV[1])
end
local neverFullTtl = tonumber(ARGV[2])
local fixedTtl = ARGV[3] == '1'
-- fmt: a number as a string that parses back exactly.
local function fmt (x) return string.format('%.17g', x) end
-- The longest TTL, in ms. A longer time until full (a refill of a token per
-- millennium) is forever in practice, and from about 1e17 ms SET ... PX fails,
-- which would fail the whole call after some of its writes were made.
local maxTtl = 2 ^ 53 - 1
-- tokensAt: the tokens of a bucket (stored = {tokens, last ms} or false) at time t.
local function levelAt (stored, capacity, rate, t)
  if not stored then return capacity end
  local elapsed = t - stored[2]
  if not (elapsed > 0) or rate == 0 then return stored[1] end
  local level = stored[1] + elapsed * (rate / 1000)
  if level < capacity then return level end
  return capacity
end
-- enough: whether a bucket holding available holds enough for needed: at least
-- needed less a rounding tolerance of 1e-12 x max(1, needed), at most 0.1 token.
local function enough (available, needed)
  local scale = 1
  if needed > 1 then scale = needed end
  local slack = 1e-12 * scale
  if not (slack < 0.1) then slack = 0.1 end
  return available >= needed - slack
end
-- toNs: ms rounded to whole nanoseconds.
local function toNs (ms) return math.floor(ms * 1e6 + 0.5) / 1e6 end
-- retryWait (msUntil and retryWait): the ms until a bucket (stored, holding available
-- at now) holds enough for wanted; in whole nanoseconds when it holds enough then,
-- else nudged later past rounding until it does.
local function retryWait (stored, available, capacity, rate, wanted)
  if enough(available, wanted) then return 0 end
  if rate == 0 or not enough(capacity, wanted) then return math.huge end
  local wait = (wanted - available) * 1000 / rate
  local snapped = toNs(wait)
  if enough(available + snapped * (rate / 1000), wanted) then wait = snapped end
  if stored and stored[2] > now then wait = wait + (stored[2] - now) end
  snapped = toNs(wait)
  if enough(levelAt(stored, capacity, rate, now + snapped), wanted) then return snapped end
  local step = 2 ^ -52 * math.abs(now + wait)
  if step == 0 then step = 2 ^ -1074 end
  local n = 0
  while n < 64 and not enough(levelAt(stored, capacity, rate, now + wait), wanted) do
    wait = wait + step
    step = step * 2
    n = n + 1
  end
  return wait
end
-- A bucket's stored state {tokens, last ms}, or false when absent (full).
local function readState (k)
  local text = redis.call('GET', k)
  if not text then return false end
  local space = string.find(text, ' ', 1, true)
  return { tonumber(string.sub(text, 1, space - 1)), tonumber(string.sub(text, space + 1)) }
end
-- Stores a bucket holding left tokens at now, with a TTL of its time until full; deletes it when full.
-- The TTL goes as an integer string: redis.call would print a large number with an exponent.
local function writeState (k, left, capacity, rate)
  if not (left < capacity) then
    redis.call('DEL', k)
    return
  end
  local ttl
  if rate == 0 then ttl = neverFullTtl else ttl = math.ceil((capacity - left) * 1000 / rate) end
  if fixedTtl then ttl = neverFullTtl end
  if not (ttl < maxTtl) then ttl = maxTtl end
  redis.call('SET', k, fmt(left) .. ' ' .. fmt(now), 'PX', string.format('%.0f', ttl))
end
