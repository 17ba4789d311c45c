/**
 * @fastify/rate-limit's `fastify.createRateLimit()`, translated: check a limit
 * by hand in a handler (GraphQL resolvers, tRPC procedures, job queues).
 *
 * Here that is a limiter, `fastify.tollgate.limiter(options)`, and its
 * `check(request)`: it counts the request as the limiter's hook would (its key,
 * the client IP by default; its cost; the allow-list) and resolves to a decision,
 * `allowed` or not, with `retryAfterMs` and the bucket's tokens left. It sets no
 * header and never throws for a refusal: you answer the refusal as you like.
 * (For work that is no request, `fastify.tollgate.consume(key, policy)` takes
 * from a bucket you name.)
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
  about: 'Limits checked by hand with a limiter\'s check(): GET / 100 per IP, then 100 a minute; GET /custom 3, then 3 a minute.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 1000, refillPerSecond: 100 } })
    const root = app.tollgate.limiter({ name: 'root', ...PER_MINUTE })
    const custom = app.tollgate.limiter({ name: 'custom', ...CUSTOM })
    app.get('/', async (request, reply) => {
      const limit = await root.check(request)
      if (!limit.allowed) return reply.code(429).header('retry-after', Math.ceil(limit.retryAfterMs / 1000)).send('Limit exceeded')
      return 'Hello world'
    })
    app.get('/custom', async (request, reply) => {
      const limit = await custom.check(request)
      if (!limit.allowed) return reply.code(429).header('retry-after', Math.ceil(limit.retryAfterMs / 1000)).send('Limit exceeded')
      return `Hello world, ${Math.floor(limit.buckets[0]?.tokens ?? 0)} left`
    })
    return app
  },
  tryIt: (url) => `for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code} ' ${url}/custom; done; echo   # 200 200 200 429
curl -i ${url}/custom; echo   # 429, Limit exceeded and Retry-After: 20 (or a second less)
curl -i ${url}/; echo   # 200, Hello world: / has its own bucket`
}
