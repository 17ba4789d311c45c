/**
 * Golden keys: every key the plugin writes, byte for byte as today. A fixed set
 * of configurations gets a fixed set of requests; the keys that land in a private
 * Redis (prefix included), and the keys passed to a recording memory store, are
 * compared, sorted, to hard-coded lists. A change to any key format (a restructure
 * that was meant to change nothing) fails here and names the key.
 *
 * Imports only the public entry, so the test survives lib/ being moved around.
 * The Redis store runs on Redis's own clock (a test clock makes its script keep
 * full buckets, which a real deployment never writes), with refills slow enough
 * that every bucket written is still there, far from full, when the keys are read;
 * the memory store's clock stands still.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance, type FastifyRequest, type FastifyServerOptions, type InjectOptions } from 'fastify'
import tollgate, {
  MemoryStore, per, redisStore,
  type BucketRequest, type BucketReading, type BucketDecision, type Identity, type Quota, type Store, type TollgateOptions
} from '../../lib/index.js'
import { manualClock } from '../helpers.js'
import { requireRedis, startRedis } from '../redis-server.js'

const SLOW = 0.001 // tokens per second: a token taken is back in 1000 s
const policy = (capacity: number): { capacity: number, refillPerSecond: number } => ({ capacity, refillPerSecond: SLOW })

/** The app layer's identity from headers: x-user, x-tier, x-quota (JSON). */
function identify (request: FastifyRequest): Identity | undefined {
  const id = request.headers['x-user']
  if (typeof id !== 'string') return undefined
  const tier = request.headers['x-tier']
  const quota = request.headers['x-quota']
  const identity: Identity = { id, tier: typeof tier === 'string' ? tier : undefined }
  if (typeof quota === 'string') identity.quota = JSON.parse(quota) as Quota
  return identity
}

const apiKey = (request: FastifyRequest): unknown => request.headers['x-api-key']

/** A memory store that records every key passed to it (consume, peek, refund, reset). */
class RecordingStore extends MemoryStore {
  constructor (private readonly seen: Set<string>, clock: () => number) {
    super({ clock })
  }

  override consume (buckets: readonly BucketRequest[]): BucketDecision {
    for (const bucket of buckets) this.seen.add(bucket.key)
    return super.consume(buckets)
  }

  override peek (bucket: BucketRequest): BucketReading {
    this.seen.add(bucket.key)
    return super.peek(bucket)
  }

  override refund (bucket: BucketRequest): number {
    this.seen.add(bucket.key)
    return super.refund(bucket)
  }

  override reset (key: string): void {
    this.seen.add(key)
    super.reset(key)
  }
}

/** A new store for one app; `heartbeat`: the one Redis store that announces its replica. */
type MakeStore = (heartbeat: boolean) => Store

/**
 * Builds every configuration on stores from `makeStore`, sends the fixed requests,
 * and checks the statuses that show each bucket was reached (a penalty started).
 * The apps stay open (closed when `t` ends): a closing store changes what it holds.
 */
async function drive (t: Test, makeStore: MakeStore): Promise<void> {
  const apps: FastifyInstance[] = []
  t.teardown(async () => { for (const app of apps.reverse()) await app.close() })
  async function build (options: Omit<TollgateOptions, 'store'>, routes: (app: FastifyInstance) => void, heartbeat = false, server: FastifyServerOptions = { trustProxy: true }): Promise<FastifyInstance> {
    const app = Fastify(server)
    apps.push(app)
    await app.register(tollgate, { ...options, store: makeStore(heartbeat), warnings: false })
    routes(app)
    await app.ready()
    return app
  }
  const ok = async (): Promise<string> => 'ok'
  const send = async (app: FastifyInstance, url: string, from: string, headers: Record<string, string> = {}, method: InjectOptions['method'] = 'GET'): Promise<number> =>
    (await app.inject({ method, url, headers: { 'x-forwarded-for': from, ...headers } })).statusCode
  const sendTimes = async (times: number, ...args: Parameters<typeof send>): Promise<number[]> => {
    const codes: number[] = []
    for (let i = 0; i < times; i++) codes.push(await send(...args))
    return codes
  }

  // 1. Edge per IP (IPv4, IPv6 by /64, IPv4-mapped), a route's own edge bucket, a 404; addresses from the socket.
  const edgeIp = await build({ edge: policy(10) }, (app) => {
    app.get('/', ok)
    app.post('/login', { config: { rateLimit: { edge: policy(5) } } }, ok)
    app.get('/free', { config: { rateLimit: false } }, ok)
  }, true, {})
  const fromSocket = async (url: string, remoteAddress: string, method: InjectOptions['method'] = 'GET'): Promise<number> =>
    (await edgeIp.inject({ method, url, remoteAddress })).statusCode
  t.same([
    await fromSocket('/', '203.0.113.7'),
    await fromSocket('/', '2001:db8:aaaa:bbbb::1'),
    await fromSocket('/', '2001:db8:aaaa:bbbb:ffff::2'),
    await fromSocket('/', '::ffff:198.51.100.4'),
    await fromSocket('/login', '203.0.113.7', 'POST'),
    await fromSocket('/free', '192.0.2.99'),
    await fromSocket('/nowhere', '192.0.2.98')
  ], [200, 200, 200, 200, 200, 200, 404], 'edge per IP')

  // 2. Edge keyed by an API key (SHA-256), with the IP when there is none; 3. with keySecret (HMAC).
  const edgeKey = await build({ edge: { ...policy(10), key: apiKey } }, (app) => {
    app.get('/', ok)
    app.post('/login', { config: { rateLimit: { edge: policy(5) } } }, ok)
  })
  t.same([
    await send(edgeKey, '/', '192.0.2.10', { 'x-api-key': 'alpha-key-1' }),
    await send(edgeKey, '/login', '192.0.2.10', { 'x-api-key': 'alpha-key-1' }, 'POST'),
    await send(edgeKey, '/', '192.0.2.11')
  ], [200, 200, 200], 'edge.key')
  const edgeSecret = await build({ edge: { ...policy(10), key: apiKey, keySecret: 'golden-secret-0123456789' } }, (app) => { app.get('/', ok) })
  t.same(await send(edgeSecret, '/', '192.0.2.12', { 'x-api-key': 'alpha-key-1' }), 200, 'edge.key with keySecret')

  // 4. App layer: a tier of one policy, a tier of named limits, anonymous; route cost, quotas, constraints.
  const tiers = { default: policy(20), pro: [{ name: 'hour', ...per(60, 'hour') }, { name: 'day', ...per(1000, 'day') }], anonymous: policy(10) }
  const appLayer = await build({ app: { tiers, identify } }, (app) => {
    app.get('/items', ok)
    app.post('/export', { config: { rateLimit: { cost: 3, quota: { default: policy(5) } } } }, ok)
    app.post('/report', { config: { rateLimit: { quota: { default: [{ name: 'minute', ...policy(3) }, { name: 'month', ...policy(30) }], pro: policy(2) } } } }, ok)
    app.get('/things/:id/', { config: { rateLimit: { quota: { default: policy(4) } } } }, ok)
    app.get('/v2', { constraints: { version: '2.0.0' }, config: { rateLimit: { quota: { default: policy(4) } } } }, ok)
  })
  const user42 = { 'x-user': '42' }
  const user7 = { 'x-user': '7', 'x-tier': 'pro' }
  t.same([
    await send(appLayer, '/items', '192.0.2.20', user42),
    await send(appLayer, '/items', '192.0.2.20', { 'x-user': '42', 'x-tier': 'gold' }),
    await send(appLayer, '/items', '192.0.2.20', user7),
    await send(appLayer, '/items', '192.0.2.20', { 'x-user': 'alice smith' }),
    await send(appLayer, '/export', '192.0.2.20', user42, 'POST'),
    await send(appLayer, '/report', '192.0.2.20', user42, 'POST'),
    await send(appLayer, '/report', '192.0.2.20', user7, 'POST'),
    await send(appLayer, '/things/1/', '192.0.2.20', user42),
    await send(appLayer, '/v2', '192.0.2.20', { ...user42, 'accept-version': '2.0.0' }),
    await send(appLayer, '/items', '192.0.2.21'),
    await send(appLayer, '/export', '192.0.2.21', {}, 'POST'),
    await send(appLayer, '/items', '2001:db8:1:2::3')
  ], [200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200], 'app layer')

  // 5. Identity quotas (identify returning `quota`, within app.maxQuota).
  const quotas = await build({ app: { tiers: { default: policy(20) }, identify, maxQuota: { capacity: 1000, refillPerSecond: 100 } } }, (app) => {
    app.get('/', ok)
    app.post('/export', { config: { rateLimit: { quota: { default: policy(5) } } } }, ok)
  })
  const list = [{ name: 'minute', capacity: 30, refillPerSecond: 0.02 }, { name: 'day', capacity: 500, refillPerSecond: 0.01 }]
  t.same([
    await send(quotas, '/', '192.0.2.30', { 'x-user': '9', 'x-quota': JSON.stringify({ capacity: 50, refillPerSecond: 0.05 }) }),
    await send(quotas, '/export', '192.0.2.30', { 'x-user': '9', 'x-quota': JSON.stringify({ capacity: 50, refillPerSecond: 0.05 }) }, 'POST'),
    await send(quotas, '/', '192.0.2.30', { 'x-user': '10', 'x-quota': JSON.stringify(list) }),
    await send(quotas, '/', '192.0.2.30', { 'x-user': '11', 'x-quota': JSON.stringify({ capacity: 5000, refillPerSecond: 1 }) })
  ], [200, 200, 200, 200], 'identity quotas')

  // 6. Penalties: edge.penalty, app.penalty, a route's own at the edge and at the app layer.
  const penalties = await build({
    edge: { ...policy(3), penalty: { after: 2, withinSeconds: 60, seconds: 300 } },
    app: { tiers: { default: policy(1) }, identify, penalty: { after: 2, withinSeconds: 60, seconds: 600 } }
  }, (app) => {
    app.get('/', ok)
    app.get('/open', { config: { rateLimit: { app: false } } }, ok)
    app.post('/login', { config: { rateLimit: { edge: policy(1), app: false, penalty: { after: 2, withinSeconds: 60, seconds: 900 } } } }, ok)
    app.post('/pay', { config: { rateLimit: { penalty: { after: 2, withinSeconds: 60, seconds: 120, status: 403 } } } }, ok)
  })
  t.same(await sendTimes(5, penalties, '/open', '192.0.2.41'), [200, 200, 200, 429, 429], 'edge penalty')
  t.same(await sendTimes(3, penalties, '/login', '192.0.2.42', {}, 'POST'), [200, 429, 429], "a route's edge penalty")
  t.same(await sendTimes(3, penalties, '/', '192.0.2.43', { 'x-user': 'p1' }), [200, 429, 429], 'app penalty')
  t.same(await sendTimes(3, penalties, '/pay', '192.0.2.44', { 'x-user': 'p2' }, 'POST'), [200, 429, 403], "a route's app penalty")
  // A penalty is written without being waited for: a store call after it lands after it.
  await penalties.tollgate.peek('flush', policy(1))
  t.equal(await send(penalties, '/open', '192.0.2.41'), 429, 'the edge penalty holds')

  // 7. Manual calls: keys of one's own, and layers' buckets.
  const manual = await build({ edge: policy(10), app: { tiers, identify } }, (app) => {
    app.post('/export', { config: { rateLimit: { quota: { default: policy(5) } } } }, ok)
  })
  const decisions = [
    await manual.tollgate.consume('login:alice', policy(5)),
    await manual.tollgate.consume('weird key {x}', policy(5)),
    await manual.tollgate.consume({ layer: 'edge', ip: '192.0.2.50' }),
    await manual.tollgate.consume({ layer: 'edge', ip: '2001:db8:5:6::7' }),
    await manual.tollgate.consume({ layer: 'edge', key: 'beta-key-2' }),
    await manual.tollgate.consume({ layer: 'app', user: 'bob', tier: 'pro' }),
    await manual.tollgate.consume({ layer: 'app', user: 'carol' }),
    await manual.tollgate.consume({ layer: 'app', ip: '192.0.2.51' }),
    await manual.tollgate.consume({ layer: 'app', user: 'bob', route: 'POST /export' })
  ]
  t.same(decisions.map((d) => d.allowed), decisions.map(() => true), 'manual consumes')
  await manual.tollgate.peek('peeked', policy(5))
  await manual.tollgate.refund('refunded', policy(5))
  await manual.tollgate.reset('resetted')

  // 9. Limiters: by the client address (IPv6 by /64), by a key function's value (a string, a number: SHA-256,
  // or HMAC with edge.keySecret), a limiter's penalty; on routes the edge leaves alone.
  const limiterCodes: number[] = []
  const limiterApps: FastifyInstance[] = []
  for (const keySecret of [undefined, 'golden-secret-0123456789']) {
    const limiters = await build({ edge: { ...policy(10), keySecret } }, (app) => {
      const byAddress = app.tollgate.limiter({ name: 'otp', ...policy(1), penalty: { after: 1, withinSeconds: 60, seconds: 300 } })
      const byUser = app.tollgate.limiter({ name: 'per-user', ...policy(5), key: async (request) => request.headers['x-user'] === '7' ? 7 : request.headers['x-user'] as string | undefined })
      app.post('/otp', { onRequest: byAddress, config: { rateLimit: false } }, ok)
      app.get('/report', { preHandler: byUser, config: { rateLimit: false } }, ok)
    }, false, {})
    limiterApps.push(limiters)
    const from = async (url: string, remoteAddress: string, headers: Record<string, string> = {}, method: InjectOptions['method'] = 'GET'): Promise<number> =>
      (await limiters.inject({ method, url, remoteAddress, headers })).statusCode
    if (keySecret === undefined) {
      limiterCodes.push(await from('/otp', '192.0.2.70', {}, 'POST'), await from('/otp', '192.0.2.70', {}, 'POST'), await from('/otp', '2001:db8:7:8::9', {}, 'POST'))
    }
    limiterCodes.push(await from('/report', '192.0.2.71', { 'x-user': 'dora' }), await from('/report', '192.0.2.71', { 'x-user': '7' }), await from('/report', '192.0.2.72'))
  }
  t.same(limiterCodes, [200, 429, 200, 200, 200, 200, 200, 200, 200], 'limiters')
  // The penalty is written without being waited for: a store call after it lands after it.
  await limiterApps[0]?.tollgate.peek('flush', policy(1))

  // 8. edge.mode 'settle': the edge spends locally, and writes at the settlement.
  const settle = await build({ edge: { ...policy(10), mode: 'settle' } }, (app) => { app.get('/', ok) })
  t.same(await sendTimes(2, settle, '/', '192.0.2.60'), [200, 200], 'settle')
  await settle.tollgate.settle()
}

/** Every key written to the private Redis, as today. */
const REDIS_KEYS = [
  'tollgate:{ip:192.0.2.11}:edge',
  'tollgate:{ip:192.0.2.21}:app',
  'tollgate:{ip:192.0.2.21}:route:POST /export',
  'tollgate:{ip:192.0.2.41}:edge',
  'tollgate:{ip:192.0.2.41}:edge~penalty',
  'tollgate:{ip:192.0.2.42}:edge',
  'tollgate:{ip:192.0.2.42}:edge-route:POST /login',
  'tollgate:{ip:192.0.2.42}:edge~penalty:route:POST /login',
  'tollgate:{ip:192.0.2.43}:edge',
  'tollgate:{ip:192.0.2.44}:edge',
  'tollgate:{ip:192.0.2.50}:edge',
  'tollgate:{ip:192.0.2.51}:app',
  'tollgate:{ip:192.0.2.60}:edge',
  'tollgate:{ip:192.0.2.70}:limiter:otp',
  'tollgate:{ip:192.0.2.70}:limiter:otp~penalty',
  'tollgate:{ip:192.0.2.72}:limiter:per-user',
  'tollgate:{ip:192.0.2.98}:edge',
  'tollgate:{ip:198.51.100.4}:edge',
  'tollgate:{ip:2001:db8:1:2::/64}:app',
  'tollgate:{ip:2001:db8:5:6::/64}:edge',
  'tollgate:{ip:2001:db8:7:8::/64}:limiter:otp',
  'tollgate:{ip:2001:db8:aaaa:bbbb::/64}:edge',
  'tollgate:{ip:203.0.113.7}:edge',
  'tollgate:{ip:203.0.113.7}:edge-route:POST /login',
  'tollgate:{key:3hiCuPuhtyl4nPyXIy4iRHwPvUjZ8fflFH277q0X7C4}:edge',
  'tollgate:{key:KHUMhDACw_zjxEA4pR8PbuDhJ6kDC-jVoyK-C91otWE}:edge',
  'tollgate:{key:Q7VeTovttWsrJ7c64M28n_ck3VWxrwvX5n1-XJGcPSk}:edge',
  'tollgate:{key:Q7VeTovttWsrJ7c64M28n_ck3VWxrwvX5n1-XJGcPSk}:edge-route:POST /login',
  'tollgate:{lim:N0-6PDdy_UryOkGPuOzhEyYn3jpD3eo7R_iRywKdNp8}:limiter:per-user',
  'tollgate:{lim:adsxl26tN7hcxCpJyV_QbuyZz9m3_yGaJcD1nLQEk0M}:limiter:per-user',
  'tollgate:{lim:b2SxC1k7BijmiExJ9ot-QKjcj5OIr2UiZ3n9xVH9Sds}:limiter:per-user',
  'tollgate:{lim:eQJpm-Qsio5G-7tFAXJlF-hrIsVqGJ92JabaSQgbJFE}:limiter:per-user',
  'tollgate:{manual:login:alice}:manual',
  'tollgate:{manual:~wByb46beou4T1nq0Z1R8iq69SxBBy1gv9-1YsOVKXgQ}:manual',
  'tollgate:{replicas}',
  'tollgate:{user:10}:app:day~q500r0.01',
  'tollgate:{user:10}:app:minute~q30r0.02',
  'tollgate:{user:11}:app',
  'tollgate:{user:42}:app',
  'tollgate:{user:42}:route:GET /things/:id',
  'tollgate:{user:42}:route:GET /v2 [version=2.0.0]',
  'tollgate:{user:42}:route:POST /export',
  'tollgate:{user:42}:route:POST /report#minute',
  'tollgate:{user:42}:route:POST /report#month',
  'tollgate:{user:7}:app:day',
  'tollgate:{user:7}:app:hour',
  'tollgate:{user:7}:route:POST /report',
  'tollgate:{user:9}:app~q50r0.05',
  'tollgate:{user:9}:route:POST /export',
  'tollgate:{user:bob}:app:day',
  'tollgate:{user:bob}:app:hour',
  'tollgate:{user:bob}:route:POST /export',
  'tollgate:{user:carol}:app',
  'tollgate:{user:p1}:app',
  'tollgate:{user:p1}:app~penalty',
  'tollgate:{user:p2}:app',
  'tollgate:{user:p2}:app~penalty:route:POST /pay',
  'tollgate:{user:~A4vRWh7PD3uF2xC-2haV7agR7SsenN25SWJEazp7CMU}:app'
]

/** Every key passed to the memory store, as today (also what is only read, refunded or reset). */
const MEMORY_KEYS = [
  '{ip:192.0.2.11}:edge',
  '{ip:192.0.2.21}:app',
  '{ip:192.0.2.21}:route:POST /export',
  '{ip:192.0.2.41}:edge',
  '{ip:192.0.2.41}:edge~penalty',
  '{ip:192.0.2.42}:edge',
  '{ip:192.0.2.42}:edge-route:POST /login',
  '{ip:192.0.2.42}:edge~penalty',
  '{ip:192.0.2.42}:edge~penalty:route:POST /login',
  '{ip:192.0.2.43}:edge',
  '{ip:192.0.2.43}:edge~penalty',
  '{ip:192.0.2.44}:edge',
  '{ip:192.0.2.44}:edge~penalty',
  '{ip:192.0.2.44}:edge~penalty:route:POST /pay',
  '{ip:192.0.2.50}:edge',
  '{ip:192.0.2.51}:app',
  '{ip:192.0.2.60}:edge',
  '{ip:192.0.2.70}:limiter:otp',
  '{ip:192.0.2.70}:limiter:otp~penalty',
  '{ip:192.0.2.72}:limiter:per-user',
  '{ip:192.0.2.98}:edge',
  '{ip:198.51.100.4}:edge',
  '{ip:2001:db8:1:2::/64}:app',
  '{ip:2001:db8:5:6::/64}:edge',
  '{ip:2001:db8:7:8::/64}:limiter:otp',
  '{ip:2001:db8:7:8::/64}:limiter:otp~penalty',
  '{ip:2001:db8:aaaa:bbbb::/64}:edge',
  '{ip:203.0.113.7}:edge',
  '{ip:203.0.113.7}:edge-route:POST /login',
  '{key:3hiCuPuhtyl4nPyXIy4iRHwPvUjZ8fflFH277q0X7C4}:edge',
  '{key:KHUMhDACw_zjxEA4pR8PbuDhJ6kDC-jVoyK-C91otWE}:edge',
  '{key:Q7VeTovttWsrJ7c64M28n_ck3VWxrwvX5n1-XJGcPSk}:edge',
  '{key:Q7VeTovttWsrJ7c64M28n_ck3VWxrwvX5n1-XJGcPSk}:edge-route:POST /login',
  '{lim:N0-6PDdy_UryOkGPuOzhEyYn3jpD3eo7R_iRywKdNp8}:limiter:per-user',
  '{lim:adsxl26tN7hcxCpJyV_QbuyZz9m3_yGaJcD1nLQEk0M}:limiter:per-user',
  '{lim:b2SxC1k7BijmiExJ9ot-QKjcj5OIr2UiZ3n9xVH9Sds}:limiter:per-user',
  '{lim:eQJpm-Qsio5G-7tFAXJlF-hrIsVqGJ92JabaSQgbJFE}:limiter:per-user',
  '{manual:flush}:manual',
  '{manual:login:alice}:manual',
  '{manual:peeked}:manual',
  '{manual:refunded}:manual',
  '{manual:resetted}:manual',
  '{manual:~wByb46beou4T1nq0Z1R8iq69SxBBy1gv9-1YsOVKXgQ}:manual',
  '{user:10}:app:day~q500r0.01',
  '{user:10}:app:minute~q30r0.02',
  '{user:11}:app',
  '{user:42}:app',
  '{user:42}:route:GET /things/:id',
  '{user:42}:route:GET /v2 [version=2.0.0]',
  '{user:42}:route:POST /export',
  '{user:42}:route:POST /report#minute',
  '{user:42}:route:POST /report#month',
  '{user:7}:app:day',
  '{user:7}:app:hour',
  '{user:7}:route:POST /report',
  '{user:9}:app~q50r0.05',
  '{user:9}:route:POST /export',
  '{user:bob}:app:day',
  '{user:bob}:app:hour',
  '{user:bob}:route:POST /export',
  '{user:carol}:app',
  '{user:p1}:app',
  '{user:p1}:app~penalty',
  '{user:p2}:app',
  '{user:p2}:app~penalty',
  '{user:p2}:app~penalty:route:POST /pay',
  '{user:~A4vRWh7PD3uF2xC-2haV7agR7SsenN25SWJEazp7CMU}:app'
]

if (requireRedis(t)) {
  t.test('redisStore: every key written, byte-identical to today', async (t) => {
    const server = await startRedis(t)
    await drive(t, (heartbeat) => redisStore({ client: server.client(t), heartbeatIntervalMs: heartbeat ? 2000 : 0, denyCacheSize: 0 }))
    const keys = (await server.client(t).keys('*')).sort()
    t.same(keys, REDIS_KEYS)
  })
}

t.test('memoryStore: every key passed to the store, byte-identical to today', async (t) => {
  const seen = new Set<string>()
  const clock = manualClock(1_000_000)
  await drive(t, () => new RecordingStore(seen, clock.now))
  t.same([...seen].sort(), MEMORY_KEYS)
})

t.test('every key written to Redis was passed to the memory store too (the same configurations)', async (t) => {
  const unprefixed = REDIS_KEYS.filter((key) => key !== 'tollgate:{replicas}').map((key) => key.slice('tollgate:'.length))
  t.same(unprefixed.filter((key) => !MEMORY_KEYS.includes(key)), [])
})
