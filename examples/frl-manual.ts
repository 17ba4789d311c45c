/**
 * @fastify/rate-limit's `fastify.createRateLimit()`, translated: check a limit
 * by hand in a handler (GraphQL resolvers, tRPC procedures, job queues).
 *
 * Here that is `fastify.tollgate.consume(key, policy, cost?)`: it takes from the
 * bucket you name (its keys live apart from the layers'), and resolves to a
 * decision, `allowed` or not, with `retryAfterMs` and the bucket's tokens left;
 * it never throws for a refusal. You answer the refusal as you like.
 *
 * The plugin needs a layer: here a generous edge guards against floods, well
 * above the limits checked by hand.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

/** FRL `{ max: 100, timeWindow: '1 minute' }`: 100 at once, then 100 a minute. */
export const PER_MINUTE = { capacity: 100, refillPerSecond: 100 / 60 }
/** A stricter one, for `/custom`: 3 at once, then 3 a minute. */
export const CUSTOM = { capacity: 3, refillPerSecond: 3 / 60 }

export const example: Example = {
  about: 'Limits checked by hand with fastify.tollgate.consume: GET / 100 per IP, then 100 a minute; GET /custom 3, then 3 a minute.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 1000, refillPerSecond: 100 } })
    app.get('/', async (request, reply) => {
      const limit = await app.tollgate.consume(`root:${request.ip}`, PER_MINUTE)
      if (!limit.allowed) return reply.code(429).header('retry-after', Math.ceil(limit.retryAfterMs / 1000)).send('Limit exceeded')
      return 'Hello world'
    })
    app.get('/custom', async (request, reply) => {
      const limit = await app.tollgate.consume(`custom:${request.ip}`, CUSTOM)
      if (!limit.allowed) return reply.code(429).header('retry-after', Math.ceil(limit.retryAfterMs / 1000)).send('Limit exceeded')
      return `Hello world, ${Math.floor(limit.buckets[0]?.tokens ?? 0)} left`
    })
    return app
  },
  tryIt: (url) => `for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code} ' ${url}/custom; done; echo   # 200 200 200 429
curl -i ${url}/custom; echo   # 429, Limit exceeded and Retry-After: 20 (or a second less)
curl -i ${url}/; echo   # 200, Hello world: / has its own bucket`
}
