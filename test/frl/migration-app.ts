/**
 * The app of MIGRATING.md's "A worked example", after the move from
 * @fastify/rate-limit: everything below this comment is the text of that block,
 * to the character (test/docs/blocks.test.ts holds them equal).
 * test/frl/migration-app.test.ts runs it as three replica processes on one
 * redis-server (`PORT=0`, `REDIS_URL`) and drives them over HTTP.
 */
import Fastify, { type FastifyRequest } from 'fastify'
import { Redis } from 'ioredis'
import tollgate, { RateLimitedError, redisStore } from 'fastify-tollgate'

// Your lookup of API keys, as before (a stand-in: any key is a customer's, `vip-…` a VIP's).
function customerOf (request: FastifyRequest): { id: string, tier: string } | undefined {
  const key = request.headers['x-api-key']
  if (typeof key !== 'string' || key === '') return undefined
  return { id: key, tier: key.startsWith('vip-') ? 'vip' : 'default' }
}

// The replicas' load balancer appends X-Forwarded-For: trust its address, never `true`.
const app = Fastify({ logger: true, trustProxy: process.env.TRUSTED_PROXY ?? '127.0.0.1' })
const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { enableOfflineQueue: false, maxRetriesPerRequest: 0 })
client.on('error', () => {}) // the store logs outages itself
app.addHook('onClose', async () => { client.disconnect() })
process.once('SIGTERM', () => { void app.close() })

await app.register(tollgate, {
  store: redisStore({ client, failMode: 'open' }),
  headers: 'legacy',
  allowList: ['10.0.0.0/8'],
  edge: { capacity: 100, refillPerSecond: 100 / 60, key: (request) => customerOf(request)?.id },
  app: {
    global: false,
    tiers: { default: { capacity: 100, refillPerSecond: 100 / 60 }, vip: { capacity: 300, refillPerSecond: 300 / 60 } },
    identify: customerOf
  }
})

app.setErrorHandler((error, _request, reply) => {
  if (!(error instanceof RateLimitedError)) return reply.send(error)
  const statusCode = error.statusCode ?? 429
  return reply.code(statusCode).send({ statusCode, error: 'slow_down', retryInSeconds: error.retryAfterSeconds ?? null })
})

app.get('/health', { config: { rateLimit: false } }, async () => 'ok')
app.get('/items', async () => [])
app.post('/login', {
  config: {
    rateLimit: {
      replace: true,
      edge: { capacity: 5, refillPerSecond: 5 / 60, key: 'ip' },
      penalty: { after: 4, withinSeconds: 60, seconds: 60, status: 403 }
    }
  }
}, async () => ({ welcome: true }))
app.get<{ Params: { id: string } }>('/reports/:id', {
  config: {
    rateLimit: {
      replace: true,
      quota: { default: { capacity: 100, refillPerSecond: 100 / 60 }, vip: { capacity: 300, refillPerSecond: 300 / 60 } }
    }
  }
}, async (request) => ({ report: request.params.id }))

await app.listen({ port: Number(process.env.PORT ?? 3000) })
