/**
 * The demo API on the Redis store: run it in several processes and they share
 * one quota instead of each admitting the whole of it.
 *
 *   REDIS_URL=redis://127.0.0.1:6379 PORT=3001 npm run example redis
 *   REDIS_URL=redis://127.0.0.1:6379 PORT=3002 npm run example redis
 */
import type { FastifyInstance } from 'fastify'
import { Redis, type Cluster } from 'ioredis'
import { redisStore } from 'fastify-tollgate'
import { buildServer, demoLines } from './server.js'
import type { Example } from './example.js'

/** The demo API on a Redis or Cluster client, which it closes with the app. */
export async function buildOnClient (client: Redis | Cluster, logger = false): Promise<FastifyInstance> {
  client.on('error', () => {}) // connection errors are reported by the store, rate-limited
  // No need to wait for 'ready' here: app.ready() waits for the client (connectWaitMs).
  const app = await buildServer({ store: redisStore({ client, failMode: 'local', timeoutMs: 50 }), logger })
  // The store never closes the client: its owner does.
  app.addHook('onClose', async () => { await client.quit() })
  return app
}

export async function buildRedisServer (redisUrl: string, logger = false): Promise<FastifyInstance> {
  // Recommended client options: fail fast instead of queueing while Redis is away
  // (the store bounds its own wait and falls back by failMode).
  return buildOnClient(new Redis(redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 0 }), logger)
}

export const example: Example = {
  about: 'The demo API on redisStore: run several replicas against one Redis and they share one quota (REDIS_URL, default redis://127.0.0.1:6379).',
  build: async ({ env = process.env, logger } = {}) => buildRedisServer(env.REDIS_URL ?? 'redis://127.0.0.1:6379', logger),
  tryIt: (url) => `${demoLines(url)}
# Start a second replica (PORT=3001 npm run example redis) and alternate: the exports share one quota.`
}
