/**
 * FRL's test/global-rate-limit.test.js, part 1: the global limit, its window and
 * key, a custom store, hooks. FRL's global limit per IP is the edge layer here:
 * `{ max: 2, timeWindow: 1000 }` is `edge: { capacity: 2, refillPerSecond: 2 }`,
 * with FRL's `x-ratelimit-*` trio (`headers: 'legacy'`).
 */
import t from 'tap'
import Fastify, { type FastifyRequest } from 'fastify'
import tollgate, { per } from '../../lib/index.js'
import { failure, manualClock, readyWith } from '../helpers.js'
import { frlApp, JSON_TYPE, mapStore, tooMany, trio } from './frl.js'

t.test('FRL: Basic', async (t) => {
  const { app, clock } = await frlApp({ edge: { capacity: 2, refillPerSecond: 2 } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), tooMany(1), "FRL's body, with the error's code")
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
})

t.test('FRL: With text timeWindow', async (t) => {
  // Differs by design: no duration strings ('1s'); `per(2, 'second')` says it, or the rate as a number.
  const { app, clock } = await frlApp({ edge: per(2, 'second') })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.strictSame(refused.json(), tooMany(1))
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  const string = await failure(async () => { await Fastify().register(tollgate, { edge: { capacity: 2, timeWindow: '1s' } as never }) })
  t.equal(string.code, 'TOLLGATE_INVALID_OPTION', 'an FRL option left in fails startup, never ignored')
  t.match(string.message, 'Unknown option `edge.timeWindow`')
})

t.test('FRL: With function timeWindow', async (t) => {
  // Differs by design: a policy is not a function of the request. What varies per
  // request is the tier, named by `app.identify`, each tier a policy.
  const calls: FastifyRequest[] = []
  const tierOf = (request: FastifyRequest): string => { calls.push(request); return 'perSecond' }
  const { app, clock } = await frlApp({
    app: {
      tiers: { default: { capacity: 2, refillPerSecond: 0.5 }, perSecond: { capacity: 2, refillPerSecond: 2 } },
      identify: (request) => ({ id: request.ip, tier: tierOf(request) })
    }
  })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.strictSame(refused.json(), tooMany(1))
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.equal(calls.length, 4, 'called once per request')
})

t.test('FRL: When passing NaN to the timeWindow property then the timeWindow should be the default value - 60 seconds', async (t) => {
  // Differs by design: there are no defaults, and NaN fails startup, naming the option.
  const nan = await failure(async () => { await Fastify().register(tollgate, { edge: { capacity: 1, refillPerSecond: NaN } }) })
  t.equal(nan.code, 'TOLLGATE_INVALID_OPTION')
  t.match(nan.message, 'Expected `edge.refillPerSecond` to be a finite number ≥ 0, got `NaN`')
  // FRL's default window written out: one a minute.
  const { app, clock } = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 / 60 } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const first = await app.inject('/')
  t.equal(first.statusCode, 200)
  t.equal(first.headers['x-ratelimit-reset'], '60', 'full again in 60 s')
  t.equal((await app.inject('/')).statusCode, 429)
  clock.advance(55_000)
  t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '5', retryAfter: '5' }, 'at 55 s, the token is back in 5 s')
  clock.advance(5000)
  t.equal((await app.inject('/')).statusCode, 200, 'at 60 s, one token')
})

t.test('FRL: With keyGenerator', async (t) => {
  // Same: `keyGenerator` before authentication is `edge.key` (an async one: global-async).
  // Its values are stored and logged as digests. Key the edge only by values you can check
  // (README, Threats).
  const seen: unknown[] = []
  const keys: string[] = []
  const { app, clock } = await frlApp({
    edge: { capacity: 2, refillPerSecond: 2, key: (request) => { seen.push(request.headers['my-custom-header']); return request.headers['my-custom-header'] } },
    onLimit: (_request, decision) => { keys.push(decision.buckets[0]?.key ?? '') }
  })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const request = { url: '/', headers: { 'my-custom-header': 'random-value' } }
  t.strictSame(trio(await app.inject(request)), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject(request)), { status: 200, limit: '2', remaining: '0', reset: '1' })
  const refused = await app.inject(request)
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), tooMany(1))
  t.equal((await app.inject({ ...request, remoteAddress: '198.51.100.9' })).statusCode, 429, 'keyed by the header, not the address')
  clock.advance(1100)
  t.strictSame(trio(await app.inject(request)), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(seen, Array(5).fill('random-value'), 'called once per request, with the request')
  t.match(keys[0], /^\{key:[\w-]+\}:edge$/, 'the key is stored as a digest')
  t.notMatch(keys[0], 'random-value')
})

t.test('FRL: With CustomStore', async (t) => {
  // Differs by design: another store contract. FRL's `incr(key, cb)` returns a count and
  // a TTL; here a store answers `consume(buckets)` all or nothing, deciding with the
  // exported engine. FRL's test store makes up its TTLs (9, 8, 7 s); this one keeps a
  // real bucket: 2 at once, then one every 5 s.
  const clock = manualClock()
  const store = mapStore(clock.now)
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(tollgate, { store, headers: 'legacy', edge: { capacity: 2, refillPerSecond: 2 / 10 } })
  app.get('/', async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '5' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '10' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '10', retryAfter: '5' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), tooMany(5))
  t.equal(store.calls.length, 3, 'the store decided every request')
  t.match(store.calls[0], [{ key: '{ip:127.0.0.1}:edge', policy: { capacity: 2, refillPerSecond: 0.2 }, cost: 1 }])
})

t.test('FRL: does not override the onRequest', async (t) => {
  // Same: the edge is a global onRequest hook; the route's own runs too.
  const { app } = await frlApp({ edge: { capacity: 2, refillPerSecond: 2 } })
  t.teardown(() => app.close())
  let called = 0
  app.get('/', { onRequest: (_request, _reply, next) => { called++; next() } }, async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.equal(called, 1)
})

t.test('FRL: does not override the onRequest as an array', async (t) => {
  const { app } = await frlApp({ edge: { capacity: 2, refillPerSecond: 2 } })
  t.teardown(() => app.close())
  let called = 0
  app.get('/', { onRequest: [(_request, _reply, next) => { called++; next() }] }, async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.equal(called, 1)
})

t.test('FRL: stops fastify lifecycle after onRequest and before preValidation', async (t) => {
  // Same: the edge refuses in onRequest, before body parsing and validation.
  const { app } = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 } })
  t.teardown(() => app.close())
  let preValidation = 0
  app.get('/', { preValidation: (_request, _reply, next) => { preValidation++; next() } }, async () => 'hello!')
  t.equal((await app.inject('/')).statusCode, 200)
  t.equal((await app.inject('/')).statusCode, 429)
  t.equal(preValidation, 1)
})

t.test('FRL: exposeHeadRoutes', async (t) => {
  // Same: GET and its HEAD spend the client's one edge bucket.
  const { app } = await frlApp({ edge: { capacity: 10, refillPerSecond: 10 } }, { exposeHeadRoutes: true })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  t.strictSame(trio(await app.inject({ url: '/', method: 'GET' })), { status: 200, limit: '10', remaining: '9', reset: '1' })
  t.strictSame(trio(await app.inject({ url: '/', method: 'HEAD' })), { status: 200, limit: '10', remaining: '8', reset: '1' })
})

t.test('FRL: When continue exceeding is on (Local)', async (t) => {
  // Differs by design: no `continueExceeding` (refused at startup); a refusal costs
  // nothing here, so retrying early neither helps nor pushes the wait back.
  const option = await failure(async () => { await Fastify().register(tollgate, { edge: { capacity: 1, refillPerSecond: 1 / 5 }, continueExceeding: true } as never) })
  t.equal(option.code, 'TOLLGATE_INVALID_OPTION')
  t.match(option.message, 'Unknown option `options.continueExceeding`')
  const { app, clock } = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 / 5 } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  t.equal((await app.inject('/')).statusCode, 200)
  t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '5', retryAfter: '5' })
  clock.advance(4000)
  t.equal((await app.inject('/')).statusCode, 429)
  clock.advance(1000)
  t.equal((await app.inject('/')).statusCode, 200, '5 s after the first, whatever the refusals (FRL: 5 s after the last)')
})

t.test('FRL: on preHandler hook', async (t) => {
  // Same, as the app layer: FRL's `hook: 'preHandler'` with a user key is the app
  // layer, after the route's own hooks; `app.identify` names the user, and a
  // request without one is anonymous, keyed by IP (FRL: `req.userId || req.ip`).
  const userIds = new WeakMap<FastifyRequest, string>()
  const { app } = await frlApp({
    app: {
      hook: 'preHandler',
      tiers: { default: { capacity: 1, refillPerSecond: 1 / 10 } },
      identify: (request) => { const id = userIds.get(request); return id === undefined ? undefined : { id } }
    }
  })
  t.teardown(() => app.close())
  app.addHook('preHandler', async (request) => {
    const { userId } = request.query as { userId?: string }
    if (userId !== undefined) userIds.set(request, userId)
  })
  app.get('/', async () => 'fastify is awesome !')
  const send = async (userId?: string): Promise<number> => (await app.inject({ url: '/', query: userId === undefined ? {} : { userId } })).statusCode
  t.strictSame([await send(), await send(), await send('123'), await send('123'), await send('234')], [200, 429, 200, 429, 200])
})

t.test('FRL: wrong timewindow', async (t) => {
  // Differs by design: FRL falls back to its default window (60 s); here a bad route
  // config makes `ready()` reject, naming the route and the option.
  const unknown = await failure(() => readyWith({ edge: { capacity: 2, refillPerSecond: 2 } }, (app) => {
    app.get('/', { config: { rateLimit: { timeWindow: -5 } as never } }, async () => 'hello!')
  }))
  t.equal(unknown.code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
  t.match(unknown.message, 'on route GET /: Unknown option `rateLimit.timeWindow`')
  const negative = await failure(() => readyWith({ edge: { capacity: 2, refillPerSecond: 2 } }, (app) => {
    app.get('/', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: -5 } } } }, async () => 'hello!')
  }))
  t.equal(negative.code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
  t.match(negative.message, 'Expected `rateLimit.edge.refillPerSecond` to be a finite number ≥ 0, got `-5`')
})
