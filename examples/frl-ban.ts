/**
 * @fastify/rate-limit's `ban` and `onBanReach`, translated: the plugin's
 * `penalty`.
 *
 * FRL answers 403 once a client's count in the window exceeds `max + ban`: with
 * `ban: 2`, two refusals (429), then 403 until the window ends. Here
 * `penalty: { after: ban + 1, withinSeconds, seconds, status: 403 }` does the
 * same: the third refusal in quick succession starts a penalty, and the client
 * gets 403 `TOLLGATE_PENALIZED` for `seconds`, on every replica (the penalty is
 * kept in the store), with `Retry-After` until its end. FRL's ban lasts for the
 * rest of its window: `seconds` set to the window's length is its longest.
 * Refusals are counted in each process: a client spread over N replicas may be
 * refused up to N × `after` times before its penalty.
 *
 * `onBanReach(request, key)` is `onLimit`, on the refusal whose
 * `decision.penalty.state` is `'started'` (FRL calls it on every banned request:
 * those are `'in force'`).
 */
import Fastify, { type FastifyRequest } from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

/** FRL `ban: 2` with `timeWindow: '1 minute'`: a penalty on the third refusal, 403 for a minute. */
export const BAN = { after: 3, withinSeconds: 60, seconds: 60, status: 403 } as const

export const example: Example = {
  about: 'ban, as a penalty: 3 per IP at once, then 1 a minute; after two 429s a client gets 403 for a minute.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    const banned: string[] = []
    const onBanReach = (request: FastifyRequest, key: string): void => { banned.push(`${request.ip} (${key})`) }
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: { capacity: 3, refillPerSecond: 1 / 60, penalty: BAN },
      onLimit: (request, decision) => {
        if (decision.penalty?.state === 'started') onBanReach(request, decision.buckets[0]?.key ?? request.ip)
      }
    })
    app.get('/', async () => ({ hello: 'world' }))
    app.get('/banned', { config: { rateLimit: false } }, async () => ({ banned }))
    return app
  },
  tryIt: (url) => `for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 200 200 429 429 403 403
curl -i ${url}/banned; echo   # 200, {"banned":["127.0.0.1 ({ip:127.0.0.1}:edge)"]}`
}
