/**
 * @fastify/rate-limit's "options on the endpoint itself", translated: no limit
 * by default (FRL `global: false`), and routes that ask for one.
 *
 * `edge: { global: false }` keeps no bucket for every request; a route's
 * `config.rateLimit.edge` gives it a bucket of its own at the edge, per client
 * IP, taken in `onRequest` (before authentication and body parsing). FRL's
 * global allow-list becomes `allowList`; its route-level allow-list, a `match`
 * function that looks at the route. (FRL's `redis` option: `store:
 * redisStore({ client })`. Its OTP routes with a `groupId`: examples/frl-group.ts;
 * its callbacks: examples/frl-callbacks.ts.)
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

/** FRL `{ max: 3, timeWindow: '1 minute' }`: 3 at once, then 3 a minute. */
const threeAMinute = { edge: { capacity: 3, refillPerSecond: 3 / 60 } }

export const example: Example = {
  about: 'Only the routes that ask are limited: / and /private 3 per IP at once, then 3 a minute; /public never; /public/sub-rated-1 3000 a minute, never from 127.0.0.1.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: { global: false }, // FRL global: false
      allowList: {
        addresses: ['192.168.0.10'], // FRL's global allowList
        match: (request) => request.routeOptions.url === '/public/sub-rated-1' && request.ip === '127.0.0.1' // FRL's route allowList
      }
    })
    app.get('/', { config: { rateLimit: threeAMinute } }, async () => ({ hello: 'from the root' }))
    app.get('/private', { config: { rateLimit: threeAMinute } }, async () => ({ hello: 'from private' }))
    app.get('/public', async () => ({ hello: 'from public' })) // no limit
    app.get('/public/sub-rated-1', {
      config: { rateLimit: { edge: { capacity: 3000, refillPerSecond: 50 } } } // FRL: the plugin's max, 3000 a minute
    }, async () => ({ hello: 'from sub-rated-1' }))
    return app
  },
  tryIt: (url) => `for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 200 200 429
for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code} ' ${url}/private; done; echo   # 200 200 200 429: a bucket of its own
for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' ${url}/public; done; echo   # 200 200 200 200 200 200: not limited
curl -i ${url}/public/sub-rated-1; echo   # 200, no RateLimit headers: 127.0.0.1 is allowed on this route`
}
