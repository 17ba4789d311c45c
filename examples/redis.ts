/**
 * The demo API on the Redis store: run it in several processes and they share
 * one quota instead of each admitting the whole of it.
 *
 *   REDIS_URL=redis://127.0.0.1:6379 PORT=3001 npm run example redis
 *   REDIS_URL=redis://127.0.0.1:6379 PORT=3002 PEER=http://127.0.0.1:3001 npm run example redis
 *
 * (the first prints the second's line; PEER tells the second where the first is).
 */
import type { FastifyInstance } from 'fastify'
import { Redis, type Cluster } from 'ioredis'
import { redisStore } from 'fastify-tollgate'
import { buildServer, demoLines } from './server.js'
import { tokenLine } from './auth.js'
import type { Example } from './example.js'

/** The client each app built by `buildOnClient` uses, for `notConnected`. */
const clients = new WeakMap<FastifyInstance, Redis | Cluster>()

/** The demo API on a Redis or Cluster client, which it closes with the app. */
export async function buildOnClient (client: Redis | Cluster, logger = false): Promise<FastifyInstance> {
  client.on('error', () => {}) // connection errors are reported by the store, rate-limited
  // No need to wait for 'ready' here: app.ready() waits for the client (connectWaitMs).
  const app = await buildServer({ store: redisStore({ client, failMode: 'local', timeoutMs: 50 }), logger })
  // The store never closes the client: its owner does.
  // disconnect(), not quit(): quit() rejects while the client is reconnecting, and the app would not close.
  app.addHook('onClose', async () => { client.disconnect() })
  clients.set(app, client)
  return app
}

/** A warning when the app's Redis client is not connected once the app is ready (the store's own log shows only with LOG=1). */
export function notConnected (app: FastifyInstance, where: string): string | undefined {
  const status = clients.get(app)?.status
  if (status === 'ready') return undefined
  return `WARNING: Redis at ${where} is NOT connected (${String(status)}). Until it is, each replica limits alone,
on its local share of each quota (failMode 'local'); the shared quotas below need it. LOG=1 shows the store's log.`
}

export async function buildRedisServer (redisUrl: string, logger = false): Promise<FastifyInstance> {
  // Recommended client options: fail fast instead of queueing while Redis is away
  // (the store bounds its own wait and falls back by failMode).
  return buildOnClient(new Redis(redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 0 }), logger)
}

/** Where the example finds Redis without `REDIS_URL`. */
export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379'

/**
 * The demo lines, then how to see two replicas on the same Redis share one quota:
 * the first tells how to start a second (PORT + 1, PEER = its own URL); the
 * second (PEER set) sends to the first.
 */
function tryIt (url: string, env: NodeJS.ProcessEnv): string {
  const redisUrl = env.REDIS_URL ?? DEFAULT_REDIS_URL
  const here = new URL(url)
  const port = Number(here.port) + 1
  const other = env.PEER ?? `${here.protocol}//${here.hostname}:${port}`
  const start = env.PEER === undefined
    ? `# Start a second one on the same Redis, in another terminal:
#   REDIS_URL=${redisUrl} PORT=${port} PEER=${url} npm run example redis
# then export as carol on each in turn: two exports in all, not two on each.`
    : `# This is the second replica; the first (PEER) is at ${env.PEER}.
# Export as carol on each in turn: two exports in all, not two on each.`
  return `${tokenLine(url, 'CAROL', 'user=carol')}   # for the two replicas, below
${demoLines(url)}

# This replica keeps its buckets in the Redis at ${redisUrl} (REDIS_URL${env.REDIS_URL === undefined ? ', unset: the default' : ''}).
${start}
for u in ${url} ${other} ${url}; do curl -s -o /dev/null -w '%{http_code} ' -X POST -H "Authorization: Bearer $CAROL" $u/export; done; echo   # 200 200 429`
}

export const example: Example = {
  about: `The demo API on redisStore: run several replicas against one Redis (REDIS_URL, default ${DEFAULT_REDIS_URL}) and they share one quota.`,
  build: async ({ env = process.env, logger } = {}) => buildRedisServer(env.REDIS_URL ?? DEFAULT_REDIS_URL, logger),
  tryIt,
  notice: (app) => notConnected(app, process.env.REDIS_URL ?? DEFAULT_REDIS_URL)
}
