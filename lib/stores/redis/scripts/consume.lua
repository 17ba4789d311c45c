-- The Redis store's consume script: the engine's rules (bucket.ts) over many
-- decisions in one call, atomically. The same arithmetic, in the same order, as
-- `tokensAt`, `enough`, `retryWait` and `consume`; the conformance cases and a differential
-- test run both. Loaded after helpers.lua (scripts.ts).
--
-- KEYS: every bucket key of every decision, in order. On a Cluster, KEYS holds
--       only the first key (it routes the call to its node) and ARGV ends with
--       every key, since a node refuses declared keys of several slots (CROSSSLOT).
-- ARGV: now (ms; '' = Redis TIME), the TTL (ms) of a bucket that never refills,
--       a flag '1' to give every key that TTL (a test clock: Redis expires keys in
--       its own time), the number of decisions, the number of keys at the end of
--       ARGV (0: the keys are KEYS), the number of distinct policies, then per
--       policy: capacity, refill per second; then per decision: its bucket count,
--       then per bucket: its policy's number (from 1) and its cost.
-- Returns, per decision: '1' or '0' (allowed), the retry in ms, then the tokens of
-- each bucket after the step; all as strings, since ioredis 6 speaks RESP3 and a
-- Lua number would come back truncated to an integer. A refused decision is
-- followed, for the deny cache (deny-cache.ts), by the time `now` (ms), then per
-- bucket its state and how long its key lives yet, as "<tokens> <last ms> <ttl ms>"
-- ('' when absent, i.e. full; ttl 'inf' for a key without one): the only work
-- the script does for the cache is a PTTL per present key of a refusal.
-- A bucket is stored as the string "<tokens> <last ms>", with a PX TTL of its time
-- until full, at most 2^53 − 1 ms (285 000 years); a bucket that is full is deleted
-- (an absent bucket is a full one).
-- A key decided several times in one call is read once and written once, at the
-- end, with its last state: the same result as a GET and a SET per decision.
local decisions = tonumber(ARGV[4])
local keysInArgv = tonumber(ARGV[5])
local keys = KEYS
if keysInArgv > 0 then
  keys = {}
  for i = 1, keysInArgv do keys[i] = ARGV[#ARGV - keysInArgv + i] end
end
local capacities, rates = {}, {}
for p = 1, tonumber(ARGV[6]) do
  capacities[p], rates[p] = tonumber(ARGV[5 + 2 * p]), tonumber(ARGV[6 + 2 * p])
end
local arg = 7 + 2 * #capacities
local key = 1
local out = {}
-- A key's state as this call left it ({tokens, last ms}, or false: absent, full),
-- so a key decided many times in one call is read once and written once, at the end.
local seen, writes, order = {}, {}, {}
local nowText = fmt(now)
for _ = 1, decisions do
  local count = tonumber(ARGV[arg])
  arg = arg + 1
  local tokens, policies, costs = {}, {}, {}
  local allowed = true
  local retry = 0
  for i = 1, count do
    local p = tonumber(ARGV[arg])
    local capacity, rate, cost = capacities[p], rates[p], tonumber(ARGV[arg + 1])
    arg = arg + 2
    local k = keys[key + i - 1]
    local stored = seen[k]
    if stored == nil then
      stored = readState(k)
      seen[k] = stored
    end
    local available = levelAt(stored, capacity, rate, now)
    tokens[i], policies[i], costs[i] = available, p, cost
    if not enough(available, cost) then
      allowed = false
      local wait = retryWait(stored, available, capacity, rate, cost)
      if wait > retry then retry = wait end
    end
  end
  local texts = {}
  if allowed then
    retry = 0
    for i = 1, count do
      local left = tokens[i] - costs[i]
      tokens[i] = left
      texts[i] = fmt(left)
      local capacity, rate = capacities[policies[i]], rates[policies[i]]
      local missing = capacity - left
      local ttl
      if missing <= 0 then ttl = 0
      elseif rate == 0 then ttl = neverFullTtl
      else ttl = math.ceil(missing * 1000 / rate) end
      if fixedTtl then ttl = neverFullTtl end
      if not (ttl < maxTtl) then ttl = maxTtl end -- inf and nan included
      local k = keys[key + i - 1]
      if ttl <= 0 then seen[k] = false else seen[k] = { left, now } end
      if writes[k] == nil then order[#order + 1] = k end
      if ttl <= 0 then writes[k] = false else writes[k] = { texts[i] .. ' ' .. nowText, ttl } end
    end
  end
  out[#out + 1] = allowed and '1' or '0'
  out[#out + 1] = fmt(retry)
  for i = 1, count do out[#out + 1] = texts[i] or fmt(tokens[i]) end
  if not allowed then
    -- For the deny cache: each bucket's state as read, and its key's TTL (a pending write's, if any).
    out[#out + 1] = nowText
    for i = 1, count do
      local k = keys[key + i - 1]
      local stored = seen[k]
      if stored then
        local ttl = writes[k] and writes[k][2] or redis.call('PTTL', k)
        if ttl < 0 then ttl = math.huge end
        out[#out + 1] = fmt(stored[1]) .. ' ' .. fmt(stored[2]) .. ' ' .. fmt(ttl)
      else
        out[#out + 1] = ''
      end
    end
  end
  key = key + count
end
-- The TTL goes as an integer string: redis.call would print a large number with an exponent.
for _, k in ipairs(order) do
  local write = writes[k]
  if write then redis.call('SET', k, write[1], 'PX', string.format('%.0f', write[2])) else redis.call('DEL', k) end
end
return out
