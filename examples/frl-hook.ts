/**
 * @fastify/rate-limit's "custom `hook`" example, translated: limit by user id
 * after authentication has set it, and by IP when there is none.
 *
 * FRL moves its one limiter to `preHandler` and keys it by `request.userId ||
 * request.ip`. Here that is the app layer: it runs in `preHandler` by default
 * (`app.hook` moves it to `preValidation` or `preParsing`), after the route's
 * own hooks of that kind, so a user set by any earlier hook is seen;
 * `app.identify` returns the user, `undefined` for anonymous (keyed by client
 * IP, in a key space of its own). The edge can stay in `onRequest` for floods.
 *
 * As in FRL's example, the user id comes from the query string; it stands for
 * your authentication.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

declare module 'fastify' {
  interface FastifyRequest {
    userId: string
  }
}

export const example: Example = {
  about: 'The app layer in preHandler, keyed by a user id set by an earlier preHandler, or by IP: 5 at once, then 5 a minute each.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      app: {
        hook: 'preHandler', // the default, like FRL's `hook: 'preHandler'`
        tiers: { default: { capacity: 5, refillPerSecond: 5 / 60 } },
        identify: (request) => request.userId === '' ? undefined : { id: request.userId }
      }
    })
    app.decorateRequest('userId', '')
    app.addHook('preHandler', async (request) => {
      const { userId } = request.query as { userId?: string }
      if (typeof userId === 'string' && userId !== '') request.userId = userId
    })
    app.get('/', async (request) => ({ hello: request.userId === '' ? request.ip : request.userId }))
    return app
  },
  tryIt: (url) => `for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code} ' '${url}/?userId=alice'; done; echo   # 200 200 200 200 200 429: alice's 5
curl -i '${url}/?userId=bob'; echo   # 200, {"hello":"bob"}: bob has his own
for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 200 200 200 200 429: no user: per IP`
}
