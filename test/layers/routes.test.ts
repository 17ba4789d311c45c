import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import tollgate, { memoryStore, redisStore, type Store, type TollgateOptions } from '../../lib/index.js'
import { buildApp, manualClock, readyWith, statuses } from '../helpers.js'
import { PATIENT_TIMEOUT_MS, requireRedis, startRedis } from '../redis-server.js'

const login = { capacity: 5, refillPerSecond: 5 / 60 }

/** An app with `options` on `store`, POST /login with its own edge bucket, and GET /. */
async function loginApp (store: Store, options: Omit<TollgateOptions, 'store'>): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(tollgate, { store, ...options })
  app.post('/login', { config: { rateLimit: { edge: login } } }, async () => 'ok')
  app.get('/', async () => 'ok')
  return app
}

const stores: Array<[string, (t: Test, clock: ReturnType<typeof manualClock>) => Promise<Store>]> = [
  ['memory', async (_t, clock) => memoryStore({ clock: clock.now })]
]
if (requireRedis(t)) {
  stores.push(['redis', async (t, clock) => redisStore({ client: (await startRedis(t)).client(t), clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS })])
}

for (const [name, makeStore] of stores) {
  t.test(`${name}: POST /login at 5 a minute per IP, before the body is read, with the edge's own bucket`, async (t) => {
    const clock = manualClock()
    const app = await loginApp(await makeStore(t, clock), { edge: { capacity: 100, refillPerSecond: 10 } })
    const parsed: string[] = []
    app.addHook('preParsing', async (request) => { parsed.push(request.url) })
    const post = (ip: string) => app.inject({ method: 'POST', url: '/login', remoteAddress: ip, payload: { user: 'a', password: 'b' } })
    const codes = []
    for (let i = 0; i < 6; i++) codes.push((await post('198.51.100.1')).statusCode)
    t.same(codes, [200, 200, 200, 200, 200, 429])
    t.equal(parsed.length, 5, 'the refused request was never parsed')
    const refused = await post('198.51.100.1')
    t.equal(refused.headers['ratelimit-policy'], '"edge";q=100;w=10, "edge-route";q=5;w=60')
    t.equal(refused.headers['ratelimit'], '"edge";r=95;t=1, "edge-route";r=0;t=60', 'all or nothing: the refusals took no edge token')
    t.equal(refused.headers['retry-after'], '12', 'one token every 12 s')
    t.equal((await post('198.51.100.2')).statusCode, 200, 'another client has its own')
    t.same(await statuses(app, 3, { url: '/', remoteAddress: '198.51.100.1' }), [200, 200, 200], 'other routes only take from the edge bucket')
    clock.advance(12_000)
    t.equal((await post('198.51.100.1')).statusCode, 200, 'a token back after 12 s')
    await app.close()
  })

  t.test(`${name}: edge.global false: only routes with their own edge bucket are limited`, async (t) => {
    const clock = manualClock()
    const app = await loginApp(await makeStore(t, clock), { edge: { global: false } })
    t.same(await statuses(app, 6, { method: 'POST', url: '/login' }), [200, 200, 200, 200, 200, 429])
    const open = await app.inject('/')
    t.equal(open.statusCode, 200)
    t.equal(open.headers['ratelimit'], undefined, 'a route without an edge bucket is not touched')
    t.equal((await app.inject('/nope')).headers['ratelimit'], undefined, 'nor a 404')
    const refused = await app.inject({ method: 'POST', url: '/login' })
    t.equal(refused.headers['ratelimit-policy'], '"edge-route";q=5;w=60')
    await app.close()
  })
}

t.test('an edge route bucket is keyed like the edge: edge.key, and the client bucket shares its hash tag', async (t) => {
  const keys: string[][] = []
  const { app } = await buildApp({
    edge: { capacity: 100, refillPerSecond: 1, key: (request) => request.headers['x-api-key'] },
    onLimit: (_request, decision) => { keys.push(decision.buckets.map((bucket) => bucket.key)) }
  })
  app.post('/login', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 0 } } } }, async () => 'ok')
  const post = (key: string) => app.inject({ method: 'POST', url: '/login', headers: { 'x-api-key': key } })
  t.same([(await post('k1')).statusCode, (await post('k1')).statusCode, (await post('k2')).statusCode], [200, 429, 200])
  const [client, route] = keys[0] as [string, string]
  t.match(client, /^\{key:[\w-]{43}\}:edge$/)
  t.equal(route, `${client}-route:POST /login`)
  await app.close()
})

t.test('per-layer exemption: edge: false, app: false, and rateLimit: false', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 100, refillPerSecond: 1 }, app: { tiers: { default: { capacity: 10, refillPerSecond: 1 } } } })
  app.post('/webhook', { config: { rateLimit: { app: false } } }, async () => 'ok')
  app.get('/public', { config: { rateLimit: { edge: false } } }, async () => 'ok')
  app.get('/health', { config: { rateLimit: false } }, async () => 'ok')
  t.equal((await app.inject({ method: 'POST', url: '/webhook' })).headers['ratelimit-policy'], '"edge";q=100;w=100', 'only the edge')
  t.equal((await app.inject('/public')).headers['ratelimit-policy'], '"app";q=10;w=10', 'only the app layer')
  t.equal((await app.inject('/health')).headers['ratelimit-policy'], undefined, 'neither')
  await app.close()
})

t.test('app.global false: the app layer only for routes whose config names it', async (t) => {
  const { app } = await buildApp({ app: { global: false, tiers: { default: { capacity: 2, refillPerSecond: 0 } } } })
  app.get('/open', async () => 'ok')
  app.get('/limited', { config: { rateLimit: { app: true } } }, async () => 'ok')
  app.post('/export', { config: { rateLimit: { cost: 2 } } }, async () => 'ok')
  app.get('/quota', { config: { rateLimit: { quota: { default: { capacity: 1, refillPerSecond: 0 } } } } }, async () => 'ok')
  t.same(await statuses(app, 3, { url: '/open' }), [200, 200, 200])
  t.equal((await app.inject('/open')).headers['ratelimit'], undefined)
  t.same(await statuses(app, 3, { url: '/limited' }), [200, 200, 429])
  await app.close()
  const second = await buildApp({ app: { global: false, tiers: { default: { capacity: 2, refillPerSecond: 0 } } } })
  second.app.post('/export', { config: { rateLimit: { cost: 2 } } }, async () => 'ok')
  second.app.get('/quota', { config: { rateLimit: { quota: { default: { capacity: 1, refillPerSecond: 0 } } } } }, async () => 'ok')
  t.same(await statuses(second.app, 2, { method: 'POST', url: '/export' }), [200, 429], 'a cost names the app layer')
  t.equal((await second.app.inject('/quota')).statusCode, 429, 'a quota does too (the user bucket is spent)')
  await second.app.close()
})

t.test('a route declared before the plugin keeps its per-layer settings, checked at its first request', async (t) => {
  const app = Fastify()
  app.post('/login', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 0 }, app: false } } }, async () => 'ok')
  app.get('/health', { config: { rateLimit: { edge: false, app: false } } }, async () => 'ok')
  await app.register(tollgate, { edge: { capacity: 100, refillPerSecond: 1 }, app: { tiers: { default: { capacity: 100, refillPerSecond: 1 } } }, warnings: false })
  const first = await app.inject({ method: 'POST', url: '/login' })
  t.equal(first.headers['ratelimit-policy'], '"edge";q=100;w=100, "edge-route";q=1')
  t.equal((await app.inject({ method: 'POST', url: '/login' })).statusCode, 429)
  t.equal((await app.inject('/health')).headers['ratelimit'], undefined)
  await app.close()
})

t.test('a route declared before the plugin with a bad config fails its requests at the edge with the coded 500', async (t) => {
  const app = Fastify()
  app.get('/bad', { config: { rateLimit: { edge: { capacity: 0, refillPerSecond: 1 } } } }, async () => 'ok')
  await app.register(tollgate, { edge: { capacity: 100, refillPerSecond: 1 }, warnings: false })
  const response = await app.inject('/bad')
  t.equal(response.statusCode, 500)
  t.equal(response.json().code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
  await app.close()
})

t.test('route configs of the new fields are checked at startup', async (t) => {
  const both = { edge: { capacity: 10, refillPerSecond: 1 }, app: { tiers: { default: { capacity: 10, refillPerSecond: 1 } } } }
  const cases: Array<[string, unknown, unknown, RegExp]> = [
    ['an edge bucket without the edge layer', { app: both.app }, { edge: { capacity: 5, refillPerSecond: 1 } }, /`rateLimit\.edge` needs the edge layer/],
    ['edge: true', both, { edge: true }, /Expected `rateLimit\.edge` to be false or a policy/],
    ['a bad edge policy', both, { edge: { capacity: 0, refillPerSecond: 1 } }, /Expected `rateLimit\.edge\.capacity` to be a finite number ≥ 1, got `0`/],
    ['app: "yes"', both, { app: 'yes' }, /Expected `rateLimit\.app` to be a boolean, got `"yes"` \(string\)/],
    ['app: false with a cost', both, { app: false, cost: 2 }, /which `rateLimit\.app: false` leaves out/],
    ['app: true without the app layer', { edge: both.edge }, { app: true }, /need the app layer/]
  ]
  for (const [name, options, rateLimit, message] of cases) {
    await t.rejects(readyWith(options, (app) => { app.get('/', { config: { rateLimit: rateLimit as false } }, async () => 'ok') }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message }, name)
  }
  const optionCases: Array<[string, unknown, RegExp]> = [
    ['edge.global: "no"', { edge: { global: 'no' } }, /Expected `edge\.global` to be a boolean, got `"no"`/],
    ['edge.global false with a capacity', { edge: { global: false, capacity: 5 } }, /Unknown option `edge\.capacity`.*each route gives its own `rateLimit\.edge`/],
    ['app.global: 1', { app: { tiers: both.app.tiers, global: 1 } }, /Expected `app\.global` to be a boolean, got `1` \(number\)/]
  ]
  for (const [name, options, message] of optionCases) {
    await t.rejects(readyWith(options), { code: 'TOLLGATE_INVALID_OPTION', message }, name)
  }
})
