import t from 'tap'
import { redisStore } from '../../../lib/index.js'
import { requireRedis, startRedis } from '../../redis-server.js'

/** The script's longest TTL, in ms: 2^53 − 1. */
const MAX_TTL_MS = Number.MAX_SAFE_INTEGER

if (requireRedis(t)) {
  t.test('a refill so slow that its time until full passes what SET PX takes: the TTL is capped, and no decision of the call fails', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const store = redisStore({ client, heartbeatIntervalMs: 0, denyCacheSize: 0, timeoutMs: 5000 })
    const errors: unknown[] = []
    store.useLogger({ info () {}, warn () {}, error (object) { errors.push(object) } })
    const step = (key: string, refillPerSecond: number) => store.consume([{ key, policy: { capacity: 10, refillPerSecond }, cost: 1 }])
    // One call: another user's decision first (its write comes first), then times until full of 1e18 ms and of Infinity.
    const decisions = await Promise.all([step('{other}:k', 1), step('{slow}:k', 1e-15), step('{slower}:k', 1e-300)])
    t.same(decisions.map((decision) => decision.degraded), [undefined, undefined, undefined], 'every decision of the call is Redis\'s')
    t.same(decisions.map((decision) => decision.tokens), [[9], [9], [9]])
    t.same(errors, [], 'no failed call')
    t.match(await client.get('tollgate:{other}:k'), /^9 /)
    for (const key of ['tollgate:{slow}:k', 'tollgate:{slower}:k']) {
      const ttl = await client.pttl(key)
      t.ok(ttl > MAX_TTL_MS - 10_000 && ttl <= MAX_TTL_MS, `${key}: TTL ${ttl} ms, capped at 2^53 − 1`)
    }
    t.match(await step('{slow}:k', 1e-15), { allowed: true, tokens: [8] }, 'the capped bucket is read back')
    await store.close()
  })

  t.test('neverFullTtlMs up to 2^53 − 1 ms is written as an integer', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const store = redisStore({ client, heartbeatIntervalMs: 0, neverFullTtlMs: MAX_TTL_MS, timeoutMs: 5000 })
    const decision = await store.consume([{ key: '{never}:k', policy: { capacity: 2, refillPerSecond: 0 }, cost: 1 }])
    t.match(decision, { allowed: true, tokens: [1] })
    t.equal(decision.degraded, undefined)
    const ttl = await client.pttl('tollgate:{never}:k')
    t.ok(ttl > MAX_TTL_MS - 10_000 && ttl <= MAX_TTL_MS, `TTL ${ttl} ms`)
    await store.close()
  })
}
