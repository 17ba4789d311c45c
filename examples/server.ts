/**
 * The demo API (`npm start`): both layers on the in-memory store, with @fastify/jwt.
 *
 *   GET  /token?user=alice&tier=vip   mints a demo token (tier optional: default or vip)
 *   GET  /                            costs 1
 *   POST /export                      costs 10 of the user's quota, and has a quota of its own
 *   GET  /health                      exempt from both layers
 */
import Fastify, { type FastifyInstance } from 'fastify'
import tollgate, { memoryStore, type Store } from 'fastify-tollgate'
import { addDemoAuth, tokenLine } from './auth.js'
import type { Example } from './example.js'

export interface DemoOptions {
  /** Where buckets live. Default: a fresh memoryStore(). */
  store?: Store | undefined
  logger?: boolean | undefined
}

export async function buildServer ({ store = memoryStore(), logger = false }: DemoOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({ logger })

  // 1. The plugin first, so its edge hook is the first onRequest hook.
  await app.register(tollgate, {
    store,
    edge: { capacity: 400, refillPerSecond: 100 }, // per client IP, before auth: a flood guard above any one user's tier
    app: {
      tiers: {
        default: { capacity: 20, refillPerSecond: 5 },
        vip: { capacity: 200, refillPerSecond: 50 },
        anonymous: { capacity: 10, refillPerSecond: 1 } // no valid token: keyed by IP
      }
    }
  })

  // 2. Authentication, after the edge.
  await addDemoAuth(app)

  // 3. Routes.
  app.get('/', async (request) => ({ hello: request.user ?? 'anonymous' }))
  app.post('/export', {
    config: { rateLimit: { cost: 10, quota: { default: { capacity: 3, refillPerSecond: 0.05 }, vip: { capacity: 30, refillPerSecond: 0.5 } } } }
  }, async () => ({ exported: true }))
  app.get('/health', { config: { rateLimit: false } }, async () => ({ ok: true }))
  return app
}

/**
 * The lines to try against the demo API, on any store. Pasted as one block, each
 * gives the statuses its comment starts with (`…`: the one before, more times).
 */
export const demoLines = (url: string): string => `${tokenLine(url, 'TOKEN', 'user=alice')}
curl -i -H "Authorization: Bearer $TOKEN" ${url}/; echo           # 200, RateLimit headers for the edge and alice's bucket
${tokenLine(url, 'BOB', 'user=bob')}
for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' -X POST -H "Authorization: Bearer $BOB" ${url}/export; done; echo   # 200 200 429: bob's 20 tokens pay for two exports at 10
${tokenLine(url, 'VIP', 'user=victor&tier=vip')}
curl -i -X POST -H "Authorization: Bearer $VIP" ${url}/export; echo # 200: a VIP has 200 tokens, and 30 exports of its own
for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 … 429 …: no token: 10 per IP (GET /token is exempt)
curl -i ${url}/health; echo                                         # 200, exempt: no RateLimit headers`

export const example: Example = {
  about: 'The demo API: a per-IP edge, JWT tiers (default, vip, anonymous), POST /export costing 10 with a quota of its own.',
  build: async ({ clock, logger } = {}) => buildServer({ store: memoryStore({ clock }), logger }),
  tryIt: demoLines
}
