/**
 * The Redis store's deny cache (lib/stores/deny-cache.ts): a refusal it answers
 * is one Redis would give, with the wait of the request it answers.
 */
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { memoryStore, redisStore, type BucketPolicy, type Store } from '../lib/index.js'
import { DenyCache, readRefusal } from '../lib/stores/deny-cache.js'
import { buildAppOn, manualClock } from './helpers.js'
import { requireRedis, startRedis } from './redis-server.js'

type Clock = ReturnType<typeof manualClock>
interface Step { afterMs?: number, url: string, token?: string }

/** Sends the steps one after another; returns each answer as "status retry-after". */
async function transcript (app: FastifyInstance, clock: Clock, steps: readonly Step[]): Promise<string[]> {
  const lines: string[] = []
  for (const step of steps) {
    clock.advance(step.afterMs ?? 0)
    const headers = step.token === undefined ? {} : { authorization: `Bearer ${step.token}` }
    const response = await app.inject({ url: step.url, headers })
    lines.push(`${response.statusCode} ${response.headers['retry-after'] ?? '-'}`)
  }
  return lines
}

/**
 * The same requests on a memory store and on a Redis store (deny cache on), each
 * on its own manual clock; `steps` gets a token signer for the app.
 */
async function bothStores (options: Parameters<typeof buildAppOn>[1], routes: (app: FastifyInstance) => void, steps: (sign: (claims: object) => string) => Step[], redis: (clock: Clock) => Store): Promise<{ memory: string[], redis: string[] }> {
  const run = async (store: (clock: Clock) => Store): Promise<string[]> => {
    const clock = manualClock()
    const app = await buildAppOn(store(clock), options)
    routes(app)
    await app.ready()
    try {
      return await transcript(app, clock, steps((claims) => app.jwt.sign(claims)))
    } finally {
      await app.close()
    }
  }
  return { memory: await run((clock) => memoryStore({ clock: clock.now })), redis: await run(redis) }
}

if (requireRedis(t)) {
  t.test('a dearer request gets the wait of its own cost, not that of a cheaper refusal (issue 11, item 1)', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const { memory, redis } = await bothStores(
      { app: { tiers: { default: { capacity: 10, refillPerSecond: 2 } } } },
      (app) => {
        app.get('/cheap', { config: { rateLimit: { cost: 1 } } }, async () => 'ok')
        app.get('/dear', { config: { rateLimit: { cost: 10 } } }, async () => 'ok')
      },
      () => [
        ...Array.from({ length: 10 }, () => ({ url: '/cheap' })),
        { url: '/cheap' }, // refused: 1 token in 0.5 s
        { url: '/dear' }, // refused: 10 tokens in 5 s
        { afterMs: 1000, url: '/dear' }, // 2 tokens: 4 s more
        { afterMs: 4000, url: '/dear' }
      ],
      (clock) => redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0 }))
    t.same(memory.slice(10), ['429 1', '429 5', '429 4', '200 -'], 'the memory store')
    t.same(redis, memory, 'the Redis store answers alike, the deny cache included')
  })

  t.test('a new tier is decided by Redis, not by the refusals of the old one (issue 11, item 2a)', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const { memory, redis } = await bothStores(
      { app: { tiers: { default: { capacity: 10, refillPerSecond: 2 }, trial: { capacity: 3, refillPerSecond: 0 } } } },
      (app) => { app.get('/', async () => 'ok') },
      (sign) => {
        const trial = sign({ sub: 'ann', tier: 'trial' })
        const paid = sign({ sub: 'ann' })
        return [
          ...Array.from({ length: 3 }, () => ({ url: '/', token: trial })),
          { url: '/', token: trial }, // refused, for good
          { url: '/', token: trial },
          { afterMs: 1000, url: '/', token: paid }, // the same user, upgraded: 2 tokens refilled
          { url: '/', token: paid },
          { url: '/', token: paid }
        ]
      },
      (clock) => redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0 }))
    t.same(memory.slice(3), ['429 -', '429 -', '200 -', '200 -', '429 1'], 'the memory store')
    t.same(redis, memory, 'the Redis store answers alike, the deny cache included')
  })

  t.test('a refusal by a bucket that never refills ends when its key expires (issue 11, item 2b)', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const store = redisStore({ client, heartbeatIntervalMs: 0 }) // Redis time: keys expire as they say
    t.teardown(() => store.close())
    const request = (cost: number) => [{ key: '{trial:ann}:app', policy: { capacity: 2, refillPerSecond: 0 }, cost }]
    t.equal((await store.consume(request(2))).allowed, true, 'the bucket is spent; its key lives neverFullTtlMs (a day)')
    t.equal(await client.pexpire('tollgate:{trial:ann}:app', 200), 1, 'and now 200 ms')
    t.match(await store.consume(request(1)), { allowed: false, retryAfterMs: Infinity }, 'refused by Redis')
    const cached = store.consume(request(1))
    t.notOk(cached instanceof Promise, 'then by the deny cache')
    t.match(cached, { allowed: false, retryAfterMs: Infinity })
    while (await client.exists('tollgate:{trial:ann}:app') === 1) await new Promise((resolve) => setTimeout(resolve, 10))
    const afterExpiry = store.consume(request(1))
    t.ok(afterExpiry instanceof Promise, 'once the key is gone, Redis decides again')
    t.match(await afterExpiry, { allowed: true, tokens: [1] }, 'on a full bucket')
  })

  t.test('an admission on its way forgets a refusal remembered meanwhile: the next wait counts it', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const clock = manualClock()
    const store = redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0, maxBatch: 1 }) // one script call per decision
    t.teardown(() => store.close())
    const policy: BucketPolicy = { capacity: 10, refillPerSecond: 1 }
    const request = (cost: number) => [{ key: '{p}:app', policy, cost }]
    t.equal((await store.consume(request(8))).allowed, true, '2 tokens left')
    // Two calls in flight at once: Redis refuses the first, then admits the second.
    const [refused, admitted] = await Promise.all([store.consume(request(5)), store.consume(request(1))])
    t.match(refused, { allowed: false, retryAfterMs: 3000 })
    t.match(admitted, { allowed: true, tokens: [1] })
    t.match(await store.consume(request(5)), { allowed: false, retryAfterMs: 4000, tokens: [1] }, '1 token left: 4 s, not the 3 s of the remembered refusal')
  })
}

t.test('the cache on its own: policies compared by their numbers, states bounded in number', async (t) => {
  const policy = { capacity: 10, refillPerSecond: 1 }
  const refusal = { atMs: 0, buckets: [{ tokens: 2, lastMs: 0, ttlMs: 60_000 }, undefined] }
  const both = (cost: number, a: BucketPolicy = policy) => [{ key: 'a', policy: a, cost }, { key: 'b', policy, cost: 1 }]
  const cache = new DenyCache(2)
  cache.forget(both(1)) // nothing kept: nothing to do
  cache.remember(both(5), refusal, 0, 0)
  t.equal(cache.size, 2)
  t.match(cache.lookup(both(5, { ...policy }), 1000), { allowed: false, retryAfterMs: 2000, tokens: [3, 10] }, 'an equal policy in another object')
  t.equal(cache.lookup(both(5, { ...policy, refillPerSecond: 2 }), 1000), undefined, 'another refill')
  t.equal(cache.lookup(both(5, { ...policy, capacity: 20 }), 1000), undefined, 'another capacity')
  t.equal(cache.lookup(both(3), 1000), undefined, 'no bucket short: ask Redis')
  t.equal(cache.lookup([{ key: 'c', policy, cost: 5 }], 1000), undefined, 'an unknown bucket')
  t.equal(cache.lookup(both(5), 60_000), undefined, 'once the key may have expired')
  t.equal(cache.size, 1, 'and its state is dropped')
  cache.remember([...both(5), { key: 'c', policy, cost: 1 }], { ...refusal, buckets: [...refusal.buckets, undefined] }, 0, 0)
  t.equal(cache.size, 1, 'a refusal of more buckets than the cache holds is not kept')
  cache.remember(both(5), refusal, 0, 0)
  t.equal(cache.size, 2, 'when full, cleared before keeping more')
  cache.clear()
  t.equal(cache.lookup(both(5), 1000), undefined)
})

t.test('refusal details are read strictly from the script reply', async (t) => {
  t.same(readRefusal(['x', '1000', '2 500 60000', '', 'y'], 1, 2), {
    refusal: { atMs: 1000, buckets: [{ tokens: 2, lastMs: 500, ttlMs: 60_000 }, undefined] },
    next: 4
  })
  t.same(readRefusal(['1000', '0 0 inf'], 0, 1).refusal.buckets, [{ tokens: 0, lastMs: 0, ttlMs: Infinity }], 'a key without TTL')
  t.throws(() => readRefusal(['1000', 'nan 0 0'], 0, 1), /unexpected reply from the Redis script/)
})
