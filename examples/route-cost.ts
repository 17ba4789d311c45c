/**
 * Per-route costs and quotas on the app layer. Every user has 20 tokens,
 * refilled at 2 per second; `GET /items` costs 1, `GET /search` costs 1 to 5 by
 * page size, and `POST /export` costs 10 and also has a quota of its own: 2 at
 * once, then one a minute. A request passes only when every bucket it touches can pay.
 */
import Fastify, { type FastifyRequest } from 'fastify'
import tollgate, { memoryStore } from 'fastify-tollgate'
import { addDemoAuth, tokenLine } from './auth.js'
import type { Example } from './example.js'

/** 1 token per 25 results asked for, at least 1, at most 5. */
export function searchCost (request: FastifyRequest): number {
  const size = Number((request.query as { size?: string }).size ?? 25)
  return Number.isFinite(size) ? Math.min(5, Math.max(1, Math.ceil(size / 25))) : 1
}

export const example: Example = {
  about: 'Route costs and quotas: 20 tokens per user (2/s); GET /items costs 1, GET /search 1–5 by size, POST /export 10 with a quota of 2 then 1 a minute.',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, {
      store: memoryStore({ clock }),
      app: { tiers: { default: { capacity: 20, refillPerSecond: 2 } } }
    })
    await addDemoAuth(app)
    app.get('/items', async () => ({ items: [] }))
    app.get('/search', { config: { rateLimit: { cost: searchCost } } }, async () => ({ results: [] }))
    app.post('/export', {
      config: { rateLimit: { cost: 10, quota: { default: { capacity: 2, refillPerSecond: 1 / 60 } } } }
    }, async () => ({ exported: true }))
    return app
  },
  tryIt: (url) => `${tokenLine(url, 'TOKEN', 'user=alice')}
for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' -X POST -H "Authorization: Bearer $TOKEN" ${url}/export; done; echo   # 200 200 429: two exports spend alice's 20 tokens
${tokenLine(url, 'BOB', 'user=bob')}
curl -i -H "Authorization: Bearer $BOB" '${url}/search?size=100'; echo   # 200, costs 4: RateLimit shows r=16 of bob's 20`
}
