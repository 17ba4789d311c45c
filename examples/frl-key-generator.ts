/**
 * @fastify/rate-limit's `keyGenerator` example, translated. FRL's one key
 * function reads proxy headers, then a session, then the IP. Here each of these
 * has its place:
 *
 * - Behind a proxy, Fastify's `trustProxy` (the proxy's address, never `true`)
 *   makes `request.ip` the client's, from `X-Forwarded-For`; the edge keys by it.
 *   Reading `X-Forwarded-For` or `X-Real-IP` yourself lets any client pick its key.
 *   Here the proxy is 127.0.0.1, so curl on this machine plays it.
 * - A signed-in user is keyed by the app layer, after authentication:
 *   `app.identify` returns the user (a session here; a Map stands in for
 *   @fastify/session). Requests with no user are keyed by client IP.
 * - For a key known before authentication (an API key), see `edge.key` in
 *   examples/api-key.ts.
 */
import Fastify, { type FastifyRequest } from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

/** Session id → user name (a session store in real life). */
export const SESSIONS = new Map([['s-alice', 'alice'], ['s-bob', 'bob']])

/** The signed-in user of a request, from its `sid` cookie. */
function sessionUser (request: FastifyRequest): string | undefined {
  const sid = /(?:^|;\s*)sid=([^;]+)/.exec(request.headers.cookie ?? '')?.[1]
  return sid === undefined ? undefined : SESSIONS.get(sid)
}

export const example: Example = {
  about: 'keyGenerator, translated: trustProxy for the client IP (edge: 20 at once, then 2/s), and a session user in the app layer (5 at once, then 5 a minute).',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger, trustProxy: '127.0.0.1' })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: { capacity: 20, refillPerSecond: 2 },
      app: {
        tiers: { default: { capacity: 5, refillPerSecond: 5 / 60 } },
        identify: (request) => {
          const user = sessionUser(request)
          return user === undefined ? undefined : { id: user } // undefined: anonymous, keyed by client IP
        }
      }
    })
    app.get('/', async (request) => ({ user: sessionUser(request) ?? null, ip: request.ip }))
    return app
  },
  tryIt: (url) => `for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code} ' -H 'Cookie: sid=s-alice' ${url}/; done; echo   # 200 200 200 200 200 429: alice's 5
curl -s -o /dev/null -w '%{http_code}\\n' -H 'Cookie: sid=s-bob' ${url}/   # 200: bob has his own
for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code} ' -H 'X-Forwarded-For: 203.0.113.7' ${url}/; done; echo   # 200 200 200 200 200 429: no session, keyed by the IP the proxy gives
curl -i -H 'X-Forwarded-For: 198.51.100.9' ${url}/; echo   # 200, {"user":null,"ip":"198.51.100.9"}: another client behind the proxy`
}
