/**
 * The Redis side of the FRL suite translated: an app on `redisStore` over a
 * private redis-server (test/redis-server.ts), the script's time driven by the
 * test's clock (`redisStore({ clock })`), FRL's header trio (`headers: 'legacy'`).
 */
import type { Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import tollgate, { redisStore, type RedisStoreOptions, type TollgateOptions } from '../../lib/index.js'
import { logSink, manualClock } from '../helpers.js'
import type { RedisServer } from '../redis-server.js'
import type { Clock } from './frl.js'

export interface RedisApp {
  app: FastifyInstance
  clock: Clock
  client: Redis
  lines: ReturnType<typeof logSink>['lines']
}

/**
 * Fastify with the plugin on a Redis store of its own key `prefix` (the tests of a
 * file share one server), on a client that fails fast (no offline queue), as the
 * README recommends. App and client are closed when `t` ends.
 */
export async function redisApp (t: Test, server: RedisServer, prefix: string, options: Omit<TollgateOptions, 'store'>, storeOptions: Partial<RedisStoreOptions> = {}): Promise<RedisApp> {
  const client = new Redis({ port: server.port, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0 })
  client.on('error', () => {})
  const clock = manualClock()
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  t.teardown(async () => { await app.close(); client.disconnect() })
  await app.register(tollgate, { headers: 'legacy', ...options, store: redisStore({ heartbeatIntervalMs: 0, ...storeOptions, client, clock: clock.now, prefix }) })
  return { app, clock, client, lines }
}
