/**
 * The edge layer alone: one bucket per client IP, in `onRequest`, before any
 * authentication or body parsing. 10 requests at once, then 2 per second.
 *
 * Behind a load balancer, set Fastify's `trustProxy` to the proxies' addresses
 * (not `true`), or every client shares the proxy's bucket.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: 'The edge layer alone: 10 requests per client IP at once, then 2 per second.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: { capacity: 10, refillPerSecond: 2 }
    })
    app.get('/', async () => ({ hello: 'world' }))
    return app
  },
  tryIt: (url) => `for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # ten 200s, then 429s
curl -i ${url}/   # 429 with Retry-After: 1 and the RateLimit headers`
}
