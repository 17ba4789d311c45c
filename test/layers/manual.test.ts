/**
 * Reading, giving back and clearing a bucket: `fastify.tollgate.peek`, `refund`
 * and `reset`, on the memory store and on Redis (single and Cluster), for a
 * bucket of one's own and for the buckets the layers use; the Lua script against
 * the engine; the deny cache and the failure modes of the Redis store.
 */
import t, { type Test } from 'tap'
import { performance } from 'node:perf_hooks'
import fc from 'fast-check'
import Fastify, { type FastifyRequest } from 'fastify'
import { Cluster, Redis } from 'ioredis'
import tollgate, {
  memoryStore, RateLimitedError, redisStore, StoreUnavailableError, StoreUnsupportedError,
  type BucketPolicy, type BucketRequest, type FailMode, type LayerBucket, type RedisStore, type Store, type StoreLogger
} from '../../lib/index.js'
import { parseReading } from '../../lib/stores/redis/bucket-script.js'
import { buildApp, buildAppOn, manualClock, statuses } from '../helpers.js'
import { commandCalls, freePort, PATIENT_TIMEOUT_MS, requireRedis, startCluster, startRedis } from '../redis-server.js'

const FIVE: BucketPolicy = { capacity: 5, refillPerSecond: 1 }

// ------------------------------------------------------------ a bucket of one's own

/** The decorator's calls on `store`, whatever it is: a job-queue style bucket `jobs` of 5 at 1/s. */
async function ownBucket (t: Test, store: Store, clock: ReturnType<typeof manualClock>): Promise<void> {
  const app = await buildAppOn(store, { edge: { capacity: 100, refillPerSecond: 1 } })
  t.teardown(() => app.close())
  await app.ready()
  const tollgate = app.tollgate
  t.match(await tollgate.peek('jobs', FIVE), {
    layer: 'manual', allowed: true, cost: 1, retryAfterMs: 0,
    buckets: [{ name: 'manual', key: '{manual:jobs}:manual', capacity: 5, refillPerSecond: 1, tokens: 5, fullInMs: 0 }]
  }, 'an absent bucket reads full')
  t.match(await tollgate.refund('jobs', FIVE, 3), { key: '{manual:jobs}:manual', tokens: 5, fullInMs: 0 }, 'a refund to an absent bucket: still full')
  t.match(await tollgate.peek('jobs', FIVE), { buckets: [{ tokens: 5 }] }, 'and nothing was created')
  t.match(await tollgate.consume('jobs', FIVE, 5), { allowed: true, buckets: [{ tokens: 0 }] })
  clock.advance(500)
  const empty = await tollgate.peek('jobs', FIVE, 2)
  t.match(empty, { allowed: false, cost: 2, retryAfterMs: 1500, buckets: [{ tokens: 0.5, fullInMs: 4500 }] }, 'the decision consume would make, and the time until full')
  t.match(await tollgate.peek('jobs', FIVE, 2), { buckets: [{ tokens: 0.5 }] }, 'a peek takes nothing')
  t.match(await tollgate.peek('jobs', FIVE, 0), { allowed: true, retryAfterMs: 0 }, 'cost 0')
  t.match(await tollgate.peek('jobs', FIVE, 6), { allowed: false, retryAfterMs: Infinity }, 'a cost above capacity never fits')
  const thrown = new RateLimitedError(empty)
  t.equal(thrown.retryAfterSeconds, 2, 'a refused peek makes a RateLimitedError as it is')
  t.match(await tollgate.refund('jobs', FIVE, 2), { name: 'manual', capacity: 5, tokens: 2.5, fullInMs: 2500 }, 'refilled, then given back')
  t.match(await tollgate.refund('jobs', FIVE), { tokens: 3.5, fullInMs: 1500 }, 'one token by default')
  t.match(await tollgate.refund('jobs', FIVE, 100), { tokens: 5, fullInMs: 0 }, 'never above capacity')
  t.match(await tollgate.consume('jobs', FIVE, 5), { allowed: true, buckets: [{ tokens: 0 }] }, 'full, so all 5 again')
  t.match(await tollgate.consume('jobs', FIVE), { allowed: false })
  await tollgate.reset('jobs')
  t.match(await tollgate.peek('jobs', FIVE), { allowed: true, buckets: [{ tokens: 5, fullInMs: 0 }] }, 'reset: full again')
  t.match(await tollgate.consume('jobs', FIVE, 5), { allowed: true }, 'and all 5 pass')
  await tollgate.reset('never-used')
  t.match(await tollgate.peek('other', { capacity: 3, refillPerSecond: 0 }), { allowed: true, buckets: [{ tokens: 3 }] }, 'other keys are untouched')
  await tollgate.consume('slow', { capacity: 3, refillPerSecond: 0 }, 3)
  t.match(await tollgate.peek('slow', { capacity: 3, refillPerSecond: 0 }), { allowed: false, retryAfterMs: Infinity, buckets: [{ fullInMs: Infinity }] }, 'R = 0: never')
  t.match(await tollgate.refund('slow', { capacity: 3, refillPerSecond: 0 }, 1), { tokens: 1, fullInMs: Infinity }, 'R = 0: a refund is all it gets')
  t.equal((await app.inject('/')).statusCode, 404, 'the edge bucket of the client is another one')
}

t.test('memory: peek reads without taking, refund gives back up to capacity, reset clears', async (t) => {
  const clock = manualClock()
  await ownBucket(t, memoryStore({ clock: clock.now }), clock)
})

t.test('memory store: peek creates and marks nothing; refund and reset keep the bucket count right', async (t) => {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now, maxKeys: 2 })
  const bucket = (key: string, cost: number): BucketRequest => ({ key, policy: FIVE, cost })
  store.consume([bucket('a', 5)])
  store.consume([bucket('b', 1)])
  t.same(store.peek(bucket('c', 1)), { tokens: 5, retryAfterMs: 0, fullInMs: 0 })
  t.equal(store.size, 2, 'a peek of an absent bucket creates none')
  t.same(store.peek(bucket('a', 1)), { tokens: 0, retryAfterMs: 1000, fullInMs: 5000 })
  store.consume([bucket('c', 1)]) // evicts the least recently used: a, not marked by its peek
  t.same(store.peek(bucket('a', 1)).tokens, 5, 'a was evicted: the peek did not mark it used')
  t.equal(store.refund(bucket('b', 0.5)), 4.5)
  t.equal(store.refund(bucket('b', 0.5)), 5, 'full: deleted')
  t.equal(store.size, 1)
  t.equal(store.refund(bucket('zzz', 1)), 5, 'absent stays absent')
  t.equal(store.size, 1)
  store.reset('c')
  store.reset('c')
  t.equal(store.size, 0)
  clock.set(10_000)
  store.consume([bucket('d', 5)])
  clock.set(5_000)
  t.equal(store.refund(bucket('d', 1)), 1, 'a clock gone back refills nothing; the refund records its time')
  clock.set(6_000)
  t.same(store.peek(bucket('d', 1)).tokens, 2, 'counted from the refund, as after an allowed step')
  store.close()
})

t.test('memory: a quota share scales the policy of peek and refund, and peek overdraws as consume does', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ replicas: 4 }), edge: { capacity: 4, refillPerSecond: 1 } })
  await app.ready()
  const policy = { capacity: 20, refillPerSecond: 0 }
  t.match(await app.tollgate.peek('k', policy, 10), { allowed: true, buckets: [{ capacity: 5, refillPerSecond: 0, tokens: 5 }] }, 'a cost above the share of 5 fits a full share')
  t.match(await app.tollgate.consume('k', policy, 10), { allowed: true, buckets: [{ tokens: -5 }] })
  t.match(await app.tollgate.peek('k', policy, 1), { allowed: false, retryAfterMs: Infinity, buckets: [{ tokens: -5 }] })
  t.match(await app.tollgate.peek('k', policy, 21), { allowed: false, retryAfterMs: Infinity }, 'above the whole quota: never')
  t.match(await app.tollgate.refund('k', policy, 7), { capacity: 5, tokens: 2 }, 'a refund of a bucket in debt')
  await t.rejects(app.tollgate.peek('k', { capacity: 2, refillPerSecond: 1 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`policy\.capacity` × the store's quota share/ })
  await app.close()
})

t.test('invalid arguments reject with a coded error naming them', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 2, refillPerSecond: 1 } })
  await app.ready()
  const invalid = (message: RegExp) => ({ code: 'TOLLGATE_INVALID_OPTION', message })
  const manual = app.tollgate
  await t.rejects(manual.peek('', FIVE), invalid(/`key` to be a non-empty string, a finite number or a layer's bucket/))
  await t.rejects(manual.refund(Number.POSITIVE_INFINITY, FIVE), invalid(/`key` to be a non-empty string, a finite number or a layer's bucket.*`Infinity` \(number\)/))
  await t.rejects(manual.reset(null as unknown as string), invalid(/`key` to be a non-empty string/))
  await t.rejects(manual.consume('', FIVE), invalid(/`key` to be a non-empty string/))
  await t.rejects(manual.peek('k', { capacity: 0, refillPerSecond: 1 }), invalid(/`policy\.capacity`/))
  await t.rejects(manual.refund('k', undefined as unknown as BucketPolicy), invalid(/`policy` to be an object/))
  await t.rejects(manual.peek('k', FIVE, -1), invalid(/`cost` to be a finite number ≥ 0/))
  await t.rejects(manual.refund('k', FIVE, NaN), invalid(/`tokens` to be a finite number ≥ 0, got `NaN`/))
  await t.rejects(manual.refund('k', FIVE, Infinity), invalid(/`tokens`/))
  await app.close()
})

// ------------------------------------------------------------ the buckets the layers use

const tiers = {
  default: { capacity: 10, refillPerSecond: 1 },
  vip: { capacity: 100, refillPerSecond: 10 },
  anonymous: { capacity: 5, refillPerSecond: 1 }
}
const exportQuota = { default: { capacity: 2, refillPerSecond: 0.01 }, vip: { capacity: 4, refillPerSecond: 0.01 } }

/** Both layers on a memory store and a manual clock: `GET /`, `GET /report`, `POST /export` (cost 5, quota), and a signer. */
async function layered (t: Test) {
  const built = await buildApp({ edge: { capacity: 1000, refillPerSecond: 1 }, app: { tiers } })
  const { app } = built
  app.get('/', async () => 'ok')
  app.get('/report', { config: { rateLimit: { quota: { default: { capacity: 1, refillPerSecond: 0.01 } } } } }, async () => 'report')
  app.post('/export', { config: { rateLimit: { cost: 5, quota: exportQuota } } }, async () => 'exported')
  await app.ready()
  t.teardown(() => app.close())
  const as = (sub: string, tier?: string) => ({ authorization: `Bearer ${app.jwt.sign(tier === undefined ? { sub } : { sub, tier })}` })
  return { ...built, as }
}

t.test('the edge bucket of an address, an edge.key value, or a request', async (t) => {
  const { app, clock } = await buildApp({ edge: { capacity: 20, refillPerSecond: 1, key: (request) => request.headers['x-api-key'], ipv6Subnet: 56 } })
  app.get('/', async () => 'ok')
  // Gives its edge token back: a route the edge does not count.
  app.get('/free', async (request) => app.tollgate.refund({ layer: 'edge', request }))
  await app.ready()
  t.teardown(() => app.close())
  await statuses(app, 20, { url: '/', remoteAddress: '2001:db8:1:2::1' })
  t.equal((await app.inject({ url: '/', remoteAddress: '2001:db8:1:2::1' })).statusCode, 429)
  const sameSubnet: LayerBucket = { layer: 'edge', ip: '2001:db8:1:2:ffff::9' }
  t.match(await app.tollgate.peek(sameSubnet), {
    layer: 'edge', allowed: false, retryAfterMs: 1000,
    buckets: [{ name: 'edge', key: '{ip:2001:db8:1:0::/56}:edge', capacity: 20, tokens: 0, fullInMs: 20_000 }]
  }, 'grouped by edge.ipv6Subnet, as the edge groups it')
  t.match(await app.tollgate.peek({ layer: 'edge', ip: '::ffff:192.0.2.1' }), { buckets: [{ key: '{ip:192.0.2.1}:edge', tokens: 20 }] }, 'IPv4-mapped addresses unmapped')
  await app.tollgate.reset(sameSubnet)
  t.equal((await app.inject({ url: '/', remoteAddress: '2001:db8:1:2::1' })).statusCode, 200, 'reset: the client passes again')

  const withKey = { url: '/', headers: { 'x-api-key': 'key-acme-0001' } }
  await statuses(app, 20, withKey)
  t.equal((await app.inject(withKey)).statusCode, 429)
  const key = await app.tollgate.peek({ layer: 'edge', key: 'key-acme-0001' })
  t.match(key, { allowed: false, buckets: [{ tokens: 0 }] })
  t.notMatch(key.buckets[0]?.key, /acme/, 'an edge.key value is digested, as the edge stores it')
  t.match(await app.tollgate.refund({ layer: 'edge', key: 'key-acme-0001' }, 2), { tokens: 2 })
  t.same(await statuses(app, 3, withKey), [200, 200, 429], 'two tokens given back')
  t.match(await app.tollgate.peek({ layer: 'edge', key: 12345 }), { buckets: [{ tokens: 20 }] }, 'a number, as edge.key may return one')

  clock.advance(60_000)
  t.same(await statuses(app, 30, { url: '/free', remoteAddress: '198.51.100.1' }), new Array<number>(30).fill(200), 'a route that refunds its own edge token never spends it')
  t.equal(JSON.parse((await app.inject({ url: '/free', remoteAddress: '198.51.100.1' })).body).tokens, 20)
  const keyed = { url: '/free', remoteAddress: '198.51.100.2', headers: { 'x-api-key': 'key-free' } }
  t.same(await statuses(app, 30, keyed), new Array<number>(30).fill(200), 'by its edge.key too: the request\'s own edge bucket')
  t.match((await app.inject(keyed)).json(), { key: (await app.tollgate.peek({ layer: 'edge', key: 'key-free' })).buckets[0]?.key, tokens: 20 })
})

t.test("a user's app bucket under their tier, an anonymous client's, and a route's own", async (t) => {
  const { app, as } = await layered(t)
  const victor = as('victor', 'vip')
  await statuses(app, 3, { method: 'POST', url: '/export', headers: victor })
  t.match(await app.tollgate.peek({ layer: 'app', user: 'victor', tier: 'vip' }, 5), {
    layer: 'app', tier: 'vip', allowed: true,
    buckets: [{ name: 'app', key: '{user:victor}:app', capacity: 100, tokens: 85 }]
  })
  t.match(await app.tollgate.peek({ layer: 'app', user: 'victor' }), { tier: 'default', buckets: [{ key: '{user:victor}:app', capacity: 10 }] },
    'without its tier, the same key under the default policy: name the tier')
  t.match(await app.tollgate.peek({ layer: 'app', user: 'victor', tier: 'gold', route: 'POST /export' }), { tier: 'default', buckets: [{ name: 'route', capacity: 2 }] },
    'an unknown tier is default, as the app layer maps a claim')
  const route: LayerBucket = { layer: 'app', user: 'victor', tier: 'vip', route: 'POST /export' }
  t.match(await app.tollgate.peek(route), { allowed: true, buckets: [{ name: 'route', key: '{user:victor}:route:POST /export', capacity: 4, tokens: 1 }] })
  await app.inject({ method: 'POST', url: '/export', headers: victor })
  t.equal((await app.inject({ method: 'POST', url: '/export', headers: victor })).statusCode, 429, 'the export quota is spent')
  await app.tollgate.reset(route)
  t.equal((await app.inject({ method: 'POST', url: '/export', headers: victor })).statusCode, 200, 'reset: the route quota is full again')
  t.match(await app.tollgate.peek({ layer: 'app', user: 'victor', tier: 'vip' }), { buckets: [{ tokens: 75 }] }, 'the main bucket was not touched')
  t.match(await app.tollgate.refund({ layer: 'app', user: 'victor', tier: 'vip' }, 10), { tokens: 85, capacity: 100, fullInMs: 1500 }, 'an export that failed gives its cost back')

  const alice = as('alice')
  t.match(await app.tollgate.consume({ layer: 'app', user: 'alice' }, 9), { layer: 'app', tier: 'default', allowed: true, buckets: [{ key: '{user:alice}:app', tokens: 1 }] },
    'charged by hand (a cost known only after the work)')
  t.same(await statuses(app, 2, { url: '/', headers: alice }), [200, 429])
  await app.tollgate.reset({ layer: 'app', user: 'alice' })
  t.equal((await app.inject({ url: '/', headers: alice })).statusCode, 200)
  t.match(await app.tollgate.peek({ layer: 'app', user: 42 }), { buckets: [{ key: '{user:42}:app' }] }, 'a numeric id, as a JWT sub may be')

  await statuses(app, 5, { url: '/', remoteAddress: '198.51.100.9' })
  t.equal((await app.inject({ url: '/', remoteAddress: '198.51.100.9' })).statusCode, 429, 'anonymous: 5')
  const anonymous: LayerBucket = { layer: 'app', ip: '198.51.100.9' }
  t.match(await app.tollgate.peek(anonymous), { tier: 'anonymous', buckets: [{ key: '{ip:198.51.100.9}:app', capacity: 5, tokens: 0 }] })
  await app.tollgate.reset(anonymous)
  t.same(await statuses(app, 6, { url: '/', remoteAddress: '198.51.100.9' }), [200, 200, 200, 200, 200, 429])

  const reader = as('rita')
  t.same(await statuses(app, 2, { url: '/report', headers: reader }), [200, 429])
  t.same(await statuses(app, 1, { method: 'HEAD', url: '/report', headers: reader }), [429], 'HEAD spends the GET route quota')
  for (const name of ['GET /report', 'GET /report/', 'HEAD /report', 'GET,HEAD /report', 'POST,GET /report']) {
    t.match(await app.tollgate.peek({ layer: 'app', user: 'rita', route: name }), { buckets: [{ key: '{user:rita}:route:GET /report', tokens: 0 }] }, `${name}: the route as declared`)
  }
  await app.tollgate.reset({ layer: 'app', ip: '198.51.100.9', route: 'GET /report' })
  t.match(await app.tollgate.peek({ layer: 'app', ip: '198.51.100.9', route: 'GET /report' }), { tier: 'anonymous', buckets: [{ capacity: 1 }] }, 'a tier without a quota of its own takes the route\'s default')
})

t.test("the edge bucket of a request whose socket is gone (no request.ip) is the unknown client's", async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: FIVE })
  t.match(await app.tollgate.peek({ layer: 'edge', request: { headers: {} } as unknown as FastifyRequest }), { buckets: [{ key: '{ip:unknown}:edge' }] })
  await app.close()
})

t.test('layer buckets: invalid or impossible ones reject with a coded error naming them', async (t) => {
  const { app } = await layered(t)
  const invalid = (message: RegExp) => ({ code: 'TOLLGATE_INVALID_OPTION', message })
  const cases: Array<[unknown, RegExp]> = [
    [{ layer: 'edges', ip: '1.2.3.4' }, /`bucket\.layer` to be 'edge' or 'app', got `"edges"`/],
    [{ ip: '1.2.3.4' }, /`bucket\.layer` to be 'edge' or 'app', got `undefined`/],
    [[], /`bucket` to be an object/],
    [{ layer: 'edge' }, /name the edge's client by one of `ip`, `key` or `request`/],
    [{ layer: 'edge', ip: '1.2.3.4', key: 'k' }, /one of `ip`, `key` or `request`/],
    [{ layer: 'edge', ip: '' }, /`bucket\.ip` to be a non-empty string/],
    [{ layer: 'edge', key: NaN }, /`bucket\.key` to be a non-empty string or a finite number/],
    [{ layer: 'edge', request: 'req' }, /`bucket\.request` to be a Fastify request/],
    [{ layer: 'edge', ip: '1.2.3.4', user: '1' }, /Unknown option `bucket\.user`/],
    [{ layer: 'app' }, /name the app layer's requester by one of `user` or `ip`/],
    [{ layer: 'app', user: '1', ip: '1.2.3.4' }, /one of `user` or `ip`/],
    [{ layer: 'app', user: '' }, /`bucket\.user` to be a non-empty string or a finite number/],
    [{ layer: 'app', user: '1', tier: 2 }, /`bucket\.tier` to be a string/],
    [{ layer: 'app', ip: '1.2.3.4', tier: 'vip' }, /Unknown option `bucket\.tier`/],
    [{ layer: 'app', user: '1', route: 'POST /nowhere' }, /`bucket\.route` to be a route with a `rateLimit\.quota`, declared after the plugin \(`GET \/report`, `POST \/export`\), got `"POST \/nowhere"`/],
    [{ layer: 'app', user: '1', route: 'GET /' }, /`bucket\.route`.*got `"GET \/"`/],
    [{ layer: 'app', user: '1', route: 'export' }, /`bucket\.route`/],
    [{ layer: 'app', user: '1', route: 7 }, /`bucket\.route` to be a non-empty string/]
  ]
  for (const [bucket, message] of cases) {
    await t.rejects(app.tollgate.peek(bucket as LayerBucket), invalid(message), JSON.stringify(bucket))
    await t.rejects(app.tollgate.reset(bucket as LayerBucket), invalid(message), `reset ${JSON.stringify(bucket)}`)
  }
  await t.rejects(app.tollgate.refund({ layer: 'app', user: '1', tier: 'default' }, -1), invalid(/`tokens`/))
  await t.rejects(app.tollgate.refund({ layer: 'app', user: '1' }), invalid(/Expected `bucket\.tier` in a refund: the app layer has several tiers/), 'a refund under a guessed tier could delete a bigger tier\'s bucket')
  await t.rejects(app.tollgate.consume({ layer: 'app', user: '1' }, FIVE as unknown as number), invalid(/`cost` to be a finite number ≥ 0, got `\{"capacity":5,"refillPerSecond":1\}`/), 'a layer bucket takes no policy')

  const edgeOnly = Fastify()
  await edgeOnly.register(tollgate, { edge: { capacity: 1, refillPerSecond: 1 } })
  await t.rejects(edgeOnly.tollgate.peek({ layer: 'app', user: '1' }), invalid(/`bucket\.layer` is `"app"`, but the app layer is disabled/))
  await edgeOnly.close()
  const appOnly = Fastify()
  await appOnly.register(tollgate, { app: { tiers: { default: FIVE } } })
  await t.rejects(appOnly.tollgate.reset({ layer: 'edge', ip: '1.2.3.4' }), invalid(/`bucket\.layer` is `"edge"`, but the edge layer is disabled/))
  await t.rejects(appOnly.tollgate.peek({ layer: 'app', user: '1', route: 'GET /' }), invalid(/declared after the plugin \(there is none\)/))
  const routesOnly = Fastify()
  await routesOnly.register(tollgate, { edge: { global: false } })
  await t.rejects(routesOnly.tollgate.peek({ layer: 'edge', ip: '1.2.3.4' }), invalid(/under `edge\.global: false` clients have no edge bucket of their own/))
  await routesOnly.close()
  t.match(await appOnly.tollgate.peek({ layer: 'app', ip: '2001:db8:1:2::1' }), { buckets: [{ key: '{ip:2001:db8:1:2::/64}:app' }] }, 'without the edge, IPv6 by /64')
  await appOnly.close()
})

// ------------------------------------------------------------ a store without them

t.test('a custom store without peek, refund or reset registers and limits; only those calls fail, naming the method', async (t) => {
  const consumeOnly: Store = {
    consume: (buckets) => ({ allowed: true, tokens: buckets.map((bucket) => bucket.policy.capacity - bucket.cost), retryAfterMs: 0 }),
    close: () => {}
  }
  const app = Fastify()
  await app.register(tollgate, { store: consumeOnly, edge: { capacity: 5, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  await app.ready()
  t.equal((await app.inject('/')).statusCode, 200)
  t.match(await app.tollgate.consume('k', FIVE), { allowed: true })
  for (const [call, method] of [[async () => app.tollgate.peek('k', FIVE), 'peek'], [async () => app.tollgate.refund('k', FIVE), 'refund'], [async () => app.tollgate.reset('k'), 'reset']] as const) {
    await t.rejects(async () => { await call() }, { code: 'TOLLGATE_STORE_UNSUPPORTED', statusCode: 500, message: `The rate-limit store does not implement ${method}() (memoryStore() and redisStore() do)` })
  }
  await t.rejects(app.tollgate.peek('', FIVE), { code: 'TOLLGATE_INVALID_OPTION' }, 'arguments are checked first')
  t.ok(new StoreUnsupportedError('peek') instanceof Error)
  await app.close()
  const resets: Array<[string, unknown]> = []
  const withReset: Store = { ...consumeOnly, reset (key) { resets.push([key, this]) } }
  const other = Fastify()
  await other.register(tollgate, { store: withReset, edge: { capacity: 5, refillPerSecond: 1 } })
  await other.tollgate.reset('k')
  t.same(resets, [['{manual:k}:manual', withReset]], 'a store that has one of them gets its calls, with itself as `this`')
  await other.close()
})

// ------------------------------------------------------------ Redis

t.test('the bucket script\'s replies are parsed strictly', async (t) => {
  t.same(parseReading(['2.5', '100', 'inf']), { tokens: 2.5, retryAfterMs: 100, fullInMs: Infinity })
  t.throws(() => parseReading('2.5'), /unexpected reply from the Redis bucket script: 2\.5/)
  t.throws(() => parseReading(['1', '2']), /unexpected reply/)
  t.throws(() => parseReading(['1', '2', 'x']), /unexpected reply from the Redis script: x/)
})

const collect = (): { logger: StoreLogger, lines: Array<{ level: string, message: string, object: Record<string, unknown> }> } => {
  const lines: Array<{ level: string, message: string, object: Record<string, unknown> }> = []
  const at = (level: string) => (object: object, message: string): void => { lines.push({ level, message, object: object as Record<string, unknown> }) }
  return { logger: { info: at('info'), warn: at('warn'), error: at('error') }, lines }
}

if (requireRedis(t)) {
  t.test('Redis: peek, refund and reset as on memory', async (t) => {
    const server = await startRedis(t)
    const clock = manualClock(1_000_000)
    await ownBucket(t, redisStore({ client: server.client(t), clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS }), clock)
  })

  t.test('Redis: a refund sets the TTL of its time until full, deletes a full bucket, and creates none; the prefix and hash tag hold', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const store = redisStore({ client, prefix: 'api:', heartbeatIntervalMs: 0, neverFullTtlMs: 60_000 })
    t.teardown(() => store.close())
    const policy = { capacity: 10, refillPerSecond: 1 }
    const key = '{user:7}:app'
    await store.consume([{ key, policy, cost: 10 }])
    t.ok(await store.refund({ key, policy, cost: 4 }) >= 4)
    const ttl = await client.pttl(`api:${key}`)
    t.ok(ttl > 5000 && ttl <= 6000, `4 of 10 at 1/s: full in 6 s (${ttl})`)
    t.equal(await store.refund({ key, policy, cost: 6 }), 10)
    t.equal(await client.exists(`api:${key}`), 0, 'full: deleted')
    t.equal(await store.refund({ key, policy, cost: 1 }), 10)
    const buckets = async (): Promise<string[]> => (await client.keys('api:*')).filter((stored) => !stored.includes('~refund:'))
    t.same(await buckets(), [], 'absent stays absent (the ids of applied refunds, kept two minutes, aside)')
    await store.consume([{ key: '{job}:x', policy: { capacity: 3, refillPerSecond: 0 }, cost: 3 }])
    t.equal(await store.refund({ key: '{job}:x', policy: { capacity: 3, refillPerSecond: 0 }, cost: 1 }), 1)
    const never = await client.pttl('api:{job}:x')
    t.ok(never > 59_000 && never <= 60_000, `refill 0: neverFullTtlMs (${never})`)
    const reading = await store.peek({ key: '{job}:x', policy: { capacity: 3, refillPerSecond: 0 }, cost: 1 })
    t.same(reading, { tokens: 1, retryAfterMs: 0, fullInMs: Infinity }, 'Redis TIME')
    await store.reset('{job}:x')
    t.same(await buckets(), [])
    const marks = await client.keys('api:*~refund:*')
    t.same(marks.map((mark) => mark.slice(0, mark.indexOf('~refund:'))).sort(), ['api:{job}:x', 'api:{user:7}:app', 'api:{user:7}:app'], 'one id per refund applied, beside its bucket')
    for (const mark of marks) t.ok(await client.pttl(mark) <= 120_000)
  })

  t.test('Redis: a reset or refund drops the deny cache\'s refusal for its key, so the client is not refused locally after it', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const inspect = server.client(t)
    const clock = manualClock()
    const store = redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS })
    t.teardown(() => store.close())
    const policy = { capacity: 3, refillPerSecond: 0.001 }
    const login = [{ key: '{manual:login:alice}:manual', policy, cost: 1 }]
    for (let i = 0; i < 3; i++) await store.consume(login)
    t.match(await store.consume(login), { allowed: false }, 'refused by Redis')
    t.match(store.consume(login), { allowed: false }, 'then by the deny cache, at once')
    await store.reset('{manual:login:alice}:manual')
    const after = store.consume(login)
    t.ok(after instanceof Promise, 'after a reset, asked of Redis again')
    t.match(await after, { allowed: true, tokens: [2] })
    for (let i = 0; i < 2; i++) await store.consume(login)
    await store.consume(login)
    t.match(store.consume(login), { allowed: false }, 'refused from the cache again')
    t.equal(await store.refund({ key: '{manual:login:alice}:manual', policy, cost: 1 }), 1)
    t.match(await store.consume(login), { allowed: true }, 'after a refund too')

    // A refusal decided before a reset, whose reply lands after the reset was sent, is not kept.
    const before = await commandCalls(inspect)
    const refused = store.consume(login)
    await new Promise((resolve) => setImmediate(resolve)) // the consume goes out first
    const cleared = store.reset('{manual:login:alice}:manual')
    t.match(await refused, { allowed: false })
    await cleared
    const next = store.consume(login)
    t.ok(next instanceof Promise, 'the refusal that came back while the reset was on its way was not kept')
    t.match(await next, { allowed: true })
    const after2 = await commandCalls(inspect)
    t.equal((after2.evalsha ?? 0) + (after2.eval ?? 0) - (before.evalsha ?? 0) - (before.eval ?? 0), 3, 'three script calls: refused, reset, allowed')

    // The same, with the refusal's reply read alone while the reset is still on its way: no refusal is kept meanwhile.
    const busy = server.client(t)
    await busy.ping()
    const hold = `local t0 = redis.call('TIME')
repeat local t1 = redis.call('TIME') until (t1[1] - t0[1]) * 1e6 + (t1[2] - t0[2]) > 40000
return 1`
    const slow = redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: 5000, prefix: 'slow:' })
    t.teardown(() => slow.close())
    for (let i = 0; i < 3; i++) await slow.consume(login)
    const read = slow.consume(login)
    await new Promise((resolve) => setImmediate(resolve)) // the consume goes out
    for (const until = performance.now() + 20; performance.now() < until;); // Redis answers it; this process reads nothing yet
    void busy.eval(hold, 0) // holds Redis for 40 ms: the reset's reply comes after it
    let resetAnswered = false
    const reset = slow.reset('{manual:login:alice}:manual').then(() => { resetAnswered = true })
    t.match(await read, { allowed: false }, 'the refusal, read before the reset')
    t.notOk(resetAnswered, 'the reset is still on its way')
    const meanwhile = slow.consume(login)
    t.ok(meanwhile instanceof Promise, 'so that refusal was not kept: the next request asks Redis')
    await reset
    t.match(await meanwhile, { allowed: true })
  })

  t.test('Redis through the plugin: the deny cache does not keep a cleared account refused', async (t) => {
    const server = await startRedis(t)
    const clock = manualClock()
    const app = await buildAppOn(redisStore({ client: server.client(t), clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS }), { edge: { capacity: 100, refillPerSecond: 0 } })
    const policy = { capacity: 2, refillPerSecond: 0.01 }
    app.post('/login/:account', async (request) => {
      const decision = await app.tollgate.consume(`login:${(request.params as { account: string }).account}`, policy)
      if (!decision.allowed) throw new RateLimitedError(decision)
      return 'checked'
    })
    // An administrator unlocks an account.
    app.delete('/login/:account', async (request) => app.tollgate.reset(`login:${(request.params as { account: string }).account}`))
    t.teardown(() => app.close())
    const login = { method: 'POST', url: '/login/alice' } as const
    t.same(await statuses(app, 4, login), [200, 200, 429, 429])
    t.equal((await app.inject({ method: 'DELETE', url: '/login/alice' })).statusCode, 200)
    t.same(await statuses(app, 3, login), [200, 200, 429], 'unlocked: two again, not refused by the deny cache')
  })

  t.test('Redis unreachable: peek follows failMode; refund and reset reject with TOLLGATE_STORE_UNAVAILABLE and clear the local state', async (t) => {
    const port = await freePort()
    const client = new Redis({ port, lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => null })
    client.on('error', () => {})
    t.teardown(() => { client.disconnect() })
    const bucket = { key: '{manual:k}:manual', policy: { capacity: 10, refillPerSecond: 1 }, cost: 1 }
    const clock = manualClock()
    const stores: Partial<Record<FailMode, RedisStore>> = {}
    for (const failMode of ['local', 'open', 'closed'] as const) {
      const { logger, lines } = collect()
      const store = stores[failMode] = redisStore({ client, failMode, clock: clock.now, heartbeatIntervalMs: 0, breakerThreshold: 2, logIntervalMs: 0, replicas: 2, fallbackHeadroom: 0 })
      store.useLogger(logger)
      t.teardown(() => store.close())
      await t.rejects(store.refund(bucket), StoreUnavailableError, `${failMode}: refund`)
      t.match(lines.at(-1), { level: 'error', message: 'fastify-tollgate: Redis call failed; refund or reset may or may not have been applied to the shared quota', object: { operation: 'refund' } })
      await t.rejects(store.reset(bucket.key), StoreUnavailableError, `${failMode}: reset`)
      t.equal(store.state, 'open', 'two failed calls opened the breaker')
      await t.rejects(store.reset(bucket.key), StoreUnavailableError, `${failMode}: reset, breaker open`)
      t.match(lines.at(-1), { level: 'warn', message: 'fastify-tollgate: Redis unavailable; refund or reset not applied to the shared quota', object: { operation: 'reset' } })
    }
    const local = stores.local as RedisStore
    t.match(await local.peek(bucket), { tokens: 5, retryAfterMs: 0, degraded: 'local', policy: { capacity: 5, refillPerSecond: 0.5 } }, 'local: the local share (half of it: two replicas)')
    t.match(await local.consume([{ ...bucket, cost: 5 }]), { allowed: true, degraded: 'local', tokens: [0] })
    t.match(await local.peek(bucket), { tokens: 0, retryAfterMs: 2000, degraded: 'local' })
    await t.rejects(local.refund({ ...bucket, cost: 3 }), StoreUnavailableError)
    t.match(await local.peek(bucket), { tokens: 3, degraded: 'local' }, 'the refund reached the local share')
    await t.rejects(local.reset(bucket.key), StoreUnavailableError)
    t.match(await local.peek(bucket), { tokens: 5, degraded: 'local' }, 'the reset cleared it')
    t.same(await stores.open?.peek(bucket), { tokens: 10, retryAfterMs: 0, fullInMs: 0, degraded: 'open' }, 'open: a full bucket, uncounted')
    t.throws(() => stores.closed?.peek(bucket), StoreUnavailableError, 'closed: refused')
    const probing = redisStore({ client, failMode: 'closed', clock: clock.now, heartbeatIntervalMs: 0 })
    t.teardown(() => probing.close())
    await t.rejects(async () => probing.peek(bucket), StoreUnavailableError, 'closed: a failed call rejects')
    const viaPlugin = Fastify()
    await viaPlugin.register(tollgate, { store: stores.local as RedisStore, edge: { capacity: 1, refillPerSecond: 1 } })
    await t.rejects(viaPlugin.tollgate.reset('k'), { code: 'TOLLGATE_STORE_UNAVAILABLE', statusCode: 503 }, 'through the decorator')
    t.match(await viaPlugin.tollgate.peek('k', bucket.policy), { allowed: true, buckets: [{ capacity: 5, refillPerSecond: 0.5 }] }, 'a local reading reports its local policy')
    await viaPlugin.close()
  })

  t.test('Redis back: a refund or a peek is the probe that closes the breaker', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const clock = manualClock()
    const { logger, lines } = collect()
    const store = redisStore({ client, clock: clock.now, heartbeatIntervalMs: 0, breakerThreshold: 1, probeIntervalMs: 1000, timeoutMs: 50 })
    store.useLogger(logger)
    t.teardown(() => store.close())
    const bucket = { key: '{p}:k', policy: FIVE, cost: 1 }
    server.pause()
    await t.rejects(store.reset(bucket.key), StoreUnavailableError, 'a frozen Redis: the reset times out')
    t.equal(store.state, 'open')
    server.resume()
    t.match(await store.peek(bucket), { degraded: 'local' }, 'before the probe time, decided locally')
    clock.advance(1000)
    t.same(await store.peek(bucket), { tokens: 5, retryAfterMs: 0, fullInMs: 0 }, 'the peek probes Redis')
    t.equal(store.state, 'closed')
    t.ok(lines.some((line) => line.message === 'fastify-tollgate: Redis answers again; shared quotas restored'))
  })

  t.test('Redis Cluster: peek, refund and reset on keys of several slots, prefixed', async (t) => {
    const cluster = await startCluster(t)
    const client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })))
    t.teardown(() => { client.disconnect() })
    const store = redisStore({ client, prefix: 'c:', heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS })
    t.teardown(() => store.close())
    const app = Fastify()
    await app.register(tollgate, { store, edge: { capacity: 1, refillPerSecond: 1 }, app: { tiers: { default: { capacity: 5, refillPerSecond: 0 } } } })
    app.post('/export', { config: { rateLimit: { quota: { default: { capacity: 2, refillPerSecond: 0.01 } } } } }, async () => 'ok')
    await app.ready()
    t.teardown(() => app.close())
    const users = ['u1', 'u2', 'u3', 'u4', 'u5', 'u6']
    for (const user of users) {
      await app.tollgate.consume({ layer: 'app', user }, 4)
      await app.tollgate.consume({ layer: 'app', user, route: 'POST /export' }, 2)
    }
    const slots = new Set(await Promise.all(users.map(async (user) => client.cluster('KEYSLOT', `c:{user:${user}}:app`))))
    t.ok(slots.size > 1, `keys in ${slots.size} slots`)
    for (const user of users) {
      t.match(await app.tollgate.peek({ layer: 'app', user }), { buckets: [{ tokens: 1 }] })
      t.match(await app.tollgate.refund({ layer: 'app', user }, 2), { tokens: 3 })
      await app.tollgate.reset({ layer: 'app', user, route: 'POST /export' })
      t.equal(await client.exists(`c:{user:${user}}:route:POST /export`), 0, `${user}: the route bucket is gone`)
      t.ok(await client.exists(`c:{user:${user}}:app`), `${user}: the main bucket stays`)
    }
  })

  t.test('differential: peek, refund and reset decide alike in the Lua script and the engine (memory store), clock jumps included', async (t) => {
    const server = await startRedis(t)
    let now = 0
    const redis = redisStore({ client: server.client(t), clock: () => now, heartbeatIntervalMs: 0, timeoutMs: 5000, denyCacheSize: 0 })
    t.teardown(() => redis.close())
    const policyArb: fc.Arbitrary<BucketPolicy> = fc.record({
      capacity: fc.oneof(fc.integer({ min: 1, max: 50 }), fc.double({ min: 1, max: 1000, noNaN: true })),
      refillPerSecond: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 20 }), fc.double({ min: 0.001, max: 1000, noNaN: true }))
    })
    const opArb = fc.record({
      // 'take': a refund of a negative amount, as a penalty starts (from a full bucket too).
      kind: fc.constantFrom('consume', 'consume', 'peek', 'refund', 'refund', 'take', 'reset'),
      bucket: fc.integer({ min: 0, max: 2 }),
      share: fc.oneof(fc.double({ min: 0, max: 1.2, noNaN: true }), fc.constantFrom(0, 0.5, 1)),
      overdraft: fc.boolean(),
      dt: fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 0, max: 3000 }) }, { weight: 2, arbitrary: fc.double({ min: 0, max: 500, noNaN: true }) }, { weight: 1, arbitrary: fc.integer({ min: -2000, max: -1 }) })
    })
    let run = 0
    let compared = 0
    const details = await fc.check(fc.asyncProperty(fc.array(policyArb, { minLength: 3, maxLength: 3 }), fc.array(opArb, { minLength: 10, maxLength: 60 }), fc.context(), async (policies, ops, ctx) => {
      let mem = 0
      const memory = memoryStore({ clock: () => mem })
      const tag = `x${run++}`
      now = mem = 1_000_000
      try {
        for (const [i, op] of ops.entries()) {
          now = mem = now + op.dt
          const policy = policies[op.bucket] as BucketPolicy
          const request: BucketRequest = { key: `{d:${tag}}:${op.bucket}`, policy, cost: Number((policy.capacity * op.share).toFixed(3)), overdraft: op.kind === 'peek' && op.overdraft }
          let fromMemory: unknown
          let fromRedis: unknown
          if (op.kind === 'consume') [fromMemory, fromRedis] = [memory.consume([request]), await redis.consume([request])]
          else if (op.kind === 'peek') [fromMemory, fromRedis] = [memory.peek(request), await redis.peek(request)]
          else if (op.kind === 'refund') [fromMemory, fromRedis] = [memory.refund(request), await redis.refund(request)]
          else if (op.kind === 'take') [fromMemory, fromRedis] = [memory.refund({ ...request, cost: -request.cost }), await redis.refund({ ...request, cost: -request.cost })]
          else [fromMemory, fromRedis] = [memory.reset(request.key), await redis.reset(request.key)]
          compared++
          if (!Object.is(JSON.stringify(fromMemory, exact), JSON.stringify(fromRedis, exact))) {
            ctx.log(`op ${i} ${JSON.stringify(op)} ${JSON.stringify(request)}: memory ${JSON.stringify(fromMemory, exact)}, Redis ${JSON.stringify(fromRedis, exact)}`)
            return false
          }
        }
        return true
      } finally {
        memory.close()
      }
    }), { seed: 20261130, numRuns: 100 })
    t.notOk(details.failed, 'memory = Redis for every operation, to the bit', details.failed ? { diagnostic: true, report: fc.defaultReportMessage(details) } : {})
    t.ok(compared > 1500, `${compared} operations compared`)
  })
}

/** Numbers to the bit (and Infinity) in JSON, for comparing two answers exactly. */
function exact (_key: string, value: unknown): unknown {
  return typeof value === 'number' ? `${Object.is(value, -0) ? '-0' : String(value)}` : value
}

// ------------------------------------------------------------ consume by hand

t.test('fastify.tollgate.consume takes from a bucket by hand', async (t) => {
  const clock = manualClock()
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ clock: clock.now }), edge: { capacity: 1, refillPerSecond: 1 } })
  await app.ready()
  const jobs = { capacity: 3, refillPerSecond: 1 }
  const first = await app.tollgate.consume('jobs:tenant-1', jobs, 2)
  t.match(first, { layer: 'manual', allowed: true, cost: 2, retryAfterMs: 0, buckets: [{ name: 'manual', capacity: 3, tokens: 1 }] })
  const second = await app.tollgate.consume('jobs:tenant-1', jobs, 2)
  t.match(second, { allowed: false, retryAfterMs: 1000 })
  t.match(await app.tollgate.consume('jobs:tenant-2', jobs), { allowed: true }, 'another key')
  t.match(await app.tollgate.consume('jobs:tenant-1', jobs), { allowed: true, buckets: [{ tokens: 0 }] }, 'default cost 1')
  await app.close()
})

t.test('manual keys live apart from request keys, and shares apply', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ replicas: 2 }), edge: { capacity: 2, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  await app.ready()
  const decision = await app.tollgate.consume('127.0.0.1', { capacity: 4, refillPerSecond: 2 })
  t.match(decision.buckets[0], { capacity: 2, refillPerSecond: 1, tokens: 1, key: '{manual:127.0.0.1}:manual' })
  t.equal((await app.inject('/')).statusCode, 200, 'the edge bucket of 127.0.0.1 is untouched')
  await app.close()
})

t.test('invalid manual arguments throw a coded error', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 2, refillPerSecond: 1 } })
  await app.ready()
  await t.rejects(app.tollgate.consume('', { capacity: 1, refillPerSecond: 1 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`key` to be a non-empty string/ })
  await t.rejects(app.tollgate.consume('k', { capacity: 0, refillPerSecond: 1 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`policy\.capacity`/ })
  await t.rejects(app.tollgate.consume('k', { capacity: 1, refillPerSecond: 1 }, -1), { code: 'TOLLGATE_INVALID_OPTION', message: /`cost`/ })
  await app.close()
  const shared = Fastify()
  await shared.register(tollgate, { store: memoryStore({ replicas: 4 }), edge: { capacity: 4, refillPerSecond: 1 } })
  await t.rejects(shared.tollgate.consume('k', { capacity: 2, refillPerSecond: 1 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`policy\.capacity` × the store's quota share \(0\.25\)/ }, 'a share below one token')
  await shared.close()
})

t.test('a manual cost above this replica\'s share overdraws a full share; above the whole quota it never passes', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ replicas: 3 }), edge: { capacity: 3, refillPerSecond: 1 } })
  await app.ready()
  const policy = { capacity: 20, refillPerSecond: 0 }
  const heavy = await app.tollgate.consume('export', policy, 10)
  t.match(heavy, { allowed: true, cost: 10 })
  t.ok(Math.abs((heavy.buckets[0]?.tokens ?? 0) - (20 / 3 - 10)) < 1e-9, 'the whole cost was debited: the share, 20 / 3, is 3.33 in debt')
  t.match(await app.tollgate.consume('export', policy, 1), { allowed: false, retryAfterMs: Infinity }, 'and it never refills')
  t.match(await app.tollgate.consume('other', policy, 21), { allowed: false, retryAfterMs: Infinity, cost: 21 })
  await app.close()
})
