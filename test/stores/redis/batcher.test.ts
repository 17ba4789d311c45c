import t from 'tap'
import { redisStore, StoreUnavailableError, type RedisClientLike } from '../../../lib/index.js'
import { MAX_BATCH, MicroBatcher } from '../../../lib/stores/redis/batcher.js'
import { manualClock } from '../../helpers.js'
import { commandCalls, requireRedis, startRedis } from '../../redis-server.js'

// Slow to refill: a written key lives about an hour, however long a big call takes to land and be read.
const policy = { capacity: 10, refillPerSecond: 1 / 360 }

if (requireRedis(t)) {
  t.test('a batch of 10 000 decisions of four buckets (maxBatch at its bound) goes as one script call, arguments not spread', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const inspector = server.client(t)
    // A generous timeout: this test is about the size of one call, not about a busy machine.
    const store = redisStore({ client, heartbeatIntervalMs: 0, maxBatch: MAX_BATCH, timeoutMs: 60_000 })
    await store.consume([{ key: '{warm}:x', policy, cost: 1 }]) // loads the script
    const before = await commandCalls(inspector)
    // 10 000 × (1 + 2 × 4) arguments and 40 000 keys: spread into one call, about 130 000 arguments overflow the stack.
    const decisions = await Promise.all(Array.from({ length: MAX_BATCH }, async (_, i) => store.consume(
      [0, 1, 2, 3].map((b) => ({ key: `{user:${i}}:${b}`, policy, cost: 1 }))
    )))
    const after = await commandCalls(inspector)
    t.equal(decisions.filter((decision) => decision.allowed && decision.degraded === undefined).length, MAX_BATCH, 'every decision allowed by Redis')
    t.same(decisions[MAX_BATCH - 1]?.tokens, [9, 9, 9, 9])
    t.equal((after.evalsha ?? 0) - (before.evalsha ?? 0), 1, 'one EVALSHA')
    t.match(await inspector.get('tollgate:{user:9999}:3'), /^9 /, 'the last key of the call was written')
    await store.close()
  })
}

t.test(`maxBatch above ${MAX_BATCH} fails at startup, naming the bound`, async (t) => {
  const client = { defineCommand () {} }
  t.throws(() => redisStore({ client, maxBatch: 17_000 }), {
    code: 'TOLLGATE_INVALID_OPTION',
    message: /Expected `redisStore\.maxBatch` to be an integer from 1 to 10000, got `17000` \(number\)/
  })
  t.doesNotThrow(() => redisStore({ client, maxBatch: MAX_BATCH, heartbeatIntervalMs: 0 }))
})

/** A client whose consume script throws when called, as a call with too many arguments did. */
function throwingClient (): RedisClientLike {
  const client: Record<string, unknown> = {
    defineCommand (name: string) {
      client[name] = () => { throw new RangeError('Maximum call stack size exceeded') }
    }
  }
  return client as unknown as RedisClientLike
}

t.test('a script call that throws is a failed call: its batch is decided by failMode, and the process lives', async (t) => {
  const buckets = [{ key: '{t}:k', policy, cost: 1 }]
  const local = redisStore({ client: throwingClient(), clock: manualClock().now, heartbeatIntervalMs: 0, breakerThreshold: 2 })
  const decisions = await Promise.all([local.consume(buckets), local.consume(buckets)])
  t.match(decisions, [{ allowed: true, degraded: 'local', tokens: [9] }, { allowed: true, degraded: 'local', tokens: [8] }])
  t.equal(local.state, 'closed', 'one failed call (one batch) counts once')
  await local.consume(buckets)
  t.equal(local.state, 'open', 'the second failed call opens the breaker')
  const closed = redisStore({ client: throwingClient(), heartbeatIntervalMs: 0, failMode: 'closed' })
  await t.rejects(async () => closed.consume(buckets), StoreUnavailableError)
  await local.close()
  await closed.close()
})

t.test('a batch whose sending throws is rejected, decision by decision; the next batch is sent', async (t) => {
  const sent: number[] = []
  const batcher = new MicroBatcher({
    maxBatch: 2,
    nodeOf: undefined,
    send (batch) {
      sent.push(batch.length)
      if (sent.length === 1) throw new RangeError('Maximum call stack size exceeded')
      for (const pending of batch) pending.resolve({ allowed: true, tokens: [], retryAfterMs: 0 })
    }
  })
  const results = await Promise.allSettled([0, 1, 2].map(async () => batcher.add([{ key: '{b}:k', policy, cost: 1 }])))
  t.same(sent, [2, 1], 'two batches: maxBatch 2')
  t.match(results, [
    { status: 'rejected', reason: { name: 'RangeError' } },
    { status: 'rejected', reason: { name: 'RangeError' } },
    { status: 'fulfilled', value: { allowed: true } }
  ])
})
