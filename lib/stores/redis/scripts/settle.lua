-- Settlement (`edge.mode: 'settle'`): per bucket, takes the tokens a replica spent
-- without a reservation, less the reserved tokens it gives back, whatever the
-- bucket holds (so that it may go into debt: negative tokens, refilled like any
-- shortfall; given-back tokens never take it above capacity), then reserves for
-- the replica up to the tokens asked for, from what the bucket then holds. A key
-- that comes twice is settled twice, in order. Loaded after helpers.lua (scripts.ts).
--
-- KEYS: the bucket keys, in order; on a Cluster KEYS holds only the first and ARGV
--       ends with every key (as the consume script).
-- ARGV: now (ms; '' = Redis TIME), the TTL (ms) of a bucket that never refills,
--       '1' to give every key that TTL (a test clock),
--       the number of buckets, the number of keys at the end of ARGV (0: the keys
--       are KEYS), '1' when a debit may not put a bucket into debt (the Redis
--       store's charge-back of its local fallback: it takes a bucket down to zero
--       at most, and leaves one already in debt as it is), then per bucket:
--       capacity, refill per second, tokens spent (negative: given back), tokens
--       to reserve.
-- Returns, per bucket, as strings: its tokens after the call, the tokens reserved.
local count = num(ARGV[4])
local keysInArgv = num(ARGV[5])
local noDebt = ARGV[6] == '1'
local out = {}
for i = 1, count do
  local k = KEYS[i]
  if keysInArgv > 0 then k = ARGV[#ARGV - keysInArgv + i] end
  local capacity, rate = num(ARGV[4 * i + 3]), num(ARGV[4 * i + 4])
  local spent, wanted = num(ARGV[4 * i + 5]), num(ARGV[4 * i + 6])
  local held = levelAt(readState(k), capacity, rate, now)
  local left = held - spent
  if noDebt and left < 0 then left = math.min(held, 0) end
  if left > capacity then left = capacity end
  local reserved = 0
  if wanted > 0 and left > 0 then reserved = math.min(wanted, left) end
  left = left - reserved
  local leftText = fmt(left)
  writeState(k, left, leftText, capacity, rate)
  out[2 * i - 1] = leftText
  out[2 * i] = fmt(reserved)
end
return out
