-- One bucket, read, given back or deleted (`fastify.tollgate.peek`, `refund`,
-- `reset`): the engine's `read` and `refund` (bucket.ts), in the same arithmetic
-- as the consume script, on its stored form and TTLs. One key, so a Cluster
-- routes the call by it (no cross-slot flag). Loaded after helpers.lua (scripts.ts).
--
-- KEYS[1]: the bucket key.
-- ARGV: now (ms; '' = Redis TIME), the TTL (ms) of a bucket that never refills,
--       '1' to give every key that TTL (a test clock),
--       then the operation ('peek', 'refund' or 'reset'), the capacity, the refill
--       per second, and an amount: for 'peek' the tokens the bucket must hold (the
--       cost, or the capacity for an overdraft), for 'refund' the tokens given back;
--       for 'refund' then (optional) its id and how long (ms) to remember it.
-- Returns, as strings: 'peek': the tokens now, the ms until they reach the amount,
-- the ms until full ('inf': never); 'refund': the tokens after it (the capacity
-- when the bucket is full, and its key deleted, or was absent and stays so);
-- 'reset': '1' when a key was deleted, else '0'.
local op = ARGV[4]
local k = KEYS[1]
if op == 'reset' then return tostring(redis.call('DEL', k)) end
local capacity, rate, amount = num(ARGV[5]), num(ARGV[6]), num(ARGV[7])
local stored = readState(k)
local available = levelAt(stored, capacity, rate, now)
if op == 'peek' then
  return { fmt(available), fmt(retryWait(stored, available, capacity, rate, amount)), fmt(retryWait(stored, available, capacity, rate, capacity)) }
end
-- refund: an absent bucket is full and stays absent (unless tokens are taken: a negative amount); a full one is deleted.
if not stored and amount >= 0 then return fmt(capacity) end
-- A refund sent again (a client re-sends a call whose reply a dropped connection
-- lost) is applied once: the first run marks its id, `<key>~refund:<id>` (the
-- key's hash tag, so the key's slot), and a run that finds the mark changes nothing.
-- (A debt, a negative amount, takes the bucket down to it at most: applied twice, it changes nothing more.)
local id = ARGV[8]
if amount > 0 and id and id ~= '' and not redis.call('SET', k .. '~refund:' .. id, '1', 'NX', 'PX', ARGV[9]) then
  if not (available < capacity) then return fmt(capacity) end
  return fmt(available)
end
local left = available + amount
-- a negative amount is a debt to put the bucket in (a penalty): at most that many tokens.
if amount < 0 then left = math.min(available, amount) end
local leftText = fmt(left)
writeState(k, left, leftText, capacity, rate)
if not (left < capacity) then return fmt(capacity) end
return leftText
