/**
 * FRL's test/not-found-handler-rate-limited.test.js. FRL limits routes, so its
 * not-found handler needs `fastify.rateLimit()` as a preHandler; here the edge is
 * a global onRequest hook and covers 404s with nothing added (MIGRATING.md,
 * "fastify.rateLimit()"). The app layer does not run on 404s.
 */
import t from 'tap'
import { consumeHook, frlApp, JSON_TYPE, tooMany, trio } from './frl.js'

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
  // Differs: a budget of the 404s' own is a preHandler taking from a bucket with
  // `fastify.tollgate.consume` (FRL's `fastify.rateLimit({ max: 4, timeWindow: 2000 })`),
  // on top of the edge's, which 404s spend too. It writes Retry-After (until one miss is
  // back: 1 s, where FRL says 2, its window), not the X-RateLimit trio: the edge's is sent.
  const { app } = await frlApp({ edge: { capacity: 10, refillPerSecond: 10 } })
  t.teardown(() => app.close())
  let handled = 0
  app.setNotFoundHandler({ preHandler: consumeHook(app, '404', { capacity: 4, refillPerSecond: 2 }) }, function (_request, reply) {
    handled++
    reply.status(404).send(new Error('Not found'))
  })
  for (const left of ['9', '8', '7', '6']) t.match(trio(await app.inject('/not-found')), { status: 404, limit: '10', remaining: left })
  const refused = await app.inject('/not-found')
  t.match(trio(refused), { status: 429, limit: '10', remaining: '5', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), tooMany(1))
  t.equal(handled, 4)
})
