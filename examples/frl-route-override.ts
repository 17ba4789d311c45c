/**
 * @fastify/rate-limit's global limit with per-route changes, translated: every
 * route 100 a minute per client IP, `/public` left out, `/private` stricter.
 *
 * `/private`'s own bucket (`config.rateLimit.edge`) is taken together with the
 * client's edge bucket, all or nothing: 9 a minute there, and they count toward
 * the 100 too. (FRL gives such a route a counter instead of the global one.)
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: 'Every route 100 per IP at once, then 100 a minute; /public left out; /private 9, then 9 a minute, on top.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 100, refillPerSecond: 100 / 60 } })
    app.get('/', async () => ({ hello: 'from the root, limited' }))
    app.get('/public', { config: { rateLimit: false } }, async () => ({ hello: 'from public, not limited' }))
    app.get('/private', {
      config: { rateLimit: { edge: { capacity: 9, refillPerSecond: 9 / 60 } } }
    }, async () => ({ hello: 'from private, more limited' }))
    return app
  },
  tryIt: (url) => `for i in $(seq 10); do curl -s -o /dev/null -w '%{http_code} ' ${url}/private; done; echo   # 200 200 200 200 200 200 200 200 200 429
curl -i ${url}/; echo   # 200, RateLimit: "edge";r=90 or so: the nine to /private counted too
curl -i ${url}/public; echo   # 200, no RateLimit headers: left out`
}
