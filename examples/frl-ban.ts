/**
 * @fastify/rate-limit's `ban` and `onBanReach`, with what exists today. A
 * penalty of its own (refused for a fixed time after repeated refusals, 429 or
 * 403, recorded in the store) is planned (issue 15).
 *
 * FRL answers 403 instead of 429 once a client was refused `ban` times more in
 * the same window. Here the same rule lives in `setErrorHandler`: each refusal
 * takes a strike from a bucket of the client's own (`fastify.tollgate.consume`,
 * keyed by the refused bucket's key); once the strikes are spent, the answer is
 * 403 and `onBanReach` is called. Strikes come back at the rate set below, so a
 * client that stops pushing is soon back to 429s, then 200s. Like FRL's, this
 * changes the status only: the client gets its tokens back as before.
 */
import Fastify, { type FastifyRequest } from 'fastify'
import tollgate, { memoryStore, RateLimitedError } from 'fastify-tollgate'
import type { Example } from './example.js'

/** FRL `ban: 2`: two refusals (429), then 403; one strike back a minute. */
export const STRIKES = { capacity: 2, refillPerSecond: 1 / 60 }

export const example: Example = {
  about: 'ban, with today\'s means: 3 per IP at once, then 1 a minute; after two 429s a client gets 403 (a penalty of its own is planned, issue 15).',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    const banned: string[] = []
    const onBanReach = (request: FastifyRequest, key: string): void => { banned.push(`${request.ip} (${key})`) }
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 3, refillPerSecond: 1 / 60 } })
    app.setErrorHandler(async (error, request, reply) => {
      if (!(error instanceof RateLimitedError)) return reply.send(error)
      const key = error.decision.buckets[0]?.key ?? request.ip
      const strike = await app.tollgate.consume(`strikes:${key}`, STRIKES)
      if (strike.allowed) return reply.send(error) // 429, as the plugin built it
      onBanReach(request, key)
      return reply.code(403).send({ statusCode: 403, error: 'Forbidden', message: 'Too many refused requests' })
    })
    app.get('/', async () => ({ hello: 'world' }))
    app.get('/banned', { config: { rateLimit: false } }, async () => ({ banned }))
    return app
  },
  tryIt: (url) => `for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 200 200 429 429 403
curl -i ${url}/banned; echo   # 200, {"banned":["127.0.0.1 ({ip:127.0.0.1}:edge)"]}`
}
