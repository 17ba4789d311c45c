/**
 * A route's own buckets: the identity a route's edge bucket is kept for
 * (`rateLimit.edge.key`), and `rateLimit.replace` (the route's buckets instead of
 * the layers', as a route limit of @fastify/rate-limit replaces the global one).
 */
import t from 'tap'
import tollgate, { memoryStore, per } from '../../lib/index.js'
import Fastify from 'fastify'
import { buildApp, logSink } from '../helpers.js'

const login = { capacity: 5, refillPerSecond: 5 / 60 }
const apiKeyEdge = { capacity: 100, refillPerSecond: 100 / 60, key: (request: { headers: Record<string, unknown> }) => request.headers['x-api-key'] }

t.test('a login guard kept by IP: a new x-api-key per attempt buys nothing', async (t) => {
  const { app } = await buildApp({ edge: apiKeyEdge })
  app.post('/login', { config: { rateLimit: { edge: { ...login, key: 'ip' } } } }, async () => 'ok')
  const codes: number[] = []
  for (let i = 0; i < 12; i++) codes.push((await app.inject({ method: 'POST', url: '/login', headers: { 'x-api-key': `k${i}` } })).statusCode)
  t.same(codes, [200, 200, 200, 200, 200, 429, 429, 429, 429, 429, 429, 429])
  t.equal((await app.inject({ method: 'POST', url: '/login', remoteAddress: '198.51.100.9', headers: { 'x-api-key': 'k0' } })).statusCode, 200, 'another address has its own guard')
  await app.close()
})

t.test('kept like the edge (the default), the same guard is per API key', async (t) => {
  const { app } = await buildApp({ edge: apiKeyEdge })
  app.post('/login', { config: { rateLimit: { edge: login } } }, async () => 'ok')
  const codes: number[] = []
  for (let i = 0; i < 7; i++) codes.push((await app.inject({ method: 'POST', url: '/login', headers: { 'x-api-key': `k${i}` } })).statusCode)
  t.same(codes, [200, 200, 200, 200, 200, 200, 200], 'each key its own guard: what the key option is for')
  await app.close()
})

t.test('a route bucket kept apart is taken first, and given back when the client bucket refuses', async (t) => {
  const { app, store } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0, key: apiKeyEdge.key } })
  app.post('/login', { config: { rateLimit: { edge: { capacity: 3, refillPerSecond: 0, key: 'ip' } } } }, async () => 'ok')
  const send = async (key: string) => app.inject({ method: 'POST', url: '/login', headers: { 'x-api-key': key } })
  const first = await send('a')
  t.equal(first.statusCode, 200)
  t.equal(first.headers.ratelimit, '"edge-route";r=2, "edge";r=0', "the route's member, then the client's")
  t.equal(first.headers['ratelimit-policy'], '"edge-route";q=3, "edge";q=1')
  const refused = await send('a')
  t.equal(refused.statusCode, 429, "the client's bucket refuses")
  t.equal((store.peek({ key: '{ip:127.0.0.1}:edge-route:POST /login', policy: { capacity: 3, refillPerSecond: 0 }, cost: 1 })).tokens, 2, 'the route token it took is given back')
  t.same([(await send('b')).statusCode, (await send('c')).statusCode, (await send('d')).statusCode], [200, 200, 429])
  await app.close()
})

t.test('a route key function (async too) keys the route bucket by its value, digested', async (t) => {
  const { app, store } = await buildApp({ edge: { global: false } })
  const key = async (request: { headers: Record<string, unknown> }) => request.headers['x-account']
  app.post('/reset', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 0, key } } } }, async () => 'ok')
  const send = async (account?: string) => (await app.inject({ method: 'POST', url: '/reset', headers: account === undefined ? {} : { 'x-account': account } })).statusCode
  t.same([await send('alice'), await send('alice'), await send('bob'), await send(), await send()], [200, 429, 200, 200, 429], 'no value: the client IP')
  const keys = [...(store as unknown as { slots: Map<string, number> }).slots.keys()]
  t.equal(keys.filter((k) => k.startsWith('{key:')).length, 2, 'a bucket per account')
  t.notOk(keys.some((k) => k.includes('alice')), 'the value is never stored in clear')
  await app.close()
})

t.test("penalties: a route's own penalty is kept by the route's key; the layer's by the client's", async (t) => {
  const { app } = await buildApp({ edge: { ...apiKeyEdge, penalty: { after: 100, withinSeconds: 60, seconds: 60 } } })
  app.post('/login', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 0, key: 'ip' }, penalty: { after: 2, withinSeconds: 60, seconds: 600, status: 403 } } } }, async () => 'ok')
  app.get('/', async () => 'ok')
  const send = async (key: string) => (await app.inject({ method: 'POST', url: '/login', headers: { 'x-api-key': key } })).statusCode
  t.same([await send('a'), await send('b'), await send('c'), await send('d')], [200, 429, 403, 403], 'the second refusal from this IP starts the penalty, whatever the key')
  t.equal((await app.inject({ url: '/', headers: { 'x-api-key': 'a' } })).statusCode, 200, 'the route penalty is the route\'s alone')
  await app.close()
})

t.test('replace: a route looser than the edge gets its own limit, not the edge\'s', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 2, refillPerSecond: 0 } })
  app.get('/', async () => 'ok')
  app.get('/search', { config: { rateLimit: { edge: { capacity: 5, refillPerSecond: 0 }, replace: true } } }, async () => 'ok')
  const codes: number[] = []
  for (let i = 0; i < 6; i++) codes.push((await app.inject('/search')).statusCode)
  t.same(codes, [200, 200, 200, 200, 200, 429])
  const one = await app.inject('/')
  t.equal(one.statusCode, 200, "the route's requests did not spend the client's edge bucket")
  t.equal(one.headers.ratelimit, '"edge";r=1')
  t.equal((await app.inject('/search')).headers.ratelimit, '"edge-route";r=0', "only the route's member")
  await app.close()
})

t.test('replace with a quota: a VIP tier on a route is not capped by the edge', async (t) => {
  const { lines, logger } = logSink()
  const { app } = await buildApp({
    edge: { capacity: 100, refillPerSecond: 0 },
    app: { tiers: { default: { capacity: 100, refillPerSecond: 0 }, vip: { capacity: 100, refillPerSecond: 0 } }, identify: (request) => ({ id: String(request.headers['x-user']), tier: String(request.headers['x-tier']) }) }
  }, { logger })
  app.get('/reports/:id', { config: { rateLimit: { replace: true, cost: 2, quota: { default: per(100, 'minute'), vip: per(300, 'minute') } } } }, async () => 'ok')
  await app.ready()
  let passed = 0
  for (let i = 0; i < 160; i++) if ((await app.inject({ url: '/reports/1', headers: { 'x-user': 'v', 'x-tier': 'vip' } })).statusCode === 200) passed++
  t.equal(passed, 150, 'VIP: 300 tokens at a cost of 2, beyond the edge\'s 100, without the tier\'s 100')
  const reply = await app.inject({ url: '/reports/1', headers: { 'x-user': 'd', 'x-tier': 'none' } })
  t.equal(reply.headers.ratelimit, '"route";r=98;t=2', 'the default tier: the route quota alone, charged the cost')
  t.equal(lines.filter((line) => line.code === 'TOLLGATE_TIER_ABOVE_EDGE').length, 0, 'nothing to warn: the edge leaves the route alone')
  await app.close()
})

t.test('replace: a layer without a bucket of the route\'s own leaves the route alone', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 }, app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } }, identify: () => ({ id: 'u' }) } })
  app.get('/edge-only', { config: { rateLimit: { replace: true, edge: { capacity: 3, refillPerSecond: 0 } } } }, async () => 'ok')
  const codes: number[] = []
  for (let i = 0; i < 4; i++) codes.push((await app.inject('/edge-only')).statusCode)
  t.same(codes, [200, 200, 200, 429], 'the app layer (1 token) is not taken here')
  await app.close()
})

t.test('replace under a route key: the route bucket alone, with the layer\'s penalty kept by that key', async (t) => {
  const { app } = await buildApp({ edge: { ...apiKeyEdge, capacity: 1, penalty: { after: 1, withinSeconds: 60, seconds: 60 } } })
  app.post('/login', { config: { rateLimit: { replace: true, edge: { capacity: 2, refillPerSecond: 0, key: 'ip' } } } }, async () => 'ok')
  const send = async (key: string) => (await app.inject({ method: 'POST', url: '/login', headers: { 'x-api-key': key } })).statusCode
  t.same([await send('a'), await send('a'), await send('b')], [200, 200, 429], 'two per IP; the client\'s bucket of 1 is not taken')
  await app.close()
})

t.test('TOLLGATE_TIER_ABOVE_EDGE warns once when a tier is capped by the edge, not when replace or edge: false', async (t) => {
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  await app.register(tollgate, { edge: { capacity: 10, refillPerSecond: 1 }, app: { tiers: { default: { capacity: 5, refillPerSecond: 0.5 }, pro: { capacity: 50, refillPerSecond: 0.5 } } } })
  app.get('/free', { config: { rateLimit: { edge: false } } }, async () => 'ok')
  app.get('/own', { config: { rateLimit: { replace: true, quota: { default: per(5, 'minute'), pro: per(50, 'minute') } } } }, async () => 'ok')
  app.get('/costly', { config: { rateLimit: { cost: 10 } } }, async () => 'ok')
  t.equal(lines.filter((line) => line.code === 'TOLLGATE_TIER_ABOVE_EDGE').length, 0, 'no route where both apply and the tier exceeds the edge')
  app.get('/', async () => 'ok')
  app.get('/other', async () => 'ok')
  const warned = lines.filter((line) => line.code === 'TOLLGATE_TIER_ABOVE_EDGE')
  t.equal(warned.length, 1)
  t.match(warned[0], { tier: 'pro', route: 'GET /', tierBurst: 50, edgeBurst: 10 })
  await app.close()
})

t.test("giving back a route's token: a store without refund keeps it spent; a refund that throws is logged", async (t) => {
  for (const mode of ['none', 'throws', 'rejects'] as const) {
    const store = memoryStore()
    const { lines, logger } = logSink()
    const app = Fastify({ logger })
    const wrapped = {
      consume: store.consume.bind(store),
      close: store.close.bind(store),
      ...(mode === 'throws' ? { refund: () => { throw new Error('refund down') } } : {}),
      ...(mode === 'rejects' ? { refund: async () => { throw new Error('refund down') } } : {})
    }
    await app.register(tollgate, { store: wrapped, edge: { capacity: 1, refillPerSecond: 0, key: apiKeyEdge.key } })
    app.post('/login', { config: { rateLimit: { edge: { capacity: 3, refillPerSecond: 0, key: 'ip' } } } }, async () => 'ok')
    const send = async (key: string) => (await app.inject({ method: 'POST', url: '/login', headers: { 'x-api-key': key } })).statusCode
    t.same([await send('a'), await send('a'), await send('b'), await send('c')], [200, 429, 200, 429], `${mode}: the refused request's route token stays spent`)
    await new Promise((resolve) => setImmediate(resolve))
    t.equal(lines.filter((line) => line.msg.includes('giving back a token taken for a refused request failed')).length, mode === 'none' ? 0 : 1)
    await app.close()
  }
})

t.test("key: 'ip' under an edge without edge.key is the client's own key: one step, all or nothing", async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } })
  app.post('/login', { config: { rateLimit: { edge: { capacity: 3, refillPerSecond: 0, key: 'ip' } } } }, async () => 'ok')
  const first = await app.inject({ method: 'POST', url: '/login' })
  t.equal(first.headers.ratelimit, '"edge";r=0, "edge-route";r=2', 'one step: the client\'s member first')
  t.equal((await app.inject({ method: 'POST', url: '/login' })).statusCode, 429)
  await app.close()
})

t.test("penalty: false on a route kept apart: neither step has a penalty", async (t) => {
  const { app } = await buildApp({ edge: { ...apiKeyEdge, capacity: 1, penalty: { after: 1, withinSeconds: 60, seconds: 600, status: 403 } } })
  app.post('/login', { config: { rateLimit: { edge: { capacity: 5, refillPerSecond: 0, key: 'ip' }, penalty: false } } }, async () => 'ok')
  const send = async () => (await app.inject({ method: 'POST', url: '/login', headers: { 'x-api-key': 'a' } })).statusCode
  t.same([await send(), await send(), await send()], [200, 429, 429], 'refused by the client bucket, never penalized (403) here')
  await app.close()
})
