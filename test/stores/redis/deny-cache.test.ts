/**
 * The Redis store's deny cache (lib/stores/deny-cache.ts): a refusal it answers
 * is one Redis would give, with the wait of the request it answers.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import tollgate, { memoryStore, redisStore, type Store } from '../../../lib/index.js'
import type { BucketPolicy } from '../../../lib/types/engine.js'
import type { BucketRequest } from '../../../lib/types/store.js'
import { DenyCache, readRefusal, ZERO_COST_HOLD_MS } from '../../../lib/stores/redis/deny-cache.js'
import { ReplyReader } from '../../../lib/stores/redis/reply.js'
import { buildAppOn, manualClock } from '../../helpers.js'
import { commandCalls, requireRedis, startRedis, type RedisServer } from '../../redis-server.js'

type Clock = ReturnType<typeof manualClock>
interface Step { afterMs?: number, url: string, token?: string }

/**
 * Sends the steps one after another (an array of steps: all at once, in order);
 * returns each answer as "status retry-after".
 */
async function transcript (app: FastifyInstance, clock: Clock, steps: ReadonlyArray<Step | readonly Step[]>): Promise<string[]> {
  const lines: string[] = []
  for (const entry of steps) {
    const together = 'url' in entry ? [entry] : entry
    clock.advance(together[0]?.afterMs ?? 0)
    const responses = await Promise.all(together.map(async (step) => app.inject({
      url: step.url,
      headers: step.token === undefined ? {} : { authorization: `Bearer ${step.token}` }
    })))
    for (const response of responses) lines.push(`${response.statusCode} ${response.headers['retry-after'] ?? '-'}`)
  }
  return lines
}

/**
 * The same requests on a memory store and on a Redis store (deny cache on), each
 * on its own manual clock; `steps` gets a token signer for the app.
 */
async function bothStores (options: Parameters<typeof buildAppOn>[1], routes: (app: FastifyInstance) => void, steps: (sign: (claims: object) => string) => Array<Step | Step[]>, redis: (clock: Clock) => Store): Promise<{ memory: string[], redis: string[] }> {
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

/**
 * A replica of an app whose edge has a penalty (403 for 10 minutes after 4 refusals), on
 * its own store and client on `server`, on the test clock; `/` answers "status
 * retry-after". `writes` gets the store's refunds (a penalty's start), to await.
 */
async function penaltyReplica (t: Test, server: RedisServer, clock: Clock, writes: Array<Promise<number>>): Promise<() => Promise<string>> {
  const store = redisStore({ client: server.client(t), clock: clock.now, heartbeatIntervalMs: 0 })
  const refund = store.refund.bind(store)
  store.refund = (bucket: BucketRequest): Promise<number> => {
    const write = refund(bucket)
    writes.push(write)
    return write
  }
  const app = Fastify()
  // 2 requests, then 1 every 20 minutes.
  await app.register(tollgate, { store, edge: { capacity: 2, refillPerSecond: 1 / 1200, penalty: { after: 4, withinSeconds: 60, seconds: 600, status: 403 } } })
  app.get('/', async () => 'ok')
  await app.ready()
  t.teardown(() => app.close())
  return async () => {
    const response = await app.inject('/')
    return `${response.statusCode} ${response.headers['retry-after'] ?? '-'}`
  }
}

if (requireRedis(t)) {
  t.test('a penalty started on one replica is answered by another within ZERO_COST_HOLD_MS, though its deny cache held a refusal from before', async (t) => {
    const server = await startRedis(t)
    const clock = manualClock(1_000_000)
    const writes: Array<Promise<number>> = []
    const [a, b] = [await penaltyReplica(t, server, clock, writes), await penaltyReplica(t, server, clock, writes)]
    t.same([await a(), await a(), await b()], ['200 -', '200 -', '429 1200'], 'b refuses the client once, and keeps that refusal')
    t.same([await a(), await a(), await a(), await a()], ['429 1200', '429 1200', '429 1200', '403 1200'], 'a\'s fourth refusal starts the penalty')
    t.equal(writes.length, 1, 'one penalty write')
    await Promise.all(writes) // the penalty's write, not awaited by the refusal
    t.equal(ZERO_COST_HOLD_MS, 100, 'the README\'s 0.1 s')
    t.equal(await b(), '429 1200', 'at once, b still answers from the refusal it kept, without Redis (its second strike)')
    clock.advance(ZERO_COST_HOLD_MS)
    t.equal(await b(), '403 1200', '0.1 s later b asks Redis: the penalty')
    const inspector = server.client(t)
    const before = await commandCalls(inspector)
    const flood: string[] = []
    for (let i = 0; i < 30; i++) flood.push(await b())
    const after = await commandCalls(inspector)
    t.same(new Set(flood), new Set(['403 1200']), 'and so on during the penalty')
    t.equal((after.evalsha ?? 0) - (before.evalsha ?? 0) + (after.eval ?? 0) - (before.eval ?? 0), 0, 'from its deny cache: no script call')

    // The penalty ends (its bucket holds 0 again, the client's quota is still short); a starts another at once.
    clock.advance(600_000 - ZERO_COST_HOLD_MS)
    t.equal(await b(), '429 600', 'at its end, b answers the quota from its cache (as Redis would)')
    t.same([await a(), await a(), await a(), await a()], ['429 600', '429 600', '429 600', '403 600'], 'a starts a second penalty')
    t.equal(writes.length, 2, 'a second penalty write')
    await Promise.all(writes)
    t.equal(await b(), '429 600', 'b, within 0.1 s of the first one\'s end, still answers from its cache')
    clock.advance(ZERO_COST_HOLD_MS)
    t.equal(await b(), '403 600', '0.1 s past the first one\'s end b asks Redis: the second penalty')
  })

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

  t.test('a refusal is not answered from the cache while a request on its bucket is on its way to Redis: its wait counts it (review repro 10)', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const { memory, redis } = await bothStores(
      { app: { tiers: { default: { capacity: 10, refillPerSecond: 1 } } } },
      (app) => {
        for (const cost of [1, 5, 7]) app.get(`/${cost}`, { config: { rateLimit: { cost } } }, async () => 'ok')
      },
      () => [
        { url: '/7' }, // 3 tokens left
        { url: '/5' }, // refused: 2 missing; the cache keeps 3 tokens
        [{ url: '/1' }, { url: '/5' }], // at once: 1 goes to Redis (2 left), then 5: 3 missing
        { afterMs: 2000, url: '/5' }, // 4 tokens: still 1 short
        { afterMs: 1000, url: '/5' }
      ],
      (clock) => redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0 }))
    t.same(memory, ['200 -', '429 2', '200 -', '429 3', '429 1', '200 -'], 'the memory store')
    t.same(redis, memory, 'the Redis store answers alike: no Retry-After from a state the request on its way changes')
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

  t.test('a refusal and an admission of one bucket on their way at once: the next wait counts the admission', async (t) => {
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

  t.test('a refusal that comes back while a later request on its bucket is still on its way is not kept', async (t) => {
    const server = await startRedis(t)
    const real = server.client(t)
    // The real client, but script calls past the first `passing` wait for `release()`: on their way as long as the test says.
    let passing = 2
    let release = (): void => {}
    const held = new Promise<void>((resolve) => { release = resolve })
    const client = {
      defineCommand (name: string, definition: { lua: string, numberOfKeys?: number }): void {
        real.defineCommand(name, definition)
        const command = (real as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>)[name] as (...args: unknown[]) => Promise<unknown>
        ;(client as Record<string, unknown>)[name] = async (...args: unknown[]) => {
          if (passing-- <= 0) await held
          return command.apply(real, args)
        }
      }
    }
    const clock = manualClock()
    const store = redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: 5000, maxBatch: 1 })
    t.teardown(() => store.close())
    const policy: BucketPolicy = { capacity: 10, refillPerSecond: 1 }
    const request = (cost: number) => [{ key: '{q}:app', policy, cost }]
    t.equal((await store.consume(request(8))).allowed, true, '2 tokens left')
    // Two calls at once: the first is refused and comes back; the second (cost 1) is held on its way.
    const [refused, admitted] = [store.consume(request(5)), store.consume(request(1))]
    t.match(await refused, { allowed: false, retryAfterMs: 3000 }, 'refused by Redis')
    const meanwhile = store.consume(request(5))
    t.ok(meanwhile instanceof Promise, 'while the request of cost 1 is on its way, Redis decides, not the cache')
    release()
    t.match(await admitted, { allowed: true, tokens: [1] })
    t.match(await meanwhile, { allowed: false, retryAfterMs: 4000, tokens: [1] }, '1 token left: 4 s, not the 3 s of the refusal')
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

t.test('the cache on its own: a bucket asked for nothing is kept ZERO_COST_HOLD_MS past the moment it may be out of debt', async (t) => {
  const quota = { capacity: 10, refillPerSecond: 0.1 }
  const penalty = { capacity: 1, refillPerSecond: 1 }
  const step: BucketRequest[] = [{ key: 'q', policy: quota, cost: 5 }, { key: 'p', policy: penalty, cost: 0 }]
  const cache = new DenyCache(10)
  // Read out of debt (absent: full) by a call sent at 1000 (the script's 5000): kept until 1100, not the key's 61 000.
  cache.remember(step, { atMs: 5000, buckets: [{ tokens: 0, lastMs: 5000, ttlMs: 60_000 }, undefined] }, 1000, 1000)
  t.match(cache.lookup(step, 1000), { allowed: false, retryAfterMs: 50_000, tokens: [0, 1] }, 'the quota\'s refusal')
  t.match(cache.lookup(step, 1099), { allowed: false }, 'until 1100')
  t.equal(cache.lookup(step, 1100), undefined, 'then Redis decides')
  t.equal(cache.size, 1, 'the quota\'s state stays, the penalty\'s is dropped')
  // Read 30 tokens in debt, its last step at 1000 as early as can be: out of debt at 31 000 at the earliest, kept until 31 100.
  cache.remember(step, { atMs: 5000, buckets: [{ tokens: 0, lastMs: 5000, ttlMs: 60_000 }, { tokens: -30, lastMs: 5000, ttlMs: 31_000 }] }, 1000, 2000)
  t.match(cache.lookup(step, 30_000), { allowed: false, retryAfterMs: 22_000, tokens: [Number, -2] }, 'in debt: the later of both waits, as late as the reply came')
  t.match(cache.lookup(step, 31_099), { allowed: false }, 'maybe out of debt: the quota is still short, for 0.1 s more')
  t.equal(cache.lookup(step, 31_100), undefined, 'then Redis decides (a penalty started meanwhile elsewhere)')
  // A bucket asked for something is kept while its key lives.
  const slow: BucketRequest[] = [{ key: 'r', policy: { capacity: 10, refillPerSecond: 0.01 }, cost: 5 }]
  cache.remember(slow, { atMs: 0, buckets: [{ tokens: 0, lastMs: 0, ttlMs: 60_000 }] }, 0, 0)
  t.match(cache.lookup(slow, 59_999), { allowed: false }, 'a quota\'s refusal, until its key may have expired')
  t.equal(cache.lookup(slow, 60_000), undefined)
})

t.test('the cache on its own: no refusal is kept for a key in flight until its call settles, answered or failed', async (t) => {
  const policy = { capacity: 10, refillPerSecond: 1 }
  const refusal = { atMs: 0, buckets: [{ tokens: 2, lastMs: 0, ttlMs: 60_000 }] }
  const request = (key: string) => [{ key, policy, cost: 5 }]
  const cache = new DenyCache(10)
  cache.remember(request('a'), refusal, 0, 0)
  cache.sending(request('a'))
  t.equal(cache.lookup(request('a'), 0), undefined, 'a request sent to Redis forgets its key at once')
  cache.sending(request('a'))
  let answer = (): void => {}
  let fail = (_error: Error): void => {}
  const answered = new Promise<void>((resolve) => { answer = resolve })
  const failed = new Promise<void>((_resolve, reject) => { fail = reject })
  cache.settle([{ buckets: request('a') }], answered)
  cache.settle([{ buckets: request('a') }], failed)
  cache.remember(request('a'), refusal, 0, 0)
  t.equal(cache.size, 0, 'two requests in flight: nothing kept')
  answer()
  await answered
  cache.remember(request('a'), refusal, 0, 0)
  t.equal(cache.size, 0, 'one still in flight: nothing kept')
  fail(new Error('connection lost'))
  await failed.catch(() => {})
  cache.remember(request('a'), refusal, 0, 0)
  t.match(cache.lookup(request('a'), 0), { allowed: false, retryAfterMs: 3000 }, 'none in flight: kept')
})

t.test('the cache on its own: the keys no request is on any more are dropped once they outnumber those in flight', async (t) => {
  const policy = { capacity: 10, refillPerSecond: 1 }
  const refusal = { atMs: 0, buckets: [{ tokens: 2, lastMs: 0, ttlMs: 60_000 }] }
  const request = (key: string) => [{ key, policy, cost: 5 }]
  const cache = new DenyCache(10)
  const counted = (cache as unknown as { inFlight: Map<string, number> }).inFlight
  cache.sending(request('held'))
  cache.sending(request('back'))
  cache.landed([{ buckets: request('back') }])
  cache.sending(request('back')) // in flight again after it had landed
  let most = 0
  for (let i = 0; i < 5000; i++) {
    cache.sending(request(`k${i}`))
    cache.landed([{ buckets: request(`k${i}`) }])
    most = Math.max(most, counted.size)
  }
  t.ok(most <= 1027 && counted.size < 1027, `5 000 keys sent and answered: at most ${most} counted at once`)
  for (const key of ['held', 'back']) {
    cache.remember(request(key), refusal, 0, 0)
    t.equal(cache.lookup(request(key), 0), undefined, `${key}: still in flight, no refusal kept`)
    cache.landed([{ buckets: request(key) }])
    cache.remember(request(key), refusal, 0, 0)
    t.match(cache.lookup(request(key), 0), { allowed: false }, `${key}: landed, its refusal kept`)
  }
})

t.test('refusal details are read strictly from the script reply', async (t) => {
  t.same(readRefusal(new ReplyReader('1000 2 500 60000 -'), 2), { atMs: 1000, buckets: [{ tokens: 2, lastMs: 500, ttlMs: 60_000 }, undefined] })
  t.same(readRefusal(new ReplyReader('1000 0 0 inf'), 1).buckets, [{ tokens: 0, lastMs: 0, ttlMs: Infinity }], 'a key without TTL')
  t.throws(() => readRefusal(new ReplyReader('1000 nan 0 0'), 1), /unexpected reply from the Redis script/)
  t.throws(() => readRefusal(new ReplyReader('1000 0 0'), 1), /unexpected reply from the Redis script/, 'a state cut short')
})
