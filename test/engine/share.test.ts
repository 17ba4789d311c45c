/**
 * A cost above one replica's share of a quota (memoryStore({ replicas }), the Redis
 * store's local fallback): it passes on a full share and overdraws it, so N replicas
 * together still spend one quota in the long run, plus at most one request's excess each.
 */
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import tollgate, { memoryStore, redisStore, type Store } from '../../lib/index.js'
import { manualClock } from '../helpers.js'
import { freePort } from '../redis-server.js'

const TIER = { capacity: 20, refillPerSecond: 5 }
const COST = 20
const SECONDS = 60

/** An app whose POST /export costs the whole tier (20 tokens), on `store`. */
async function exportApp (store: Store): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(tollgate, { store, app: { tiers: { default: TIER }, identify: () => ({ id: 'u1' }) } })
  app.post('/export', { config: { rateLimit: { cost: COST } } }, async () => 'queued')
  await app.ready()
  return app
}

/** Sends POST /export to every app every 250 ms for 60 s; returns the cost admitted by each app. */
async function admittedOver60s (apps: FastifyInstance[], clock: ReturnType<typeof manualClock>): Promise<number[]> {
  const admitted = apps.map(() => 0)
  for (let ms = 0; ms <= SECONDS * 1000; ms += 250) {
    clock.set(ms)
    for (const [i, app] of apps.entries()) {
      if ((await app.inject({ method: 'POST', url: '/export' })).statusCode === 200) admitted[i] = (admitted[i] as number) + COST
    }
  }
  return admitted
}

/** A request's excess over one of three shares: 20 − 6.67. */
const excess = COST - TIER.capacity / 3

t.test('memoryStore({ replicas: 3 }): three replicas admit one quota of cost-20 requests, plus one excess each', async (t) => {
  // Headers on a share of 4 replicas (a quarter is exact in binary: a third is an ulp short, and seconds round up).
  const quarter = await exportApp(memoryStore({ replicas: 4, clock: manualClock().now }))
  const first = await quarter.inject({ method: 'POST', url: '/export' })
  t.equal(first.statusCode, 200, 'a cost of 20 passes on a share of 5')
  t.equal(first.headers['ratelimit'], '"app";r=0;t=16', 'r clamps at 0; t counts the debt of 15 at 1.25/s')
  const again = await quarter.inject({ method: 'POST', url: '/export' })
  t.equal(again.statusCode, 429)
  t.equal(again.headers['retry-after'], '16', 'Retry-After waits out the debt')
  await quarter.close()

  const run = manualClock()
  const replicas: FastifyInstance[] = []
  for (let i = 0; i < 3; i++) replicas.push(await exportApp(memoryStore({ replicas: 3, clock: run.now })))
  const admitted = await admittedOver60s(replicas, run)
  const total = admitted.reduce((sum, cost) => sum + cost, 0)
  const oneQuota = TIER.capacity + TIER.refillPerSecond * SECONDS
  t.ok(total <= oneQuota + 3 * excess + 1e-9, `${total} tokens admitted in ${SECONDS} s; one quota is ${oneQuota}, plus 3 × ${excess.toFixed(2)} (960 before: a whole quota per replica)`)
  t.ok(admitted.every((cost) => cost >= 5 * COST), `heavy requests stay possible on every replica: ${admitted.join(', ')}`)
  for (const app of replicas) await app.close()
})

t.test("redisStore failMode 'local': a cost above the local share overdraws it instead of taking it whole", async (t) => {
  const port = await freePort() // nothing listens there: every call fails, and the store decides locally
  const client = new Redis({ port, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 1000 })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  const clock = manualClock()
  // Four live replicas assumed (no heartbeat), no headroom: a local share of 5 tokens and 1.25/s.
  const store = redisStore({ client, clock: clock.now, replicas: 4, fallbackHeadroom: 0, heartbeatIntervalMs: 0, connectWaitMs: 0 })
  const app = await exportApp(store)
  t.teardown(() => app.close())
  const first = await app.inject({ method: 'POST', url: '/export' })
  t.equal(first.statusCode, 200, 'a cost of 20 passes on a local share of 5')
  t.equal(first.headers['ratelimit-policy'], '"app";q=5;w=4', 'the local share')
  t.equal(first.headers['ratelimit'], '"app";r=0;t=16', 't counts the debt of 15 at 1.25/s')
  const again = await app.inject({ method: 'POST', url: '/export' })
  t.equal(again.headers['retry-after'], '16')
  const admitted = COST + ((await admittedOver60s([app], clock))[0] as number) // the first one, and those of the run from 0 s
  const bound = 5 + 1.25 * SECONDS + (COST - 5)
  t.ok(admitted <= bound, `${admitted} tokens admitted in ${SECONDS} s by one replica; its share and one excess are ${bound} (320 before: the whole quota)`)
  t.ok(admitted >= 4 * COST, 'heavy requests stay possible')
  const overQuota = await app.tollgate.consume('k', { capacity: 20, refillPerSecond: 5 }, 21)
  t.match(overQuota, { allowed: false, retryAfterMs: Infinity }, 'a cost above the whole quota never passes locally either')
})

t.test('a cost above an identity\'s own quota never passes, share or not (it would leave a debt of millions)', async (t) => {
  for (const replicas of [1, 3]) {
    const store = memoryStore({ replicas, clock: manualClock().now })
    const app = Fastify()
    await app.register(tollgate, {
      store,
      app: {
        tiers: { default: { capacity: 1e6, refillPerSecond: 1e4 } },
        maxQuota: { capacity: 100, refillPerSecond: 10 },
        identify: (request) => ({ id: 'u1', quota: { capacity: 30, refillPerSecond: 1 }, n: request.headers['x-n'] }) as never
      }
    })
    app.post('/export', { config: { rateLimit: { cost: (request) => Number(request.headers['x-n']) } } }, async () => 'queued')
    await app.ready()
    const huge = await app.inject({ method: 'POST', url: '/export', headers: { 'x-n': '1000000' } })
    t.equal(huge.statusCode, 429, `replicas: ${replicas}: a cost of 1e6 on a quota of 30 is refused`)
    const small = await app.inject({ method: 'POST', url: '/export', headers: { 'x-n': '1' } })
    t.equal(small.statusCode, 200, `replicas: ${replicas}: the bucket is untouched: a cost of 1 passes`)
    await app.close()
  }
})
