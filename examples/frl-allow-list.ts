/**
 * @fastify/rate-limit's `allowList`, translated: requests that no layer limits.
 *
 * FRL compares its list with each request's key, and calls its function with
 * the request and the key. Here `allowList` takes IP addresses and CIDR ranges
 * (IPv4 and IPv6), matched against the client address, and a function of the
 * request (a promise is awaited; one that throws does not allow), together as
 * `{ addresses, match }`. An allowed request touches no bucket and gets no
 * rate-limit header, in both layers.
 *
 * FRL's example lets in any request that sends `x-app-client-id:
 * internal-usage`: any client can send that. Here the header must carry a
 * secret shared with your internal services.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

/** The secret internal services send in `x-app-client-id` (from your secrets in real life). */
export const INTERNAL_CLIENT_SECRET = 'internal-7c1f9e2a4b6d8e0f'

export const example: Example = {
  about: 'An allow-list: 192.168.0.10, 10.0.0.0/8 and requests carrying the internal secret are never limited; others get 3 per IP at once, then 1/s.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: { capacity: 3, refillPerSecond: 1 },
      allowList: {
        addresses: ['192.168.0.10', '10.0.0.0/8'], // FRL: allowList: ['192.168.0.10'], exact keys only
        match: (request) => request.headers['x-app-client-id'] === INTERNAL_CLIENT_SECRET
      }
    })
    app.get('/', async () => ({ hello: 'world' }))
    return app
  },
  tryIt: (url) => `for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 200 200 429
for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' -H 'x-app-client-id: ${INTERNAL_CLIENT_SECRET}' ${url}/; done; echo   # 200 200 200 200 200 200: allowed
curl -i -H 'x-app-client-id: ${INTERNAL_CLIENT_SECRET}' ${url}/; echo   # 200, and no RateLimit headers: no bucket was touched`
}
