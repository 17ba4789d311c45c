import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import jwt from '@fastify/jwt'
import tollgate, { memoryStore, type AppOptions } from '../../lib/index.js'
import { SECRET, buildApp, count, manualClock, statuses } from '../helpers.js'

const tiers = {
  default: { capacity: 20, refillPerSecond: 5 },
  vip: { capacity: 200, refillPerSecond: 50 }
}

/** An app with the app layer only, `GET /` and `POST /export` (cost 10), and a token signer. */
async function tiersApp (app: Partial<AppOptions> = {}, routes: (app: FastifyInstance) => void = () => {}) {
  const built = await buildApp({ app: { tiers, ...app } })
  built.app.get('/', async () => 'ok')
  built.app.post('/export', { config: { rateLimit: { cost: 10 } } }, async () => 'exported')
  routes(built.app)
  await built.app.ready()
  const sign = (claims: object) => built.app.jwt.sign(claims)
  const auth = (token: string) => ({ authorization: `Bearer ${token}` })
  return { ...built, sign, auth }
}

t.test('default tier of 20 at 5/s: POST /export (cost 10) passes twice, then 429', async (t) => {
  const { app, sign, auth } = await tiersApp()
  const headers = auth(sign({ sub: 'alice' }))
  const codes = await statuses(app, 3, { method: 'POST', url: '/export', headers })
  t.same(codes, [200, 200, 429])
  const refused = await app.inject({ method: 'POST', url: '/export', headers })
  t.equal(refused.headers['retry-after'], '2', '10 tokens at 5/s')
  t.equal(refused.json().code, 'TOLLGATE_RATE_LIMITED')
  await app.close()
})

t.test('VIP users have their own, larger quota', async (t) => {
  const { app, sign, auth } = await tiersApp()
  const vip = auth(sign({ sub: 'victor', tier: 'vip' }))
  const codes = await statuses(app, 21, { method: 'POST', url: '/export', headers: vip })
  t.equal(count(codes, 200), 20, '200 tokens ÷ 10')
  t.equal(codes[20], 429)
  const alice = auth(sign({ sub: 'alice' }))
  t.equal((await app.inject({ method: 'POST', url: '/export', headers: alice })).statusCode, 200, 'another user is untouched')
  await app.close()
})

t.test('each user has a bucket of their own', async (t) => {
  const { app, sign, auth } = await tiersApp()
  const alice = auth(sign({ sub: 'alice' }))
  const bob = auth(sign({ sub: 'bob' }))
  t.equal(count(await statuses(app, 25, { url: '/', headers: alice }), 200), 20)
  t.equal(count(await statuses(app, 25, { url: '/', headers: bob }), 200), 20)
  await app.close()
})

t.test('a token signed with another secret gets no more than an anonymous client', async (t) => {
  const { app, auth } = await tiersApp({ tiers: { ...tiers, anonymous: { capacity: 10, refillPerSecond: 1 } } })
  const other = Fastify()
  await other.register(jwt, { secret: 'not-the-server-secret-at-all' })
  await other.ready()
  const forged = auth(other.jwt.sign({ sub: 'mallory', tier: 'vip' }))
  const codes = await statuses(app, 15, { url: '/', headers: forged, remoteAddress: '198.51.100.5' })
  t.equal(count(codes, 200), 10, 'the anonymous quota')
  t.equal(count(await statuses(app, 10, { url: '/', remoteAddress: '198.51.100.5' }), 200), 0, 'and it is the same bucket as no token from that IP')
  await app.close()
  await other.close()
})

t.test('without an anonymous tier, unauthenticated requests get the default tier, keyed by IP', async (t) => {
  const { app } = await tiersApp()
  t.equal(count(await statuses(app, 25, { url: '/', remoteAddress: '198.51.100.7' }), 200), 20)
  t.equal(count(await statuses(app, 25, { url: '/', remoteAddress: '198.51.100.8' }), 200), 20, 'another IP')
  await app.close()
})

t.test('unknown, hostile or missing tier claims mean default, never a higher tier', async (t) => {
  for (const tier of ['VIP', 'gold', '__proto__', 'constructor', 'toString', ['vip'], { vip: true }, 42, null]) {
    const { app, sign, auth } = await tiersApp()
    const headers = auth(sign({ sub: 'eve', tier }))
    t.equal(count(await statuses(app, 21, { url: '/', headers }), 200), 20, `tier ${JSON.stringify(tier)}`)
    await app.close()
  }
})

t.test('a verified token without sub is anonymous', async (t) => {
  const { app, sign, auth } = await tiersApp({ tiers: { ...tiers, anonymous: { capacity: 10, refillPerSecond: 1 } } })
  t.equal(count(await statuses(app, 12, { url: '/', headers: auth(sign({ tier: 'vip' })) }), 200), 10)
  await app.close()
})

t.test('user and anonymous key spaces never collide', async (t) => {
  const { app, sign, auth } = await tiersApp()
  // inject's client IP is 127.0.0.1; a user whose id is that string must not share its bucket.
  const user = auth(sign({ sub: '127.0.0.1' }))
  t.equal(count(await statuses(app, 20, { url: '/', headers: user }), 200), 20)
  t.equal(count(await statuses(app, 20, { url: '/' }), 200), 20, 'the anonymous bucket of 127.0.0.1 is untouched')
  await app.close()
})

t.test('identify(request) replaces the JWT claims', async (t) => {
  const { app } = await tiersApp({
    identify: (request) => {
      const id = request.headers['x-user']
      return typeof id === 'string' ? { id, tier: request.headers['x-tier'] as string } : undefined
    }
  })
  const vip = await statuses(app, 3, { method: 'POST', url: '/export', headers: { 'x-user': 'u1', 'x-tier': 'vip' } })
  t.same(vip, [200, 200, 200])
  const plain = await statuses(app, 3, { method: 'POST', url: '/export', headers: { 'x-user': 'u2' } })
  t.same(plain, [200, 200, 429])
  await app.close()
})

t.test('an identify that throws or returns junk means anonymous', async (t) => {
  const results: unknown[] = [new Error('boom'), { id: '' }, { id: Number.NaN }, { id: { nested: 1 } }, 'alice']
  let call = 0
  const { app } = await tiersApp({
    tiers: { ...tiers, anonymous: { capacity: 10, refillPerSecond: 0 } },
    identify: () => {
      const result = results[call++]
      if (result instanceof Error) throw result
      return result as undefined
    }
  })
  const codes = await statuses(app, 11)
  t.equal(count(codes, 200), 10, 'ten anonymous tokens shared by all of them')
  t.equal(codes[10], 429)
  await app.close()
})

t.test('numeric ids are users too', async (t) => {
  const { app } = await tiersApp({ identify: () => ({ id: 42 }) })
  t.equal(count(await statuses(app, 21), 200), 20)
  await app.close()
})

t.test('cost as a function of the request', async (t) => {
  const { app, sign, auth } = await tiersApp({}, (app) => {
    app.post('/rows', { config: { rateLimit: { cost: (request) => Number((request.query as { n?: string }).n ?? 1) } } }, async () => 'ok')
  })
  const headers = auth(sign({ sub: 'alice' }))
  t.same(await statuses(app, 3, { method: 'POST', url: '/rows?n=8', headers }), [200, 200, 429])
  t.equal((await app.inject({ method: 'POST', url: '/rows?n=4', headers })).statusCode, 200, '4 tokens were left')
  t.equal((await app.inject({ method: 'POST', url: '/rows?n=0', headers })).statusCode, 200, 'cost 0 passes on an empty bucket')
  await app.close()
})

t.test('a cost function that throws or returns an invalid cost fails with a coded 500 and takes nothing', async (t) => {
  const costs: unknown[] = [new Error('boom'), Number.NaN, -1, Infinity, '3', undefined, 21]
  let call = 0
  const { app } = await buildApp({ app: { tiers } })
  app.post('/bad', {
    config: {
      rateLimit: {
        cost: () => {
          const cost = costs[call++]
          if (cost instanceof Error) throw cost
          return cost as number
        }
      }
    }
  }, async () => 'ok')
  app.get('/', async () => 'ok')
  await app.ready()
  const headers = { authorization: `Bearer ${app.jwt.sign({ sub: 'alice' })}` }
  for (const cost of costs) {
    const response = await app.inject({ method: 'POST', url: '/bad', headers })
    t.equal(response.statusCode, 500, `cost ${String(cost)}`)
    t.equal(response.json().code, 'TOLLGATE_INVALID_COST')
  }
  t.equal(count(await statuses(app, 21, { url: '/', headers }), 200), 20, 'no token was taken by the failures')
  await app.close()
})

t.test('memoryStore({ replicas: 3 }): costs are checked against the whole quota; one above the share overdraws a full share', async (t) => {
  const clock = manualClock()
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ clock: clock.now, replicas: 3 }), app: { tiers: { default: { capacity: 20, refillPerSecond: 3 } }, identify: (request) => ({ id: String(request.headers['x-user']) }) } })
  app.post('/export', { config: { rateLimit: { cost: 10 } } }, async () => 'exported')
  app.post('/rows', { config: { rateLimit: { cost: () => 10 } } }, async () => 'rows')
  app.get('/', async () => 'ok')
  await app.ready()
  const send = (method: 'GET' | 'POST', url: string, user: string) => app.inject({ method, url, headers: { 'x-user': user } })
  const exported = await send('POST', '/export', 'alice')
  t.equal(exported.statusCode, 200, 'a numeric cost of 10 starts and passes (the share is 20 / 3)')
  t.equal(exported.headers['ratelimit'], '"app";r=0;t=10', 'it took all 10 tokens: 3.33 in debt, full again in 10 s at 1/s')
  const refused = await send('GET', '/', 'alice')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '5', 'a cost of 1 waits for the debt too: 4.33 s')
  const rows = await send('POST', '/rows', 'bob')
  t.equal(rows.statusCode, 200, 'a cost function returning 10 passes, not a 500')
  t.equal(rows.headers['ratelimit'], '"app";r=0;t=10')
  clock.advance(9900)
  const early = await send('POST', '/rows', 'bob')
  t.equal(early.statusCode, 429, '6.57 of 6.67 tokens back: not yet')
  t.equal(early.headers['retry-after'], '1')
  clock.advance(100)
  t.equal((await send('POST', '/rows', 'bob')).statusCode, 200, 'the share full again, after the debt is paid')
  t.equal((await send('GET', '/', 'carol')).headers['ratelimit'], '"app";r=5;t=1', 'a cost of 1 takes 1 from the share')
  await app.close()

  const tooDear = Fastify()
  await tooDear.register(tollgate, { store: memoryStore({ replicas: 3 }), app: { tiers: { default: { capacity: 20, refillPerSecond: 3 } } } })
  tooDear.post('/export', { config: { rateLimit: { cost: 21 } } }, async () => 'exported')
  await t.rejects(async () => { await tooDear.ready() }, { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /got `21` above tier `default`'s capacity 20/ }, 'a cost above the whole quota still fails startup')
  await tooDear.close()
})

t.test('route quota: its own bucket per user, consumed all or nothing with the main bucket', async (t) => {
  const { app, clock, sign, auth } = await tiersApp({}, (app) => {
    app.post('/report', {
      config: { rateLimit: { cost: 10, quota: { default: { capacity: 3, refillPerSecond: 0.05 }, vip: { capacity: 10, refillPerSecond: 1 } } } }
    }, async () => 'ok')
  })
  const headers = auth(sign({ sub: 'alice' }))
  const report = () => app.inject({ method: 'POST', url: '/report', headers })
  t.same([(await report()).statusCode, (await report()).statusCode, (await report()).statusCode], [200, 200, 429])
  clock.set(2000)
  const third = await report()
  t.equal(third.statusCode, 200, 'user bucket refilled to 10; route bucket had 1.1')
  t.equal(third.headers['ratelimit-policy'], '"app";q=20;w=4, "route";q=3;w=60')
  t.equal(third.headers['ratelimit'], '"app";r=0;t=4, "route";r=0;t=58')
  clock.set(4000)
  const fourth = await report()
  t.equal(fourth.statusCode, 429, 'route bucket holds 0.2')
  t.equal(fourth.headers['retry-after'], '16', '0.8 tokens at 0.05/s')
  t.equal((await app.inject({ method: 'POST', url: '/export', headers })).statusCode, 200, 'the refusal took nothing from the user bucket')
  const vip = auth(sign({ sub: 'victor', tier: 'vip' }))
  t.equal(count(await statuses(app, 12, { method: 'POST', url: '/report', headers: vip }), 200), 10, 'vip route quota')
  await app.close()
})

t.test('the app hook runs after auth in a route-level preHandler', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore(), app: { tiers: { default: { capacity: 1, refillPerSecond: 0 }, vip: { capacity: 3, refillPerSecond: 0 } } } })
  await app.register(jwt, { secret: SECRET })
  app.get('/', { preHandler: async (request) => { await request.jwtVerify() } }, async () => 'ok')
  await app.ready()
  const headers = { authorization: `Bearer ${app.jwt.sign({ sub: 'v', tier: 'vip' })}` }
  t.same(await statuses(app, 4, { url: '/', headers }), [200, 200, 200, 429], 'the vip tier: the user was verified before the limit')
  await app.close()
})

t.test('the app hook is appended to an array of route hooks, and HEAD routes are charged once', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore(), app: { tiers: { default: { capacity: 3, refillPerSecond: 0 }, vip: { capacity: 4, refillPerSecond: 0 } } } })
  await app.register(jwt, { secret: SECRET })
  const order: string[] = []
  app.get('/', {
    preHandler: [async () => { order.push('first') }, async (request) => { await request.jwtVerify(); order.push('auth') }]
  }, async () => 'ok')
  await app.ready()
  const headers = { authorization: `Bearer ${app.jwt.sign({ sub: 'v', tier: 'vip' })}` }
  const response = await app.inject({ url: '/', headers })
  t.equal(response.headers['ratelimit'], '"app";r=3', 'vip: limited after both route hooks ran')
  t.same(order, ['first', 'auth'])
  t.equal((await app.inject({ method: 'HEAD', url: '/', headers })).headers['ratelimit'], '"app";r=2', 'the automatic HEAD route takes one token')
  await app.close()
})

t.test("HEAD shares the GET route's quota: the handler runs no more often than the quota allows", async (t) => {
  let runs = 0
  const { app, sign, auth } = await tiersApp({}, (app) => {
    app.get('/report', { config: { rateLimit: { quota: { default: { capacity: 2, refillPerSecond: 0 } } } } }, async () => { runs++; return 'report' })
    app.route({ method: ['GET', 'HEAD', 'POST'], url: '/items', config: { rateLimit: { quota: { default: { capacity: 2, refillPerSecond: 0 } } } }, handler: async () => 'items' })
  })
  const headers = auth(sign({ sub: 'alice' }))
  const codes = async (method: 'GET' | 'HEAD' | 'POST', url: string, n: number) => statuses(app, n, { method, url, headers })
  t.same([...await codes('GET', '/report', 2), ...await codes('HEAD', '/report', 2)], [200, 200, 429, 429], 'GET 200, 200, then HEAD 429')
  t.equal(runs, 2, 'the handler ran twice')
  const bob = auth(sign({ sub: 'bob' }))
  t.same([(await app.inject({ method: 'HEAD', url: '/report', headers: bob })).statusCode, ...await statuses(app, 2, { url: '/report', headers: bob })], [200, 200, 429], 'HEAD first, then GET')
  t.same([...await codes('HEAD', '/items', 1), ...await codes('GET', '/items', 1), ...await codes('POST', '/items', 1)], [200, 200, 429], 'one route with HEAD among its methods: one quota')
  await app.close()
})

t.test("HEAD shares the quota of the route serving GET: several methods, a prefixed '/', versions", async (t) => {
  const quota = { default: { capacity: 2, refillPerSecond: 0 } }
  const runs = { report: 0, api: 0, v1: 0, v2: 0 }
  const { app, sign, auth } = await tiersApp({}, (app) => {
    app.route({ method: ['GET', 'POST'], url: '/report', config: { rateLimit: { quota } }, handler: async () => { runs.report++; return 'report' } })
    void app.register(async (api) => {
      api.get('/', { config: { rateLimit: { quota } } }, async () => { runs.api++; return 'api' })
    }, { prefix: '/api' })
    for (const version of ['1.0.0', '2.0.0'] as const) {
      const run: 'v1' | 'v2' = version === '1.0.0' ? 'v1' : 'v2'
      app.route({ method: 'GET', url: '/versioned', constraints: { version }, config: { rateLimit: { quota } }, handler: async () => { runs[run]++; return run } })
    }
  })
  const alice = auth(sign({ sub: 'alice' }))
  const sequence = async (requests: Array<[string, string, Record<string, string>?]>, headers = alice) => {
    const codes: string[] = []
    for (const [method, url, extra] of requests) codes.push(`${method} ${(await app.inject({ method: method as 'GET', url, headers: { ...headers, ...extra } })).statusCode}`)
    return codes.join(', ')
  }
  t.equal(await sequence([['GET', '/report'], ['GET', '/report'], ['GET', '/report'], ['HEAD', '/report'], ['HEAD', '/report']]),
    'GET 200, GET 200, GET 429, HEAD 429, HEAD 429', "['GET', 'POST']: HEAD spends the same quota")
  t.equal(await sequence([['HEAD', '/report'], ['POST', '/report'], ['GET', '/report']], auth(sign({ sub: 'bob' }))),
    'HEAD 200, POST 200, GET 429', 'HEAD first, and POST on the same route')
  t.equal(runs.report, 4, 'the handler ran twice per user, HEAD included: the quota of 2')
  t.equal(await sequence([['GET', '/api'], ['HEAD', '/api/'], ['HEAD', '/api/'], ['HEAD', '/api'], ['GET', '/api/']]),
    'GET 200, HEAD 200, HEAD 429, HEAD 429, GET 429', "a prefixed '/' is one route at /api and /api/, HEAD too")
  t.equal(runs.api, 2)
  const v2 = { 'accept-version': '2.0.0' }
  t.equal(await sequence([['GET', '/versioned', v2], ['GET', '/versioned', v2], ['HEAD', '/versioned', v2], ['GET', '/versioned', { 'accept-version': '1.0.0' }]]),
    'GET 200, GET 200, HEAD 429, GET 200', 'each version its own quota; HEAD spends its version\'s')
  t.same([runs.v1, runs.v2], [1, 2])
  await app.close()
})

t.test('an explicit HEAD route spends the quota of GET at its URL, under its own config', async (t) => {
  const quota = { default: { capacity: 2, refillPerSecond: 0 } }
  const { app, sign, auth } = await tiersApp({}, (app) => {
    app.head('/file', { config: { rateLimit: { quota } } }, async (_request, reply) => reply.header('content-length', 3).send())
    app.get('/file', { config: { rateLimit: { quota } } }, async () => 'abc')
    app.head('/free', { config: { rateLimit: false } }, async (_request, reply) => reply.send())
    app.get('/free', { config: { rateLimit: { quota } } }, async () => 'free')
  })
  const headers = auth(sign({ sub: 'alice' }))
  t.same([
    (await app.inject({ method: 'HEAD', url: '/file', headers })).statusCode,
    ...await statuses(app, 2, { url: '/file', headers })
  ], [200, 200, 429], 'HEAD then GET: one quota of 2')
  t.same(await statuses(app, 3, { method: 'HEAD', url: '/free', headers }), [200, 200, 200], 'an exempt HEAD route is exempt')
  t.same(await statuses(app, 3, { url: '/free', headers }), [200, 200, 429], 'its GET keeps its quota')
  await app.close()
})

t.test('routes in encapsulated plugins get the app layer too', async (t) => {
  const { app } = await buildApp({ app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } } } })
  await app.register(async (child) => {
    child.get('/inner', async () => 'ok')
  }, { prefix: '/api' })
  t.same(await statuses(app, 2, { url: '/api/inner' }), [200, 429])
  await app.close()
})

t.test('hook: preParsing refuses before the body is parsed; preHandler after', async (t) => {
  const bad = { method: 'POST' as const, url: '/', headers: { 'content-type': 'application/json' }, payload: '{not json' }
  for (const [hook, expected] of [['preParsing', [400, 429]], ['preValidation', [400, 400]], ['preHandler', [400, 400]]] as const) {
    const { app } = await buildApp({ app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } }, hook } })
    app.post('/', async () => 'ok')
    t.same(await statuses(app, 2, bad), expected, hook)
    await app.close()
  }
  const { app } = await buildApp({ app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } }, hook: 'preParsing' } })
  app.post('/', async (request) => request.body)
  app.get('/get', async () => 'ok')
  const ok = await app.inject({ method: 'POST', url: '/', payload: { a: 1 } })
  t.same(ok.json(), { a: 1 }, 'preParsing passes the payload on')
  t.same(await statuses(app, 2, { url: '/get', remoteAddress: '198.51.100.20' }), [200, 429], 'bodiless requests are limited in preParsing too')
  await app.close()
})

t.test('preValidation runs before schema validation', async (t) => {
  const { app } = await buildApp({ app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } }, hook: 'preValidation' } })
  app.post('/', { schema: { body: { type: 'object', required: ['a'] } } }, async () => 'ok')
  const invalid = { method: 'POST' as const, url: '/', payload: { b: 1 } }
  t.same(await statuses(app, 2, invalid), [400, 429], 'the second is refused before validation')
  await app.close()
})

t.test('rateLimit: false exempts a route from both layers', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 }, app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } } } })
  app.get('/health', { config: { rateLimit: false } }, async () => 'ok')
  app.get('/', async () => 'ok')
  t.same(await statuses(app, 3, { url: '/health' }), [200, 200, 200])
  t.same(await statuses(app, 2), [200, 429])
  await app.close()
})

t.test('both layers: the edge refuses first, before the app layer takes anything', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 2, refillPerSecond: 0 }, app: { tiers: { default: { capacity: 5, refillPerSecond: 0 } } } })
  app.get('/', async () => 'ok')
  t.same(await statuses(app, 3), [200, 200, 429])
  const response = await app.inject('/')
  t.equal(response.headers['ratelimit'], '"edge";r=0', 'only the edge applied')
  await app.close()
})
