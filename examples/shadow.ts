/**
 * Shadow mode: decide, count and send headers, but never refuse. Use it to
 * learn what a limit would do in production before you turn it on. Here
 * `onLimit` counts the would-be refusals, and `GET /stats` shows them.
 */
import Fastify from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import type { Example } from './example.js'

export const example: Example = {
  about: 'Shadow mode: a 5-at-once, 1/s edge that never refuses; GET /stats counts the requests it would have refused.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    const wouldRefuse = { total: 0, byKey: {} as Record<string, number> }
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      edge: { capacity: 5, refillPerSecond: 1 },
      shadow: true,
      onLimit: (_request, decision) => {
        wouldRefuse.total++
        const key = decision.buckets[0]?.key ?? '?'
        wouldRefuse.byKey[key] = (wouldRefuse.byKey[key] ?? 0) + 1
      }
    })
    app.get('/', async () => ({ hello: 'world' }))
    app.get('/stats', { config: { rateLimit: false } }, async () => ({ wouldRefuse }))
    return app
  },
  tryIt: (url) => `for i in $(seq 8); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # all 200
curl -s ${url}/stats; echo                                                    # {"wouldRefuse":{"total":3,...}}`
}
