/**
 * A penalty for clients that keep pushing: after `after` refusals within
 * `withinSeconds`, refused for `seconds` (429 with that Retry-After, or 403), on
 * every replica, and on Redis without a script call per request.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import tollgate, { memoryStore, redisStore, type LimitDecision, type Store, type TollgateOptions } from '../../lib/index.js'
import { manualClock, readyWith, statuses } from '../helpers.js'
import { commandCalls, PATIENT_TIMEOUT_MS, requireRedis, startRedis } from '../redis-server.js'

const penalty = { after: 3, withinSeconds: 60, seconds: 300 }

async function build (store: Store, options: Omit<TollgateOptions, 'store'>, limits: LimitDecision[] = []): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(tollgate, { store, ...options, onLimit: (_request, decision) => { limits.push(decision) } })
  app.get('/', async () => 'ok')
  app.post('/login', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 1 / 60 }, penalty: { after: 2, withinSeconds: 60, seconds: 900 } } } }, async () => 'ok')
  app.get('/free', { config: { rateLimit: { penalty: false } } }, async () => 'ok')
  await app.ready()
  return app
}

const stores: Array<[string, (t: Test, now: () => number) => Promise<Store>]> = [
  ['memory', async (_t, now) => memoryStore({ clock: now })]
]
if (requireRedis(t)) {
  stores.push(['redis', async (t, now) => redisStore({ client: (await startRedis(t)).client(t), clock: now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS })])
}

for (const [name, makeStore] of stores) {
  t.test(`${name}: the third refusal within a minute shuts the client out for 300 s`, async (t) => {
    const clock = manualClock(1_000_000)
    const limits: LimitDecision[] = []
    const app = await build(await makeStore(t, clock.now), { edge: { capacity: 5, refillPerSecond: 1, penalty } }, limits)
    t.same(await statuses(app, 5), [200, 200, 200, 200, 200])
    const refusals = []
    for (let i = 0; i < 4; i++) refusals.push(await app.inject('/'))
    t.same(refusals.map((r) => r.headers['retry-after']), ['1', '1', '300', '300'], 'two refusals as usual, then the penalty')
    t.same(limits.map((l) => l.penalty?.state), [undefined, undefined, 'started', 'in force'])
    t.same(limits[2]?.penalty, { state: 'started', seconds: 300 })
    t.equal(refusals[3]?.json().code, 'TOLLGATE_RATE_LIMITED')
    clock.advance(10_000) // the bucket is full again, but the penalty holds
    const during = await app.inject('/')
    t.equal(during.statusCode, 429)
    t.equal(during.headers['retry-after'], '290')
    t.match(during.headers.ratelimit, /^"edge";r=5/, 'the quota itself is full')
    clock.advance(289_000)
    t.equal((await app.inject('/')).statusCode, 429, 'a second before its end')
    clock.advance(1000)
    t.same(await statuses(app, 6), [200, 200, 200, 200, 200, 429], 'over: the quota as before')
    t.equal(limits.at(-1)?.penalty, undefined, 'and the count starts again')
    t.equal((await app.inject('/free')).statusCode, 429, 'a route without penalty is still limited')
    await app.close()
  })

  t.test(`${name}: refusals spread beyond the window start no penalty`, async (t) => {
    const clock = manualClock(1_000_000)
    const app = await build(await makeStore(t, clock.now), { edge: { capacity: 1, refillPerSecond: 1 / 40, penalty: { after: 3, withinSeconds: 60, seconds: 300 } } })
    const codes = []
    for (let i = 0; i < 8; i++) {
      codes.push((await app.inject('/')).statusCode)
      clock.advance(25_000) // a refusal every 40 s or so: the window forgets them
    }
    t.same(codes, [200, 429, 200, 429, 200, 429, 200, 429])
    t.not((await app.inject('/')).headers['retry-after'], '300')
    await app.close()
  })

  t.test(`${name}: a route's own penalty, as 403, keyed per route; penalty: false exempts a route`, async (t) => {
    const clock = manualClock(1_000_000)
    const app = await build(await makeStore(t, clock.now), { edge: { capacity: 100, refillPerSecond: 10, penalty: { ...penalty, status: 403 } } })
    const login = async () => app.inject({ method: 'POST', url: '/login' })
    t.same([(await login()).statusCode, (await login()).statusCode, (await login()).statusCode], [200, 200, 429])
    const started = await login()
    t.equal(started.statusCode, 429, 'the route\'s penalty (after 2) says 429')
    t.equal(started.headers['retry-after'], '900')
    t.equal((await app.inject('/')).statusCode, 200, 'the rest of the app is open: the penalty is the route\'s')
    clock.advance(1000)
    t.equal((await login()).statusCode, 429)
    await app.close()
  })

  t.test(`${name}: app.penalty with status 403`, async (t) => {
    const clock = manualClock(1_000_000)
    const app = await build(await makeStore(t, clock.now), {
      edge: { global: false },
      app: { tiers: { default: { capacity: 2, refillPerSecond: 1 } }, identify: () => ({ id: 'u1' }), penalty: { after: 1, withinSeconds: 10, seconds: 60, status: 403 } }
    })
    t.same(await statuses(app, 2), [200, 200])
    const started = await app.inject('/')
    t.equal(started.statusCode, 403)
    t.match(started.json(), { statusCode: 403, code: 'TOLLGATE_PENALIZED' })
    t.equal(started.headers['retry-after'], '60')
    clock.advance(5000)
    const during = await app.inject('/')
    t.equal(during.statusCode, 403)
    t.equal(during.headers['retry-after'], '55')
    t.equal((await app.inject('/free')).statusCode, 200, 'penalty: false on the route')
    clock.advance(55_000)
    t.equal((await app.inject('/')).statusCode, 200)
    // POST /login: its own penalty (after 2), at the edge with no edge penalty beside it.
    const logins = []
    for (let i = 0; i < 4; i++) logins.push((await app.inject({ method: 'POST', url: '/login' })).headers['retry-after'])
    // The app bucket (2, 1/s) refuses the 2nd, the edge's route bucket (2 a minute) the 3rd and 4th, which starts it.
    t.same(logins, [undefined, '1', '60', '900'], 'the route\'s own penalty alone')
    await app.close()
  })
}

t.test('redis: three replicas, one shut-out, and no script call per request during it', async (t) => {
  if (!requireRedis(t)) return
  const redis = await startRedis(t)
  const clock = manualClock(1_000_000)
  const replicas = await Promise.all([0, 1, 2].map(async () =>
    build(redisStore({ client: redis.client(t), clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS }), { edge: { capacity: 5, refillPerSecond: 1, penalty } })))
  const [a, b, c] = replicas as [FastifyInstance, FastifyInstance, FastifyInstance]
  t.same(await statuses(a, 8), [200, 200, 200, 200, 200, 429, 429, 429])
  t.equal((await a.inject('/')).headers['retry-after'], '300', 'replica a started the penalty')
  await new Promise((resolve) => setTimeout(resolve, 50)) // the penalty's write, not awaited by the refusal
  clock.advance(10_000)
  for (const replica of [b, c]) {
    const refused = await replica.inject('/')
    t.equal(refused.statusCode, 429, 'another replica refuses too')
    t.equal(refused.headers['retry-after'], '290')
  }
  const client = redis.client(t)
  const before = await commandCalls(client)
  for (const replica of replicas) t.same(new Set(await statuses(replica, 30)), new Set([429]))
  const after = await commandCalls(client)
  const scripts = (after.evalsha ?? 0) - (before.evalsha ?? 0) + (after.eval ?? 0) - (before.eval ?? 0)
  // At most one per replica: a kept state whose key may have expired is asked again once.
  t.ok(scripts <= 3, `90 refusals during the penalty: ${scripts} script calls (the deny cache answers)`)
  clock.advance(290_000)
  t.equal((await c.inject('/')).statusCode, 200, 'over on every replica')
  for (const replica of replicas) await replica.close()
})

t.test('penalty options are checked at startup', async (t) => {
  const edge = { capacity: 1, refillPerSecond: 1 }
  const cases: Array<[unknown, RegExp]> = [
    [{ after: 0, withinSeconds: 1, seconds: 1 }, /`edge\.penalty\.after` to be an integer from 1 to 1000000, got `0`/],
    [{ after: 1.5, withinSeconds: 1, seconds: 1 }, /`edge\.penalty\.after` to be an integer/],
    [{ after: 1, withinSeconds: 0, seconds: 1 }, /`edge\.penalty\.withinSeconds` to be a number of seconds from 0\.001 to 1e10, got `0`/],
    [{ after: 1, withinSeconds: 1, seconds: 0.5 }, /`edge\.penalty\.seconds` to be a finite number ≥ 1, got `0\.5`/],
    [{ after: 1, withinSeconds: 1, seconds: 1e11 }, /`edge\.penalty\.seconds` to be a number of seconds from 1 to 1e10/],
    [{ after: 1, withinSeconds: 1e11, seconds: 1 }, /`edge\.penalty\.withinSeconds` to be a number of seconds from 0\.001 to 1e10/],
    [{ after: 1, withinSeconds: 1, seconds: 1, status: 418 }, /`edge\.penalty\.status` to be 429 or 403, got `418`/],
    [{ after: 1, withinSeconds: 1, seconds: 1, ban: true }, /Unknown option `edge\.penalty\.ban`/],
    ['yes', /`edge\.penalty` to be an object/]
  ]
  for (const [value, message] of cases) {
    await t.rejects(readyWith({ edge: { ...edge, penalty: value } }), { code: 'TOLLGATE_INVALID_OPTION', message })
  }
  await t.rejects(readyWith({ app: { tiers: { default: edge }, penalty: { after: 1 } } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`app\.penalty\.withinSeconds`/ })
  await t.rejects(readyWith({ edge }, (app) => { app.get('/x', { config: { rateLimit: { penalty: { after: 1, withinSeconds: 1, seconds: 0 } } } }, async () => 'ok') }),
    { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /`rateLimit\.penalty\.seconds`/ })
  const noRefund = { consume: () => ({ allowed: true, tokens: [1], retryAfterMs: 0 }), close: () => {} }
  await t.rejects(readyWith({ store: noRefund, edge: { ...edge, penalty } }), { code: 'TOLLGATE_INVALID_OPTION', message: /a store with `refund\(\)`/ })
  await t.rejects(readyWith({ store: noRefund, edge }, (app) => { app.get('/x', { config: { rateLimit: { penalty } } }, async () => 'ok') }),
    { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /a store with `refund\(\)`/ })
  if (!requireRedis(t)) return
  const store = redisStore({ client: (await startRedis(t)).client(t), heartbeatIntervalMs: 0 })
  await t.rejects(readyWith({ store, edge: { ...edge, mode: 'replica-share', penalty } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`edge\.penalty` with `edge\.mode: 'exact'`.*got it with `edge\.mode: 'replica-share'`/ })
})

t.test('redis: a burst that starts the penalty many times over sets it once', async (t) => {
  if (!requireRedis(t)) return
  const clock = manualClock(1_000_000)
  const limits: LimitDecision[] = []
  const app = await build(redisStore({ client: (await startRedis(t)).client(t), clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS }), { edge: { capacity: 2, refillPerSecond: 1, penalty: { after: 3, withinSeconds: 60, seconds: 60 } } }, limits)
  const burst = await Promise.all(Array.from({ length: 60 }, async () => app.inject('/')))
  t.ok(burst.filter((r) => r.statusCode === 429).length >= 50)
  t.ok(limits.filter((l) => l.penalty?.state === 'started').length > 1, 'several refusals of the burst started it')
  await new Promise((resolve) => setTimeout(resolve, 50))
  clock.advance(1000)
  t.equal((await app.inject('/')).headers['retry-after'], '59', 'yet it runs for its 60 s, once')
  clock.advance(59_000)
  t.equal((await app.inject('/')).statusCode, 200)
  await app.close()
})

t.test('shadow mode counts and reports a penalty, and writes none', async (t) => {
  const clock = manualClock(1_000_000)
  const store = memoryStore({ clock: clock.now })
  const limits: LimitDecision[] = []
  const app = await build(store, { shadow: true, edge: { capacity: 2, refillPerSecond: 1, penalty } }, limits)
  t.same(new Set(await statuses(app, 8)), new Set([200]))
  t.same(limits[2]?.penalty, { state: 'started', seconds: 300 }, 'onLimit hears of it')
  const held = store.peek({ key: '{ip:127.0.0.1}:edge~penalty', policy: { capacity: 1, refillPerSecond: 1 }, cost: 0 }).tokens
  t.equal(held, 1, 'the penalty bucket is not in debt: no penalty written')
  await app.close()
})

t.test('a tier limit named `penalty` and app.penalty keep apart', async (t) => {
  const clock = manualClock(1_000_000)
  const app = await build(memoryStore({ clock: clock.now }), {
    edge: { global: false },
    app: { tiers: { default: [{ name: 'penalty', capacity: 3, refillPerSecond: 0.001 }] }, identify: () => ({ id: 'u1' }), penalty }
  })
  t.same(await statuses(app, 5), [200, 200, 200, 429, 429])
  t.equal((await app.tollgate.peek({ layer: 'app', user: 'u1' })).buckets[0]?.key, '{user:u1}:app:penalty')
  await app.close()
})

t.test('a route penalty under a local edge mode fails startup', async (t) => {
  if (!requireRedis(t)) return
  const store = redisStore({ client: (await startRedis(t)).client(t), heartbeatIntervalMs: 0 })
  await t.rejects(readyWith({ store, edge: { capacity: 5, refillPerSecond: 1, mode: 'replica-share' } }, (app) => {
    app.post('/login', { config: { rateLimit: { penalty } } }, async () => 'ok')
  }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /`rateLimit\.penalty` on a route the edge limits with `edge\.mode: 'exact'`/ })
  await store.close()
})

t.test('a client shut out by the layer\'s penalty stays out of a route with a penalty of its own', async (t) => {
  const clock = manualClock(1_000_000)
  const limits: LimitDecision[] = []
  const app = await build(memoryStore({ clock: clock.now }), { edge: { capacity: 5, refillPerSecond: 1, penalty } }, limits)
  await statuses(app, 8) // 5 pass, the 3rd refusal starts the edge's penalty
  clock.advance(10_000) // every quota full again
  const login = await app.inject({ method: 'POST', url: '/login' })
  t.equal(login.statusCode, 429)
  t.equal(login.headers['retry-after'], '290', 'the edge\'s penalty, to its end')
  t.equal(limits.at(-1)?.penalty?.state, 'in force')
  await app.close()
})
