-- The first lines of every script of the family but the heartbeat, prepended to
-- each when it is loaded (scripts.ts).
--
-- The cost inside Redis sets the shapes below (npm run bench:redis-scripts
-- --callgrind): each strtod and each '%.17g' (glibc's multi-precision
-- printf) costs about as much as a Redis command called from the script, each
-- table about a third of that.
--
-- num: the number a decimal text denotes, as tonumber gives it, for less: Lua 5.1's
-- tonumber runs strtod twice (lua_isnumber, then lua_tonumber), arithmetic on
-- the text once; '0' and '1', the most frequent arguments, need none. (A text
-- that is no number fails the call, where tonumber would give nil.)
local function num (text)
  if text == '1' then return 1 end
  if text == '0' then return 0 end
  return text * 1
end
-- head: the call's first values: the time `now` (ms; '' or null: Redis `TIME`), the
-- TTL (ms) of a bucket that never refills, and '1' (or 1) to give every key that
-- TTL (a test clock: Redis expires keys in its own time); then each script's own.
-- They are ARGV, or, when ARGV[1] opens with '[' (the consume script, whose client
-- sends every number in one argument), the numbers of the JSON array it holds.
-- (A function setting the clock for each script cost 0.9k instructions a call.)
local head, now, nowText = ARGV, nil, nil
local given = ARGV[1]
if given ~= '' and string.byte(given) == 91 then
  head = cjson.decode(given)
  given = head[1]
end
if given ~= '' and given ~= cjson.null then now = num(given) end
if not now then
  -- Whole µs divided once: the quotient is the double nearest "<seconds><ms>.<µs>",
  -- so that text, made from integers, parses back to exactly `now`.
  local time = redis.call('TIME')
  local us = num(time[2])
  local fraction = us % 1000
  now = (num(time[1]) * 1e6 + us) / 1000
  nowText = string.format('%s%03d.%03d', time[1], (us - fraction) / 1000, fraction)
end
local fixedTtl = head[3]
fixedTtl = fixedTtl == '1' or fixedTtl == 1
-- fmt: a number as a string that parses back exactly; a whole number below 2^53
-- (but 0, which may be -0) as an integer, the same text as '%.17g' gives it.
local exact = 2 ^ 53
local function fmt (x)
  if x % 1 == 0 and x < exact and x > -exact and x ~= 0 then return string.format('%d', x) end
  return string.format('%.17g', x)
end
if not nowText then nowText = fmt(now) end
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
-- retryWait (msUntil and retryWait): the ms until a bucket (stored, holding available
-- at now) holds enough for wanted; in whole nanoseconds when it holds enough then,
-- else nudged later past rounding until it does.
local function retryWait (stored, available, capacity, rate, wanted)
  if enough(available, wanted) then return 0 end
  -- toNs: ms rounded to whole nanoseconds (made here: a function costs at each call of the script).
  local function toNs (ms) return math.floor(ms * 1e6 + 0.5) / 1e6 end
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
  return { num(string.sub(text, 1, space - 1)), num(string.sub(text, space + 1)) }
end
-- ttlFor: the TTL (ms) of a bucket holding left tokens: its time until full (at
-- most maxTtl; 0 when full), or the never-full TTL (head[2], read only when a
-- bucket needs it). Stored with '%d': redis.call would print a large number
-- with an exponent.
local function ttlFor (left, capacity, rate)
  local missing = capacity - left
  local ttl
  if missing <= 0 then ttl = 0
  elseif rate == 0 then ttl = num(head[2])
  else ttl = math.ceil(missing * 1000 / rate) end
  if fixedTtl then ttl = num(head[2]) end
  if not (ttl < maxTtl) then ttl = maxTtl end -- inf and nan included
  return ttl
end
-- Stores a bucket holding left tokens (its text: leftText) at now, with a TTL of
-- its time until full; deletes it when full.
local function writeState (k, left, leftText, capacity, rate)
  if not (left < capacity) then
    redis.call('DEL', k)
    return
  end
  redis.call('SET', k, leftText .. ' ' .. nowText, 'PX', string.format('%d', ttlFor(left, capacity, rate)))
end
