/**
 * @fastify/rate-limit's "preventing guessing of URLs through 404s", translated.
 *
 * FRL limits routes, and the not-found handler is not one: its README adds
 * `fastify.rateLimit()` as the 404 handler's `preHandler`. Here the edge is an
 * `onRequest` hook on every request, so 404s spend the client's edge bucket
 * with nothing added (FRL: `{ max: 2, timeWindow: 1000 }` → 2 at once, then 2 a
 * second).
 *
 * FRL's second variant, `fastify.rateLimit({ max, timeWindow })`, gives 404s
 * limits of their own. Here that is a limiter, `fastify.tollgate.limiter`, as the
 * 404 handler's `preHandler`: 4 misses per IP at once, then 4 a minute, on top of
 * the edge, so that walking a list of guessed URLs soon stops. It refuses as the
 * plugin does (429 `TOLLGATE_RATE_LIMITED`, `Retry-After`, not cached) and adds
 * its member to the headers: `RateLimit: "edge";r=1;t=1, "not-found";r=3;t=15`.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

/** Misses per client IP: 4 at once, then 4 a minute. */
export const MISSES = { capacity: 4, refillPerSecond: 4 / 60 }

export const example: Example = {
  about: '404s limited: the edge (2 per IP at once, then 2/s) covers them, and a limiter of 4 misses, then 4 a minute, on top.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 2, refillPerSecond: 2 } })
    app.setNotFoundHandler({
      preHandler: app.tollgate.limiter({ name: 'not-found', ...MISSES })
    }, async (_request, reply) => reply.code(404).send({ error: 'Not Found' }))
    app.get('/', async () => ({ hello: 'world' }))
    return app
  },
  tryIt: (url) => `for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' ${url}/guess-$i; done; echo   # 404 404 429: the edge (2 at once, then 2/s) counts 404s too
sleep 1; for i in 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' ${url}/guess-$i; sleep 0.5; done; echo   # 404 404 429: four misses spent the 404 budget
curl -i ${url}/   # 200: a route that exists is limited by the edge alone`
}
