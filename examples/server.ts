/**
 * The demo API (`npm start`): both layers on the in-memory store, with @fastify/jwt.
 *
 *   GET  /token?user=alice&tier=vip   mints a demo token (tier optional: default or vip)
 *   GET  /                            costs 1
 *   POST /export                      costs 10 of the user's quota, and has a quota of its own
 *   GET  /health                      exempt from both layers
 */
import { pathToFileURL } from 'node:url'
import Fastify, { type FastifyInstance } from 'fastify'
import jwt from '@fastify/jwt'
import tollgate, { memoryStore, type Store } from 'fastify-tollgate'

export interface DemoOptions {
  /** Where buckets live. Default: a fresh memoryStore(). */
  store?: Store
  /** Secret for the demo tokens. */
  secret?: string
  logger?: boolean
}

export async function buildServer ({ store = memoryStore(), secret = 'demo-secret-do-not-use-in-production', logger = false }: DemoOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({ logger })

  // 1. The plugin first, so its edge hook is the first onRequest hook.
  await app.register(tollgate, {
    store,
    edge: { capacity: 100, refillPerSecond: 50 }, // per client IP, before auth
    app: {
      tiers: {
        default: { capacity: 20, refillPerSecond: 5 },
        vip: { capacity: 200, refillPerSecond: 50 },
        anonymous: { capacity: 10, refillPerSecond: 1 } // no valid token: keyed by IP
      }
    }
  })

  // 2. Authentication: verify a bearer token when there is one. A bad token
  //    leaves request.user null: the request is anonymous, never a better tier.
  await app.register(jwt, { secret })
  app.addHook('onRequest', async (request) => {
    if (request.headers.authorization === undefined) return
    try { await request.jwtVerify() } catch { /* anonymous */ }
  })

  // 3. Routes.
  app.get('/token', async (request) => {
    const { user = 'alice', tier = 'default' } = request.query as { user?: string, tier?: string }
    return { token: app.jwt.sign({ sub: user, tier }, { expiresIn: '1h' }) }
  })
  app.get('/', async (request) => ({ hello: request.user ?? 'anonymous' }))
  app.post('/export', {
    config: { rateLimit: { cost: 10, quota: { default: { capacity: 3, refillPerSecond: 0.05 }, vip: { capacity: 30, refillPerSecond: 0.5 } } } }
  }, async () => ({ exported: true }))
  app.get('/health', { config: { rateLimit: false } }, async () => ({ ok: true }))
  return app
}

/** Listens on HOST:PORT (default 127.0.0.1:3000), prints curl lines to try, and closes on SIGINT or SIGTERM. */
export async function serve (app: FastifyInstance): Promise<void> {
  const port = Number(process.env.PORT ?? 3000)
  const url = await app.listen({ port, host: process.env.HOST ?? '127.0.0.1' })
  process.stdout.write(`fastify-tollgate demo listening on ${url}

Try it:
  TOKEN=$(curl -s '${url}/token?user=alice' | node -pe 'JSON.parse(require("fs").readFileSync(0)).token')
  curl -i -H "Authorization: Bearer $TOKEN" ${url}/                 # 200, RateLimit headers for edge and app
  for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code}\\n' -X POST -H "Authorization: Bearer $TOKEN" ${url}/export; done   # 200 200 429
  VIP=$(curl -s '${url}/token?user=victor&tier=vip' | node -pe 'JSON.parse(require("fs").readFileSync(0)).token')
  curl -i -X POST -H "Authorization: Bearer $VIP" ${url}/export       # VIP: a larger quota of its own
  for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # no token: 10 per IP (GET /token counts too), then 429
  curl -i ${url}/health                                               # exempt: no RateLimit headers

Press Ctrl+C to stop.
`)
  const stop = (): void => { void app.close().then(() => process.exit(0)) }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await serve(await buildServer({ logger: process.env.LOG === '1' }))
}
