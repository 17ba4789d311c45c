/**
 * FRL's test/route-rate-limit.test.js, part 3: a route's callbacks, error
 * response, `ban`, a `max` per request, and a custom store. Callbacks and the
 * error response are the plugin's here (`onLimit`, `setErrorHandler`), telling
 * routes apart by `request.routeOptions`.
 */
import t from 'tap'
import Fastify from 'fastify'
import tollgate, { per, RateLimitedError } from '../../lib/index.js'
import { manualClock } from '../helpers.js'
import { frlApp, JSON_TYPE, mapStore, tooMany, trio } from './frl.js'

const TWO_IN_TWO_SECONDS = { edge: { capacity: 2, refillPerSecond: 1 } }

t.test('FRL: With onExceeding option', async (t) => {
  // Differs by design: no callback per admitted request. The route's own onRequest hook
  // runs after the edge's, so it sees exactly the requests the edge admitted.
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  let admitted = 0
  app.get('/', { config: { rateLimit: TWO_IN_TWO_SECONDS }, onRequest: async () => { admitted++ } }, async () => 'hello!')
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 200, 429])
  t.equal(admitted, 2)
})

t.test('FRL: With onExceeded option', async (t) => {
  // Differs: one `onLimit` for the plugin; it tells routes apart by `request.routeOptions.url`.
  const refusedOn: Array<string | undefined> = []
  const { app } = await frlApp({ edge: { global: false }, onLimit: (request) => { refusedOn.push(request.routeOptions.url) } })
  t.teardown(() => app.close())
  app.get('/', { config: { rateLimit: TWO_IN_TWO_SECONDS } }, async () => 'hello!')
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 200, 429])
  t.strictSame(refusedOn, ['/'])
})

t.test('FRL: onExceeding and onExceeded events', async (t) => {
  // Differs: as the two cases above, together.
  let onExceeding = 0
  let onExceeded = 0
  const { app } = await frlApp({ edge: { global: false }, onLimit: (request) => { if (request.routeOptions.url === '/') onExceeded++ } })
  t.teardown(() => app.close())
  const config = { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 } }, someOtherPlugin: { someValue: 1 } }
  app.get('/', { config, onRequest: async () => { onExceeding++ } }, async () => 'hello!')
  t.match(trio(await app.inject('/')), { status: 200, remaining: '1' })
  t.match(trio(await app.inject('/')), { status: 200, remaining: '0' })
  t.match(trio(await app.inject('/')), { status: 429, remaining: '0' })
  t.equal(onExceeding, 2)
  t.equal(onExceeded, 1)
})

t.test('FRL: custom error response', async (t) => {
  // Differs: `errorResponseBuilder` is `setErrorHandler`; FRL's `context.after` is
  // `error.retryAfterSeconds`, `context.max` the refused bucket's capacity. The headers are
  // already on the reply; the handler sets the status (Fastify leaves it 200 there).
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.setErrorHandler((error, _request, reply) => {
    if (!(error instanceof RateLimitedError)) return reply.send(error)
    const seconds = error.retryAfterSeconds ?? 0
    return reply.code(429).send({ statusCode: 429, timeWindow: `${seconds} second${seconds === 1 ? '' : 's'}`, limit: error.decision.buckets[0]?.capacity })
  })
  app.get('/', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 } } } }, async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), { statusCode: 429, timeWindow: '1 second', limit: 2 })
})

t.test('FRL: With ban', async (t) => {
  // Differs: a route's `ban` is its own `penalty` (`ban: 1` is `after: 2`, status 403), for
  // a fixed time (FRL's default window, 60 s).
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', {
    config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 / 60 }, penalty: { after: 2, withinSeconds: 60, seconds: 60, status: 403 } } }
  }, async () => 'hello!')
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 429, 403])
})

t.test('FRL: variable max contenders', async (t) => {
  // Differs: a route keyed by API key with a `max` per key is the app layer: `app.identify`
  // names the user and tier (`rateLimit: { app: true }` under `app.global: false`). FRL's
  // `/limit`, with the plugin's `max: 1` per IP, is a route's own edge bucket.
  const { app } = await frlApp({
    edge: { global: false },
    app: {
      global: false,
      tiers: { default: { capacity: 2, refillPerSecond: 2 / 10 }, pro: { capacity: 3, refillPerSecond: 3 / 10 } },
      identify: (request) => { const key = String(request.headers['api-key']); return { id: key, tier: key === 'pro' ? 'pro' : 'default' } }
    }
  })
  t.teardown(() => app.close())
  app.get('/', { config: { rateLimit: { app: true } } }, async () => 'hello')
  app.get('/limit', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 / 10 } } } }, async () => 'limited')
  const sequence = [
    ['pro', '/', 200], ['pro', '/', 200], ['pro', '/', 200], ['pro', '/', 429],
    ['pro', '/limit', 200], ['pro', '/limit', 429],
    ['NOT', '/', 200], ['NOT', '/', 200], ['NOT', '/', 429]
  ] as const
  for (const [key, url, status] of sequence) t.equal((await app.inject({ url, headers: { 'api-key': key } })).statusCode, status, `${key} ${url}`)
})

t.test('FRL: With CustomStore', async (t) => {
  // Differs by design: a store answers `consume(buckets)` (no `child()` per route: a
  // route's bucket is one more key). FRL's test store makes up its TTLs; this one keeps
  // real buckets: 2 at once, then one every 5 s.
  const clock = manualClock()
  const store = mapStore(clock.now)
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(tollgate, { store, headers: 'legacy', edge: { global: false } })
  app.get('/', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 / 10 } } } }, async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '5' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '10' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '10', retryAfter: '5' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), tooMany(5))
  t.match(store.calls[0], [{ key: /edge-route:GET \/$/, policy: { capacity: 2, refillPerSecond: 0.2 }, cost: 1 }])
})

t.test('FRL: timeWindow specified as a string', async (t) => {
  // Differs: no '10 seconds'; `per(2, 10)` (a period in seconds) or the rate as a number.
  const clock = manualClock()
  const store = mapStore(clock.now)
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(tollgate, { store, headers: 'legacy', edge: { global: false } })
  app.get('/', { config: { rateLimit: { edge: per(2, 10) } } }, async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '5' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '10' })
  t.equal((await app.inject('/')).statusCode, 429)
})
