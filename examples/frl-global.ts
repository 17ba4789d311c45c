/**
 * @fastify/rate-limit's first example, translated: every route limited to 100
 * requests a minute per client IP.
 *
 * FRL counts requests in a fixed one-minute window. Here the same limit is a
 * token bucket at the edge: 100 at once (`capacity`), then 100 a minute
 * (`refillPerSecond: 100 / 60`, one every 0.6 s), so a client that spent its
 * 100 gets `Retry-After: 1`, not the rest of the minute. `headers: 'legacy'`
 * keeps FRL's `X-RateLimit-*` headers for clients that read them.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: '@fastify/rate-limit\'s { max: 100, timeWindow: \'1 minute\' } as a token bucket: 100 per IP at once, then one every 0.6 s.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: { capacity: 100, refillPerSecond: 100 / 60 },
      headers: 'legacy'
    })
    app.get('/', async () => ({ hello: 'world' }))
    return app
  },
  tryIt: (url) => `for i in $(seq 110); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # about 100 200s, then 429s (one passes every 0.6 s)
curl -i ${url}/   # 429 with Retry-After: 1, X-RateLimit-Limit: 100 and X-RateLimit-Remaining: 0`
}
