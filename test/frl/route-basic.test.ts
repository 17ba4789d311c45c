/**
 * FRL's test/route-rate-limit.test.js, part 1: limits in a route's config. FRL's
 * `global: false` with a route's `{ max, timeWindow }` (per IP) is
 * `edge: { global: false }` with the route's own edge bucket,
 * `config.rateLimit.edge` (`"edge-route"` in the headers).
 */
import t from 'tap'
import type { FastifyError } from 'fastify'
import { per } from '../../lib/index.js'
import { failure, readyWith } from '../helpers.js'
import { frlApp, JSON_TYPE, tooMany, trio } from './frl.js'

const TWO_A_SECOND = { capacity: 2, refillPerSecond: 2 }
/** FRL's `defaultRouteConfig`: a route limit next to another plugin's config. */
const routeConfig = { rateLimit: { edge: TWO_A_SECOND }, someOtherPlugin: { someValue: 1 } }

t.test('FRL: Basic', async (t) => {
  // Differs by design at 0.5 s: FRL refuses until its window ends; a bucket of 2 refilled
  // at 2/s has a token back after 0.5 s (no reset cliff), so the third request passes.
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', { config: routeConfig }, async () => 'hello!')
  const handled: number[] = []
  app.setErrorHandler(function (error: FastifyError, _request, reply) {
    handled.push(error.statusCode ?? 0)
    error.message += ' from error handler'
    return reply.code(429).send(error)
  })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  clock.advance(1)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
  clock.advance(500)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' }, 'one token back after 0.5 s')
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), { ...tooMany(1), message: 'Rate limit exceeded, retry in 1 second from error handler' })
  t.strictSame(handled, [429], 'the error handler sees the refusal, status 429')
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
})

t.test('FRL: With text timeWindow', async (t) => {
  // Differs by design: no duration strings; per(2, 'second') or the rate as a number.
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  const config = { rateLimit: { edge: per(2, 'second') }, someOtherPlugin: { someValue: 1 } }
  app.get('/', { config }, async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.strictSame(refused.json(), tooMany(1))
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
})

t.test('FRL: With function timeWindow', async (t) => {
  // Differs: a route's limit is not a function of the request. What varies per request is
  // the tier (`app.identify`), and a route's `quota` has a policy per tier, in the app layer.
  const { app, clock } = await frlApp({
    app: {
      global: false,
      tiers: { default: { capacity: 100, refillPerSecond: 100 }, perSecond: { capacity: 100, refillPerSecond: 100 } },
      identify: (request) => ({ id: request.ip, tier: request.headers['x-slow'] === undefined ? 'perSecond' : 'default' })
    }
  })
  t.teardown(() => app.close())
  const config = { rateLimit: { quota: { default: { capacity: 2, refillPerSecond: 0.5 }, perSecond: TWO_A_SECOND } }, someOtherPlugin: { someValue: 1 } }
  app.get('/', { config }, async () => 'hello!')
  // X-RateLimit-* shows the bucket with the fewest tokens: the route's quota.
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.strictSame(refused.json(), tooMany(1))
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
})

t.test('FRL: With keyGenerator', async (t) => {
  // Same: the plugin's `keyGenerator` is `edge.key`; the route's own bucket is keyed like the edge.
  const seen: unknown[] = []
  const { app, clock } = await frlApp({ edge: { global: false, key: (request) => { seen.push(request.headers['my-custom-header']); return request.headers['my-custom-header'] } } })
  t.teardown(() => app.close())
  app.get('/', { config: routeConfig }, async () => 'hello!')
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
  t.strictSame(seen, Array(5).fill('random-value'))
})

t.test('FRL: no rate limit without settings', async (t) => {
  // Same: under `edge: { global: false }` a route without its own bucket is not limited.
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const response = await app.inject('/')
  t.strictSame(trio(response), { status: 200 })
  t.equal(response.headers['ratelimit'], undefined)
})

t.test('FRL: no rate limit with bad rate-limit parameters', async (t) => {
  // Differs: FRL throws when the route is declared; here route configs are checked in
  // onRoute and `ready()` rejects, naming the route (a function is no route config).
  const bad = await failure(() => readyWith({ edge: TWO_A_SECOND }, (app) => {
    app.get('/', { config: { ...routeConfig, rateLimit: (() => {}) as never } }, async () => 'hello!')
  }))
  t.equal(bad.code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
  t.match(bad.message, 'Invalid config.rateLimit on route GET /: Expected `rateLimit` to be an object')
})

t.test('FRL: works with existing route config', async (t) => {
  // Same: with `replace: true` the route's limit replaces the global one (README, "Route
  // options"), next to another plugin's config; the client's edge bucket is left for the
  // other routes, and a route looser than the global limit works.
  const { app } = await frlApp({ edge: TWO_A_SECOND })
  t.teardown(() => app.close())
  const config = { rateLimit: { edge: TWO_A_SECOND, replace: true }, someOtherPlugin: { someValue: 1 } }
  app.get('/', { config }, async (request) => request.routeOptions.config)
  app.get('/loose', { config: { rateLimit: { edge: { capacity: 5, refillPerSecond: 5 }, replace: true } } }, async () => 'hello!')
  app.get('/other', async () => 'hello!')
  await app.ready()
  const response = await app.inject('/')
  t.strictSame(trio(response), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(response.json().someOtherPlugin, { someValue: 1 })
  t.strictSame(trio(await app.inject('/other')), { status: 200, limit: '2', remaining: '1', reset: '1' }, "the route's request left the client's edge bucket alone")
  const loose = []
  for (let i = 0; i < 6; i++) loose.push((await app.inject('/loose')).statusCode)
  t.strictSame(loose, [200, 200, 200, 200, 200, 429], 'a route looser than the global limit')
})

t.test('FRL: route can disable the global limit', async (t) => {
  // Same: `rateLimit: false` leaves the route out of both layers, headers included.
  const { app } = await frlApp({ edge: TWO_A_SECOND })
  t.teardown(() => app.close())
  app.get('/', { config: { ...routeConfig, rateLimit: false } }, async () => 'hello!')
  for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject('/')), { status: 200 })
})

t.test('FRL: does not override onRequest', async (t) => {
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  let called = 0
  app.get('/', { onRequest: (_request, _reply, next) => { called++; next() }, config: routeConfig }, async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.equal(called, 1)
})

t.test('FRL: stops fastify lifecycle after onRequest and before preValidation', async (t) => {
  // Same: a route's own edge bucket is taken in onRequest.
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  let preValidation = 0
  app.get('/', {
    config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 } } },
    preValidation: (_request, _reply, next) => { preValidation++; next() }
  }, async () => 'hello!')
  t.equal((await app.inject('/')).statusCode, 200)
  t.equal((await app.inject('/')).statusCode, 429)
  t.equal(preValidation, 1)
})

t.test('FRL: per route rate limit', async (t) => {
  // Differs by design: FRL counts a route's HEAD apart from its GET (9 left after each);
  // here HEAD counts as GET, so that HEAD is no way around GET's limit (as for `quota`).
  const { app } = await frlApp({ edge: { global: false } }, { exposeHeadRoutes: true })
  t.teardown(() => app.close())
  app.get('/', { config: { rateLimit: { edge: { capacity: 10, refillPerSecond: 10 } } } }, async () => 'hello!')
  t.strictSame(trio(await app.inject({ url: '/', method: 'GET' })), { status: 200, limit: '10', remaining: '9', reset: '1' })
  t.strictSame(trio(await app.inject({ url: '/', method: 'HEAD' })), { status: 200, limit: '10', remaining: '8', reset: '1' })
})

t.test('FRL: global timeWindow when not set in routes', async (t) => {
  // Differs: there is no plugin-wide window for routes to inherit; each route's bucket
  // states its rate. FRL's X-RateLimit-Reset (the window, 6 and 4) is `w` of
  // RateLimit-Policy here, the time to refill from empty; `t`, the time until full, is 1 s.
  const { app } = await frlApp({ headers: 'draft', edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/six', { config: { rateLimit: { edge: { capacity: 6, refillPerSecond: 6 / 6 } } } }, async () => 'hello!')
  app.get('/four', { config: { rateLimit: { edge: { capacity: 4, refillPerSecond: 4 / 4 } } } }, async () => 'hello!')
  const six = await app.inject('/six')
  t.equal(six.statusCode, 200)
  t.equal(six.headers['ratelimit-policy'], '"edge-route";q=6;w=6')
  t.equal(six.headers['ratelimit'], '"edge-route";r=5;t=1')
  const four = await app.inject('/four')
  t.equal(four.statusCode, 200)
  t.equal(four.headers['ratelimit-policy'], '"edge-route";q=4;w=4')
  t.equal(four.headers['ratelimit'], '"edge-route";r=3;t=1')
})

t.test('FRL: With NaN in subroute config', async (t) => {
  // Differs by design: no default `max`; NaN makes `ready()` reject, naming the route.
  const nan = await failure(() => readyWith({ edge: { global: false } }, (app) => {
    app.get('/', { config: { rateLimit: { edge: { capacity: NaN, refillPerSecond: 1000 / 60 } } } }, async () => 'hello!')
  }))
  t.equal(nan.code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
  t.match(nan.message, 'Expected `rateLimit.edge.capacity` to be a finite number ≥ 1, got `NaN`')
  // FRL's defaults written out: 1000 a minute; 70 s later the bucket is full again.
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', { config: { rateLimit: { edge: { capacity: 1000, refillPerSecond: 1000 / 60 } } } }, async () => 'hello!')
  for (const left of ['999', '998', '997']) t.match(trio(await app.inject('/')), { status: 200, limit: '1000', remaining: left })
  clock.advance(70_000)
  t.match(trio(await app.inject('/')), { status: 200, limit: '1000', remaining: '999' })
})

t.test('FRL: limit reset per Local storage', async (t) => {
  // FRL skips this case (its timers were flaky); here it runs on the test's clock.
  // Differs at 4 s: FRL's window ends (reset 0); here a token is back, the request takes
  // it, and the bucket is full again 4 s later. X-RateLimit-Reset counts down to full.
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 / 4 } } } }, (_request, reply) => { reply.send('hello!') })
  const seen: string[] = []
  for (const at of [0, 1000, 2000, 3000, 4000, 4100]) {
    clock.set(at)
    const response = await app.inject('/')
    seen.push(`${response.statusCode} ${String(response.headers['x-ratelimit-reset'])}`)
  }
  t.strictSame(seen, ['200 4', '429 3', '429 2', '429 1', '200 4', '429 4'])
})
