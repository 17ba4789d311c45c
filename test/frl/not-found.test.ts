/**
 * FRL's test/not-found-handler-rate-limited.test.js. FRL limits routes, so its
 * not-found handler needs `fastify.rateLimit()` as a preHandler; here the edge is
 * a global onRequest hook and covers 404s with nothing added, and a budget of the
 * 404s' own is a limiter (MIGRATING.md, "fastify.rateLimit()"). The app layer
 * does not run on 404s.
 */
import t from 'tap'
import { frlApp, JSON_TYPE, tooMany, trio } from './frl.js'

t.test('FRL: Set not found handler can be rate limited', async (t) => {
  // Same, without a hook. An app layer of one token is configured too, and leaves 404s alone.
  const { app } = await frlApp({ edge: { capacity: 2, refillPerSecond: 2 }, app: { tiers: { default: { capacity: 1, refillPerSecond: 1 / 60 } } } })
  t.teardown(() => app.close())
  let handled = 0
  app.setNotFoundHandler(function (_request, reply) {
    handled++
    reply.status(404).send(new Error('Not found'))
  })
  t.strictSame(trio(await app.inject('/not-found')), { status: 404, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/not-found')), { status: 404, limit: '2', remaining: '0', reset: '1' })
  const refused = await app.inject('/not-found')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), tooMany(1))
  t.equal(handled, 2)
})

t.test('FRL: Set not found handler can be rate limited with specific options', async (t) => {
  // Differs: FRL's `fastify.rateLimit({ max: 4, timeWindow: 2000 })` is a limiter as the
  // 404 handler's preHandler, a bucket of 4 refilled at 2/s. FRL's global limit does not
  // reach its 404s; the edge would (test above), so the plugin has no edge bucket for
  // every request here. X-RateLimit-Reset is the time until full (FRL: its window's end, 2)
  // and Retry-After until one miss is back (1 s; FRL: 2).
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  const limit = app.tollgate.limiter({ name: 'notFound', capacity: 4, refillPerSecond: 2 })
  let handled = 0
  app.setNotFoundHandler({ preHandler: limit }, function (_request, reply) {
    handled++
    reply.status(404).send(new Error('Not found'))
  })
  t.strictSame(trio(await app.inject('/not-found')), { status: 404, limit: '4', remaining: '3', reset: '1' })
  t.strictSame(trio(await app.inject('/not-found')), { status: 404, limit: '4', remaining: '2', reset: '1' })
  t.strictSame(trio(await app.inject('/not-found')), { status: 404, limit: '4', remaining: '1', reset: '2' })
  t.strictSame(trio(await app.inject('/not-found')), { status: 404, limit: '4', remaining: '0', reset: '2' })
  const refused = await app.inject('/not-found')
  t.strictSame(trio(refused), { status: 429, limit: '4', remaining: '0', reset: '2', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), tooMany(1))
  t.equal(handled, 4)
})
