/**
 * The first lines of every script of the family: the time `now` (ms) from ARGV[1]
 * ('' = Redis `TIME`), and from ARGV[2] and ARGV[3] the TTL (ms) of a bucket that
 * never refills and the flag '1' that gives every key that TTL (a test clock).
 */
const CLOCK = `local now
if ARGV[1] == '' then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
else
  now = tonumber(ARGV[1])
end
local neverFullTtl = tonumber(ARGV[2])
local fixedTtl = ARGV[3] == '1'`

/**
 * The helpers the scripts share: `fmt` (a number as a string that parses back
 * exactly), `maxTtl`, and `levelAt`, which is `tokensAt` of bucket.ts.
 */
const HELPERS = `local function fmt (x) return string.format('%.17g', x) end
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
end`

/**
 * The Redis store's Lua script: the engine's rules (bucket.ts) over many decisions
 * in one call, atomically. The same arithmetic, in the same order, as `tokensAt`,
 * `retryWait` and `consume`; the conformance cases and a differential test run both.
 *
 * KEYS: every bucket key of every decision, in order. On a Cluster, KEYS holds
 *       only the first key (it routes the call to its node) and ARGV ends with
 *       every key, since a node refuses declared keys of several slots (CROSSSLOT).
 * ARGV: now (ms; '' = Redis TIME), the TTL (ms) of a bucket that never refills,
 *       a flag '1' to give every key that TTL (a test clock: Redis expires keys in
 *       its own time), the number of decisions, the number of keys at the end of
 *       ARGV (0: the keys are KEYS), the number of distinct policies, then per
 *       policy: capacity, refill per second; then per decision: its bucket count,
 *       then per bucket: its policy's number (from 1) and its cost.
 * Returns, per decision: '1' or '0' (allowed), the retry in ms, then the tokens of
 * each bucket after the step; all as strings, since ioredis 6 speaks RESP3 and a
 * Lua number would come back truncated to an integer. A refused decision is
 * followed, for the deny cache (deny-cache.ts), by the time `now` (ms), then per
 * bucket its state and how long its key lives yet, as "<tokens> <last ms> <ttl ms>"
 * ('' when absent, i.e. full; ttl 'inf' for a key without one): the only work
 * the script does for the cache is a PTTL per present key of a refusal.
 * A bucket is stored as the string "<tokens> <last ms>", with a PX TTL of its time
 * until full, at most 2^53 − 1 ms (285 000 years); a bucket that is full is deleted
 * (an absent bucket is a full one).
 * A key decided several times in one call is read once and written once, at the
 * end, with its last state: the same result as a GET and a SET per decision.
 */
const body = `
${CLOCK}
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
${HELPERS}
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
      stored = false
      local text = redis.call('GET', k)
      if text then
        local space = string.find(text, ' ', 1, true)
        stored = { tonumber(string.sub(text, 1, space - 1)), tonumber(string.sub(text, space + 1)) }
      end
      seen[k] = stored
    end
    local available = levelAt(stored, capacity, rate, now)
    tokens[i], policies[i], costs[i] = available, p, cost
    if not (available >= cost) then
      allowed = false
      local wait
      if cost > capacity or rate == 0 then
        wait = math.huge
      else
        -- retryWait: the quotient, nudged later past rounding until a retry at it passes.
        wait = (cost - available) * 1000 / rate
        if stored and stored[2] > now then wait = wait + (stored[2] - now) end
        local step = 2 ^ -52 * math.abs(now + wait)
        if step == 0 then step = 2 ^ -1074 end
        local n = 0
        while n < 64 and levelAt(stored, capacity, rate, now + wait) < cost do
          wait = wait + step
          step = step * 2
          n = n + 1
        end
      end
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
`

/** For a single Redis: every decision of a call shares one server. */
export const CONSUME_SCRIPT = body

/**
 * For Redis Cluster (Redis 7+): one call carries the decisions of many identities
 * whose slots live on one node (each decision's own keys share one slot); the
 * flag lets the script touch keys of several slots of that node.
 */
export const CONSUME_SCRIPT_CLUSTER = '#!lua flags=allow-cross-slot-keys\n' + body

/**
 * One bucket, read, given back or deleted (`fastify.tollgate.peek`, `refund`,
 * `reset`): the engine's `read` and `refund` (bucket.ts), in the same arithmetic
 * as the consume script, on its stored form and TTLs. One key, so a Cluster
 * routes the call by it (no cross-slot flag).
 *
 * KEYS[1]: the bucket key.
 * ARGV: now, the never-full TTL and the fixed-TTL flag (as the consume script),
 *       then the operation ('peek', 'refund' or 'reset'), the capacity, the refill
 *       per second, and an amount: for 'peek' the tokens the bucket must hold (the
 *       cost, or the capacity for an overdraft), for 'refund' the tokens given back.
 * Returns, as strings: 'peek': the tokens now, the ms until they reach the amount,
 * the ms until full ('inf': never); 'refund': the tokens after it (the capacity
 * when the bucket is full, and its key deleted, or was absent and stays so);
 * 'reset': '1' when a key was deleted, else '0'.
 */
export const BUCKET_SCRIPT = `
${CLOCK}
local op = ARGV[4]
local k = KEYS[1]
if op == 'reset' then return tostring(redis.call('DEL', k)) end
local capacity, rate, amount = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
${HELPERS}
local stored = readState(k)
local available = levelAt(stored, capacity, rate, now)
-- retryWait: the ms until the bucket holds wanted, nudged later past rounding until it does.
local function waitFor (wanted)
  if available >= wanted then return 0 end
  if wanted > capacity or rate == 0 then return math.huge end
  local wait = (wanted - available) * 1000 / rate
  if stored and stored[2] > now then wait = wait + (stored[2] - now) end
  local step = 2 ^ -52 * math.abs(now + wait)
  if step == 0 then step = 2 ^ -1074 end
  local n = 0
  while n < 64 and levelAt(stored, capacity, rate, now + wait) < wanted do
    wait = wait + step
    step = step * 2
    n = n + 1
  end
  return wait
end
if op == 'peek' then return { fmt(available), fmt(waitFor(amount)), fmt(waitFor(capacity)) } end
-- refund: an absent bucket is full and stays absent (unless tokens are taken: a negative amount); a full one is deleted.
if not stored and amount >= 0 then return fmt(capacity) end
local left = available + amount
-- a negative amount is a debt to put the bucket in (a penalty): at most that many tokens.
if amount < 0 then left = math.min(available, amount) end
writeState(k, left, capacity, rate)
if not (left < capacity) then return fmt(capacity) end
return fmt(left)
`

/**
 * Settlement (`edge.mode: 'settle'`): per bucket, takes the tokens a replica spent
 * without a reservation, less the reserved tokens it gives back, whatever the
 * bucket holds (so that it may go into debt: negative tokens, refilled like any
 * shortfall; given-back tokens never take it above capacity), then reserves for
 * the replica up to the tokens asked for, from what the bucket then holds. A key
 * that comes twice is settled twice, in order.
 *
 * KEYS: the bucket keys, in order; on a Cluster KEYS holds only the first and ARGV
 *       ends with every key (as the consume script).
 * ARGV: now, the never-full TTL and the fixed-TTL flag (as the consume script),
 *       the number of buckets, the number of keys at the end of ARGV (0: the keys
 *       are KEYS), then per bucket: capacity, refill per second, tokens spent
 *       (negative: given back), tokens to reserve.
 * Returns, per bucket, as strings: its tokens after the call, the tokens reserved.
 */
const settleBody = `
${CLOCK}
${HELPERS}
local count = tonumber(ARGV[4])
local keysInArgv = tonumber(ARGV[5])
local out = {}
for i = 1, count do
  local k = KEYS[i]
  if keysInArgv > 0 then k = ARGV[#ARGV - keysInArgv + i] end
  local capacity, rate = tonumber(ARGV[4 * i + 2]), tonumber(ARGV[4 * i + 3])
  local spent, wanted = tonumber(ARGV[4 * i + 4]), tonumber(ARGV[4 * i + 5])
  local left = levelAt(readState(k), capacity, rate, now) - spent
  if left > capacity then left = capacity end
  local reserved = 0
  if wanted > 0 and left > 0 then reserved = math.min(wanted, left) end
  left = left - reserved
  writeState(k, left, capacity, rate)
  out[2 * i - 1] = fmt(left)
  out[2 * i] = fmt(reserved)
end
return out
`

/** Settlement on a single Redis. */
export const SETTLE_SCRIPT = settleBody

/** Settlement on a Cluster node: the keys of one call may live in several of its slots. */
export const SETTLE_SCRIPT_CLUSTER = '#!lua flags=allow-cross-slot-keys\n' + settleBody

/**
 * Heartbeat: KEYS[1] is a sorted set of replica ids scored by their last beat
 * (Redis time, ms). ARGV: this replica's id, how long a beat counts (ms), and
 * '1' to leave (on close). Returns how many replicas are live, as a string.
 */
export const HEARTBEAT_SCRIPT = `
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
`

/** Parses a number the script formatted with %.17g (`inf` included); throws on anything else. */
export function parseNumber (text: unknown): number {
  if (text === 'inf') return Infinity
  const value = Number(text)
  if (Number.isNaN(value)) throw new Error(`fastify-tollgate: unexpected reply from the Redis script: ${String(text)}`)
  return value
}
