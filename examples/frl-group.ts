/**
 * @fastify/rate-limit's `groupId`, translated: `GET /otp/send` and
 * `GET /otp/resend` share one limit per client, 3 a minute, so that alternating
 * between them buys nothing.
 *
 * There is no group option here. A shared bucket is a hook that both routes
 * carry, taking from one bucket named after the group with
 * `fastify.tollgate.consume`, and refusing as the plugin refuses. (In FRL 11,
 * routes with one `groupId` still count apart, each up to its own `max`:
 * fastify-rate-limit#463.)
 */
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify'
import tollgate, { memoryStore, RateLimitedError, type BucketPolicy } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: 'Routes grouped under one limit: /otp/send and /otp/resend share 3 per IP at once, then 3 a minute (edge: 100, then 10/s).',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 100, refillPerSecond: 10 } })

    /**
     * An `onRequest` hook that takes one token from the client's bucket of `group`,
     * keyed by `request.ip` (unlike the edge, it does not group IPv6 by /64).
     */
    const groupLimit = (group: string, policy: BucketPolicy) => async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
      const decision = await app.tollgate.consume(`${group}:${request.ip}`, policy)
      if (decision.allowed) return
      const refusal = new RateLimitedError(decision)
      reply.header('retry-after', refusal.retryAfterSeconds).header('cache-control', 'no-store')
      throw refusal
    }
    const otp = groupLimit('otp', { capacity: 3, refillPerSecond: 3 / 60 })

    app.get('/otp/send', { onRequest: otp }, async () => ({ sent: true }))
    app.get('/otp/resend', { onRequest: otp }, async () => ({ sent: true, again: true }))
    return app
  },
  tryIt: (url) => `for u in send resend send resend; do curl -s -o /dev/null -w '%{http_code} ' ${url}/otp/$u; done; echo   # 200 200 200 429: one limit for both routes
curl -i ${url}/otp/resend   # 429, Retry-After: 20 (or a second less)`
}
