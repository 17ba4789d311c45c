/**
 * @fastify/rate-limit's `groupId`, translated: `GET /otp/send` and
 * `GET /otp/resend` share one limit per client, 3 a minute, so that alternating
 * between them buys nothing.
 *
 * There is no group option here: the routes of a group carry one limiter,
 * `fastify.tollgate.limiter`, as a hook. Every route that carries it takes from
 * its bucket of the client, with the plugin's headers (`"otp";r=2;t=20`), and is
 * refused as the plugin refuses. (In FRL 11, routes with one `groupId` still
 * count apart, each up to its own `max`: fastify-rate-limit#463.)
 */
import Fastify from 'fastify'
import tollgate, { memoryStore, per } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: 'Routes grouped under one limit: /otp/send and /otp/resend share 3 per IP at once, then 3 a minute (edge: 100, then 10/s).',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 100, refillPerSecond: 10 } })

    // One bucket per client address (IPv6 grouped by /64, as the edge groups it), for every route that carries it.
    const otp = app.tollgate.limiter({ name: 'otp', ...per(3, 'minute') })

    app.get('/otp/send', { onRequest: otp }, async () => ({ sent: true }))
    app.get('/otp/resend', { onRequest: otp }, async () => ({ sent: true, again: true }))
    return app
  },
  tryIt: (url) => `for u in send resend send resend; do curl -s -o /dev/null -w '%{http_code} ' ${url}/otp/$u; done; echo   # 200 200 200 429: one limit for both routes
curl -i ${url}/otp/resend   # 429, Retry-After: 20 (or a second less)`
}
