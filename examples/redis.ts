/**
 * The demo API on the Redis store (`npm run example:redis`): run it in several
 * processes (PORT=3001, PORT=3002, …) and they share one quota.
 *
 *   REDIS_URL=redis://127.0.0.1:6379 PORT=3001 npm run example:redis
 */
import { pathToFileURL } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import { redisStore } from 'fastify-tollgate'
import { buildServer, serve } from './server.js'

export async function buildRedisServer (redisUrl: string): Promise<FastifyInstance> {
  // Recommended client options: fail fast instead of queueing while Redis is away
  // (the store bounds its own wait and falls back by failMode).
  const client = new Redis(redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 0 })
  client.on('error', () => {}) // connection errors are reported by the store, rate-limited
  // No need to wait for 'ready' here: app.ready() waits for the client (connectWaitMs).
  const app = await buildServer({
    store: redisStore({ client, failMode: 'local', timeoutMs: 50 }),
    logger: process.env.LOG === '1'
  })
  // The store never closes the client: its owner does.
  app.addHook('onClose', async () => { await client.quit() })
  return app
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await serve(await buildRedisServer(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'))
}
