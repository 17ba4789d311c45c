/**
 * @fastify/rate-limit's `onExceeding` and `onExceeded`, translated.
 *
 * - `onExceeded` (called on each refusal) is `onLimit(request, decision)`: the
 *   decision says which layer refused, the buckets, their keys and
 *   `retryAfterMs`. It runs before the 429 is sent; it must not throw (a throw
 *   is logged).
 * - `onExceeding` (called on each request the limit lets through) has no option
 *   of its own: a hook that runs after the layer sees exactly those. For the
 *   edge, any `onRequest` hook added after the plugin; it also sees requests to
 *   routes left out of the limits, which it can skip by their config.
 *
 * `GET /stats` shows the counts.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: 'onExceeding and onExceeded, translated: a hook after the edge counts admitted requests, onLimit counts refusals (3 per IP at once, then 1/s).',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    const stats = { admitted: 0, refused: 0, lastRefused: '' }
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: { capacity: 3, refillPerSecond: 1 },
      onLimit: (request, decision) => { // FRL: onExceeded(request, key)
        stats.refused++
        stats.lastRefused = `${request.ip}: ${decision.layer}, retry in ${decision.retryAfterMs} ms`
      }
    })
    app.addHook('onRequest', async (request) => { // FRL: onExceeding(request, key); runs only if the edge let it through
      if (request.routeOptions.config.rateLimit !== false) stats.admitted++
    })
    app.get('/', async () => ({ hello: 'world' }))
    app.get('/stats', { config: { rateLimit: false } }, async () => stats)
    return app
  },
  tryIt: (url) => `for i in 1 2 3 4 5; do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 200 200 429 429
curl -i ${url}/stats; echo   # 200, {"admitted":3,"refused":2,...}`
}
