-- The Redis store's consume script: the engine's rules (bucket.ts) over many
-- decisions in one call, atomically. The same arithmetic, in the same order, as
-- `tokensAt`, `enough`, `retryWait` and `consume`; the conformance cases and a differential
-- test run both. Loaded after helpers.lua (scripts.ts).
--
-- KEYS: every bucket key of every decision, in order. On a Cluster, KEYS holds
--       only the first key (it routes the call to its node) and ARGV ends with
--       every key, since a node refuses declared keys of several slots (CROSSSLOT).
-- ARGV[1]: every number of the call, as one JSON array (cjson reads it in one
--       pass: an argument costs the client more than its text): now (ms; null =
--       Redis TIME), the TTL (ms) of a bucket that never refills, 1 to give every
--       key that TTL (a test clock: Redis expires keys in its own time), else 0,
--       the number of decisions, the number of keys at the end of ARGV (0: the
--       keys are KEYS), the number of distinct policies, then per policy:
--       capacity, refill per second; then per decision: its bucket count, then per
--       bucket: its policy's number (from 1) and its cost.
-- Returns one string, its values separated by spaces; per decision: 1 or 0
-- (allowed), the retry in ms, then the tokens of each bucket after the step. A
-- refused decision is followed, for the deny cache (deny-cache.ts), by the time
-- `now` (ms), then per bucket its state and how long its key lives yet, as
-- "<tokens> <last ms> <ttl ms>" ('-' when absent, i.e. full; ttl 'inf' for a key
-- without one): the only work the script does for the cache is a PTTL per present
-- key of a refusal. Numbers as text, since ioredis 6 speaks RESP3 and a Lua
-- number would come back truncated to an integer.
-- A bucket is stored as the string "<tokens> <last ms>", with a PX TTL of its time
-- until full, at most 2^53 − 1 ms (285 000 years); a bucket that is full is deleted
-- (an absent bucket is a full one).
-- A key decided several times in one call is read once and written once, at the
-- end, with its last state: the same result as a GET and a SET per decision.
-- The numbers of ARGV[1], decoded by helpers.lua (`head`).
local v = head
local decisions = v[4]
local keysInArgv = v[5]
local keys = KEYS
if keysInArgv > 0 then
  keys = {}
  for i = 1, keysInArgv do keys[i] = ARGV[#ARGV - keysInArgv + i] end
end
-- Per policy p: its capacity at v[5 + 2p], its refill per second at v[6 + 2p].
local arg = 7 + 2 * v[6]
local key = 1
local out = {}
-- A key's state as this call left it ({tokens, last ms[, text to store]}, or false:
-- absent, full), so a key decided many times in one call is read once and written
-- once, at the end: `order` lists the keys to write, `pending` their TTL (0: delete).
local seen, pending, order = {}, {}, {}
-- Per bucket i of the decision at hand (reused by the next one): its tokens at
-- 3i − 2, its policy's number at 3i − 1, its cost at 3i.
local buckets = {}
for _ = 1, decisions do
  local count = v[arg]
  arg = arg + 1
  local allowed = true
  local retry = 0
  for i = 1, count do
    local p, cost = v[arg], v[arg + 1]
    local capacity, rate = v[5 + 2 * p], v[6 + 2 * p]
    arg = arg + 2
    local k = keys[key + i - 1]
    local stored = seen[k]
    if stored == nil then
      stored = readState(k)
      seen[k] = stored
    end
    local available = levelAt(stored, capacity, rate, now)
    buckets[3 * i - 2], buckets[3 * i - 1], buckets[3 * i] = available, p, cost
    if not enough(available, cost) then
      allowed = false
      local wait = retryWait(stored, available, capacity, rate, cost)
      if wait > retry then retry = wait end
    end
  end
  if allowed then
    out[#out + 1] = '1'
    out[#out + 1] = '0'
    for i = 1, count do
      local left = buckets[3 * i - 2] - buckets[3 * i]
      local text = fmt(left)
      out[#out + 1] = text
      local p = buckets[3 * i - 1]
      local ttl = ttlFor(left, v[5 + 2 * p], v[6 + 2 * p])
      local k = keys[key + i - 1]
      local state = seen[k]
      if ttl <= 0 then
        seen[k] = false
      elseif state then
        state[1], state[2], state[3] = left, now, text
      else
        seen[k] = { left, now, text }
      end
      if pending[k] == nil then order[#order + 1] = k end
      pending[k] = ttl
    end
  else
    out[#out + 1] = '0'
    out[#out + 1] = fmt(retry)
    for i = 1, count do out[#out + 1] = fmt(buckets[3 * i - 2]) end
    -- For the deny cache: each bucket's state as read, and its key's TTL (a pending write's, if any).
    out[#out + 1] = nowText
    for i = 1, count do
      local k = keys[key + i - 1]
      local stored = seen[k]
      if stored then
        local ttl = pending[k] or redis.call('PTTL', k)
        if ttl < 0 then ttl = math.huge end
        out[#out + 1] = fmt(stored[1]) .. ' ' .. fmt(stored[2]) .. ' ' .. fmt(ttl)
      else
        out[#out + 1] = '-'
      end
    end
  end
  key = key + count
end
for _, k in ipairs(order) do
  local ttl = pending[k]
  if ttl > 0 then redis.call('SET', k, seen[k][3] .. ' ' .. nowText, 'PX', string.format('%d', ttl)) else redis.call('DEL', k) end
end
return table.concat(out, ' ')
