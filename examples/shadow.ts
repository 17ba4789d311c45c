/**
 * Shadow mode: decide, count and send headers, but never refuse. Use it to
 * learn what a limit would do in production before you turn it on.
 * `GET /shadow-report` shows `fastify.tollgate.shadowReport()`: the clients and
 * tiers that would have been refused most in the last minutes. (Expose it only
 * to your operators: it names clients.)
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: 'Shadow mode: a 5-at-once, 1/s edge that never refuses; GET /shadow-report lists the clients it would have refused most.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: { capacity: 5, refillPerSecond: 1 },
      shadow: true,
      shadowReport: { minutes: 10 }
    })
    app.get('/', async () => ({ hello: 'world' }))
    app.get('/shadow-report', { config: { rateLimit: false } }, async () => app.tollgate.shadowReport({ top: 10 }))
    return app
  },
  tryIt: (url) => `for i in $(seq 8); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 200 200 200 200 200 200 200: never refused
curl -s ${url}/shadow-report; echo   # 200: {"shadow":true,"minutes":1,"wouldRefuse":3,…,"clients":[{"client":"{ip:127.0.0.1}","layer":"edge","wouldRefuse":3,…`
}
