import t from 'tap'
import { Redis } from 'ioredis'
import { redisStore } from '../../../lib/index.js'
import { parseNumber } from '../../../lib/stores/redis/reply.js'
import { manualClock, storeConformance } from '../../helpers.js'
import { commandCalls, freePort, PATIENT_TIMEOUT_MS, requireRedis, startRedis } from '../../redis-server.js'

if (requireRedis(t)) {
  t.test('the Lua script passes the conformance cases', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const clock = manualClock()
    const store = redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS, denyCacheSize: 0 })
    await storeConformance(t, store, clock.set, 'redis')
    await store.close()
  })

  t.test('decisions asked in one event-loop turn go as one script call', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const inspect = server.client(t)
    const store = redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS })
    const policy = { capacity: 100, refillPerSecond: 0 }
    await store.consume([{ key: '{warm}:x', policy, cost: 1 }]) // loads the script
    const before = await commandCalls(inspect)
    const decisions = await Promise.all(Array.from({ length: 200 }, async (_, i) => store.consume([{ key: `{user:${i % 150}}:app`, policy, cost: 1 }])))
    const after = await commandCalls(inspect)
    t.equal(decisions.filter((d) => d.allowed).length, 200)
    t.equal((after.evalsha ?? 0) - (before.evalsha ?? 0), 1, '200 decisions, one EVALSHA')
    // A key decided several times in one call is read once and written once.
    t.equal((after.get ?? 0) - (before.get ?? 0), 150, '150 keys, 150 GETs')
    t.equal((after.set ?? 0) - (before.set ?? 0), 150, '150 keys, 150 SETs')
    const twice = await client.get('tollgate:{user:0}:app')
    t.match(twice, /^98 /, 'a key decided twice in the call holds both decisions')
    await store.close()
  })

  t.test('a batch over one key decides in order, exactly', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const store = redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS, denyCacheSize: 0 })
    const policy = { capacity: 7, refillPerSecond: 0 }
    const decisions = await Promise.all(Array.from({ length: 20 }, async () => store.consume([{ key: '{one}:k', policy, cost: 1 }])))
    t.same(decisions.map((d) => d.allowed), [...new Array<boolean>(7).fill(true), ...new Array<boolean>(13).fill(false)])
    t.same(decisions.slice(0, 7).map((d) => d.tokens[0]), [6, 5, 4, 3, 2, 1, 0])
    await store.close()
  })

  t.test('every key has a TTL (its time until full) and a hash tag; a full bucket is deleted', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const store = redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS, neverFullTtlMs: 60_000 })
    const sent = performance.now()
    await store.consume([{ key: '{user:42}:app', policy: { capacity: 20, refillPerSecond: 5 }, cost: 10 }, { key: '{user:42}:route:POST /export', policy: { capacity: 3, refillPerSecond: 0.05 }, cost: 1 }])
    await store.consume([{ key: '{ip:1.2.3.4}:edge', policy: { capacity: 5, refillPerSecond: 0 }, cost: 1 }])
    await store.consume([{ key: '{ip:5.6.7.8}:edge', policy: { capacity: 5, refillPerSecond: 1 }, cost: 0 }])
    const keys = (await client.keys('tollgate:*')).sort()
    t.same(keys, ['tollgate:{ip:1.2.3.4}:edge', 'tollgate:{user:42}:app', 'tollgate:{user:42}:route:POST /export'], 'the full bucket (cost 0) was not written')
    const ttls = await Promise.all(keys.map((key) => client.pttl(key)))
    // A TTL runs down from when the script set it: by at most the time since the first call was sent (+1: PTTL's rounding).
    const since = Math.ceil(performance.now() - sent) + 1
    const within = (ttl: number | undefined, full: number): boolean => ttl !== undefined && ttl > full - since && ttl <= full
    t.ok(within(ttls[0], 60_000), `refill 0: neverFullTtlMs (${ttls[0]}, ${since} ms after the call)`)
    t.ok(within(ttls[1], 2000), `10 of 20 at 5/s: full in 2 s (${ttls[1]}, ${since} ms after the call)`)
    t.ok(within(ttls[2], 20_000), `1 of 3 at 0.05/s: full in 20 s (${ttls[2]}, ${since} ms after the call)`)
    for (const key of keys) t.match(key, /^tollgate:\{[^{}]+\}:/)
    await store.close()
  })

  t.test('keys expire, and an expired bucket is a full one', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const store = redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS, denyCacheSize: 0 })
    const policy = { capacity: 1, refillPerSecond: 0.5 } // full again 2 s after use: its TTL
    const sent = performance.now()
    t.equal((await store.consume([{ key: '{e}:k', policy, cost: 1 }])).allowed, true)
    const ttl = await client.pttl('tollgate:{e}:k')
    t.ok(ttl > 2000 - (performance.now() - sent) - 1 && ttl <= 2000, `it expires 2 s after the call (${ttl} ms left)`)
    // Polled until gone: a busy machine reads late, never early (Redis's expiry, 2 s after the script ran).
    while (await client.exists('tollgate:{e}:k') === 1 && performance.now() - sent < 10_000) await new Promise((resolve) => setTimeout(resolve, 50))
    const gone = performance.now() - sent
    t.ok(gone >= 1999 && gone < 10_000, `gone ${gone.toFixed(0)} ms after the call`)
    t.same((await store.consume([{ key: '{e}:k', policy, cost: 1 }])).allowed, true)
    await store.close()
  })

  t.test('the deny cache answers while a bucket is short, with the wait of the request it answers', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const inspector = server.client(t)
    const clock = manualClock()
    const store = redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS })
    const policy = { capacity: 10, refillPerSecond: 1 }
    const both = (cost: number) => [{ key: '{d}:a', policy, cost }, { key: '{d}:b', policy, cost: 1 }]
    t.equal((await store.consume(both(8))).allowed, true) // a: 2 left
    const scriptCalls = async () => { const stats = await commandCalls(inspector); return (stats.evalsha ?? 0) + (stats.eval ?? 0) }
    const start = await scriptCalls()
    const refused = await store.consume(both(5))
    t.match(refused, { allowed: false, retryAfterMs: 3000 })
    clock.set(1000)
    const cached = store.consume(both(6))
    t.notOk(cached instanceof Promise, 'answered synchronously from the cache')
    t.match(cached, { allowed: false, retryAfterMs: 3000, tokens: [3, 10] }, 'with tokens and retry as of now, for its cost (6 with 3 at 1/s: 3 s)')
    t.match(store.consume(both(4)), { allowed: false, retryAfterMs: 1000 }, 'a cheaper request still short: from the cache too')
    t.equal(await scriptCalls(), start + 1, 'no call for the cached refusals')
    t.equal((await store.consume(both(3))).allowed, true, 'a request no longer short is asked of Redis, and passes')
    t.equal(await scriptCalls(), start + 2)
    clock.set(3000)
    t.match(await store.consume(both(5)), { allowed: false, retryAfterMs: 3000 }, 'at the retry time, Redis decides again (a was spent meanwhile)')
    t.equal(await scriptCalls(), start + 3)
    const small = redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS, denyCacheSize: 2, prefix: 'small:' })
    for (const key of ['x', 'y', 'z']) {
      await small.consume([{ key: `{${key}}`, policy, cost: 10 }])
      await small.consume([{ key: `{${key}}`, policy, cost: 10 }])
    }
    t.equal((small as unknown as { denials: { size: number } }).denials.size, 1, 'bounded: cleared when full')
    await store.close()
    await small.close()
  })

  t.test('the prefix option', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const store = redisStore({ client, prefix: 'api-v2:', heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS })
    await store.consume([{ key: '{u:1}:app', policy: { capacity: 2, refillPerSecond: 1 }, cost: 1 }])
    t.same(await client.keys('api-v2:*'), ['api-v2:{u:1}:app'])
    await store.close()
  })

  t.test('without the deny cache, a refund and a reset still reach Redis', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const clock = manualClock()
    const store = redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS, denyCacheSize: 0 })
    t.equal((store as unknown as { denials: unknown }).denials, undefined, 'denyCacheSize 0: no deny cache')
    const bucket = { key: '{w}:k', policy: { capacity: 10, refillPerSecond: 0 }, cost: 7 }
    t.equal((await store.consume([bucket])).allowed, true)
    t.match(await store.peek({ ...bucket, cost: 1 }), { tokens: 3 }, '7 of 10 spent')
    t.equal(await store.refund({ ...bucket, cost: 2 }), 5, 'the refund answers the tokens held then')
    t.match(await store.peek({ ...bucket, cost: 1 }), { tokens: 5 }, 'the refund is in Redis')
    t.match(await client.get('tollgate:{w}:k'), /^5 /)
    await store.reset(bucket.key)
    t.equal(await client.exists('tollgate:{w}:k'), 0, 'the reset deleted the key')
    t.match(await store.peek({ ...bucket, cost: 1 }), { tokens: 10 }, 'full again')
    await store.close()
  })
}

t.test('standalone, with Redis unreachable: decides by failMode, logs by its interval', async (t) => {
  const port = await freePort()
  const client = new Redis({ port, lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => null })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  const policy = { capacity: 2, refillPerSecond: 0 }
  const quiet = redisStore({ client, heartbeatIntervalMs: 0, breakerThreshold: 1 })
  t.match(await quiet.consume([{ key: '{q}:k', policy, cost: 1 }]), { allowed: true, degraded: 'local', tokens: [1] }, 'no logger: silent')
  t.equal(quiet.state, 'open')
  t.match(quiet.consume([{ key: '{q}:k', policy, cost: 1 }]), { allowed: true, degraded: 'local', tokens: [0] }, 'breaker open: answered locally at once')
  t.match(quiet.consume([{ key: '{q}:k', policy, cost: 1 }]), { allowed: false, degraded: 'local' })
  const lines: Array<{ object: Record<string, unknown>, message: string }> = []
  const record = (object: object, message: string): void => { lines.push({ object: object as Record<string, unknown>, message }) }
  const chatty = redisStore({ client, heartbeatIntervalMs: 0, failMode: 'open', logIntervalMs: 0, breakerThreshold: 1 })
  chatty.useLogger({ info: record, warn: record, error: record })
  await chatty.consume([{ key: '{c}:k', policy, cost: 1 }])
  chatty.consume([{ key: '{c}:k', policy, cost: 1 }])
  t.same(lines.map((line) => [line.message.slice(0, 40), line.object.suppressed]), [
    ['fastify-tollgate: Redis call failed; dec', 0],
    ['fastify-tollgate: Redis unavailable; all', 0],
    ['fastify-tollgate: Redis unavailable; all', 0]
  ], 'logIntervalMs 0 logs every event')
  await quiet.close()
  await chatty.close()
})

t.test('replies of the script are parsed strictly', async (t) => {
  t.equal(parseNumber('inf'), Infinity)
  t.equal(parseNumber('2.75'), 2.75)
  t.equal(parseNumber('0.10000000000000001'), 0.1)
  t.throws(() => parseNumber(undefined), /unexpected reply from the Redis script/)
  t.throws(() => parseNumber('nan'), /unexpected reply/)
})

t.test('invalid redisStore options fail with a coded error', async (t) => {
  const client = { defineCommand () {} }
  const cases: Array<[unknown, RegExp]> = [
    [{}, /Expected `redisStore\.client` to be an ioredis Redis or Cluster client, got `undefined`/],
    [{ client: {} }, /`redisStore\.client`/],
    [{ client, prefix: 'a{b}' }, /`redisStore\.prefix` to be a string without `\{` or `\}`/],
    [{ client, failMode: 'fallback' }, /Expected `redisStore\.failMode` to be 'open', 'closed' or 'local', got `"fallback"`/],
    [{ client, timeoutMs: 0 }, /`redisStore\.timeoutMs` to be a number of ms from 1 to 2147483647 \(the longest delay of a Node timer\), got `0`/],
    [{ client, replicas: 0 }, /`redisStore\.replicas`/],
    [{ client, fallbackHeadroom: -1 }, /`redisStore\.fallbackHeadroom`/],
    [{ client, denyCacheSize: 1.5 }, /`redisStore\.denyCacheSize`/],
    [{ client, clock: 'now' }, /`redisStore\.clock` to be a function/],
    [{ client, timeout: 50 }, /Unknown option `redisStore\.timeout`/]
  ]
  for (const [options, message] of cases) {
    t.throws(() => redisStore(options as never), { code: 'TOLLGATE_INVALID_OPTION', message }, JSON.stringify(options))
  }
})
