/**
 * @fastify/rate-limit's `errorResponseBuilder`, translated: the 429 body is
 * yours, built in Fastify's `setErrorHandler`. A refusal reaches it as a
 * `RateLimitedError` that carries what was decided: `error.decision` (the
 * buckets, their capacity and refill, `retryAfterMs`) and
 * `error.retryAfterSeconds` (the `Retry-After` sent). The headers are already
 * on the reply.
 *
 * FRL's other example, a `setErrorHandler` that rewrites the message when
 * `error.statusCode === 429`, works here as it is: a refusal is an error with
 * `statusCode` 429.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore, RateLimitedError } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: 'A 429 body of your own through setErrorHandler (edge: 5 per IP at once, then one every 12 s).',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 5, refillPerSecond: 5 / 60 } })
    app.setErrorHandler((error, _request, reply) => {
      if (!(error instanceof RateLimitedError)) return reply.send(error)
      const bucket = error.decision.buckets[0] // the layer's first bucket: at the edge, the client's
      if (bucket === undefined) return reply.send(error)
      return reply.code(429).send({
        statusCode: 429,
        error: 'Too Many Requests',
        message: `I only allow ${bucket.capacity} requests at once, then one every ${1 / bucket.refillPerSecond} seconds. Try again in ${String(error.retryAfterSeconds)} seconds.`,
        date: Date.now(),
        expiresIn: error.decision.retryAfterMs // ms until this request would pass (FRL's ttl: until its window ends)
      })
    })
    app.get('/', async () => ({ hello: 'world' }))
    return app
  },
  tryIt: (url) => `for i in $(seq 5); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 200 200 200 200
curl -i ${url}/; echo   # 429, Retry-After: 12 (or a second less) and the body built by setErrorHandler`
}
