/**
 * The pool scenario's API, run as a child process (its own event loop, apart
 * from the load generators'): `node server.js '<ServerConfig as JSON>'`.
 *
 * A `pg.Pool` of 10 connections to the PostgreSQL on 127.0.0.1:5432 (user
 * `postgres`, database `test`, or `PG*` variables); `GET /work` holds one of
 * them for `SELECT pg_sleep(0.02)`, so the API serves about 500 requests a
 * second at most. A request that waits more than `connectionTimeoutMillis`
 * (1000 ms) for a connection is answered 500 `{ code: 'POOL_TIMEOUT' }` and
 * counted. Clients are told apart by `X-Forwarded-For` (`trustProxy`), users by
 * `x-user` and `x-tier` (standing for a verified token's claims).
 * `GET /stats` (exempt from both layers) reports the process's CPU and the
 * pool's counts. It prints `{"port":…}` on stdout once it listens, and exits
 * when its stdin closes (the driver ended) or on SIGTERM.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks'
import Fastify, { type FastifyRequest } from 'fastify'
import pg from 'pg'
import tollgate, { type TollgateOptions } from 'fastify-tollgate'
import { EDGE, POOL, TIERS, type ServerConfig, type ServerStats } from './config.js'

const header = (request: FastifyRequest, name: string): string | undefined => {
  const value = request.headers[name]
  return typeof value === 'string' && value !== '' ? value : undefined
}

function pluginOptions (config: ServerConfig, pool: pg.Pool): TollgateOptions {
  const options: TollgateOptions & { protect?: unknown } = {
    edge: EDGE,
    app: {
      tiers: TIERS,
      identify: (request) => {
        const id = header(request, 'x-user')
        return id === undefined ? undefined : { id, tier: header(request, 'x-tier') ?? 'default' }
      }
    }
  }
  if (config.protect) {
    options.protect = {
      gauge: { read: () => pool.waitingCount, target: 2 },
      priorities: ['vip', 'default', 'anonymous'],
      minConcurrency: 4,
      maxConcurrency: 1000,
      intervalMs: 100,
      status: 503
    }
  }
  return options
}

async function start (config: ServerConfig): Promise<void> {
  const pool = new pg.Pool({
    host: process.env.PGHOST ?? '127.0.0.1',
    port: Number(process.env.PGPORT ?? 5432),
    user: process.env.PGUSER ?? 'postgres',
    database: process.env.PGDATABASE ?? 'test',
    max: POOL.max,
    connectionTimeoutMillis: POOL.connectionTimeoutMillis
  })
  pool.on('error', () => {}) // an idle connection that breaks is replaced on the next acquire
  // Opens the ten connections now, so the first requests measure the query, not the handshake.
  await Promise.all(Array.from({ length: POOL.max }, async () => await pool.query('SELECT 1')))
  const counts = { poolTimeouts: 0, queries: 0 }
  const app = Fastify({ trustProxy: true })
  if (config.plugin) await app.register(tollgate, pluginOptions(config, pool))
  app.get('/work', async (_request, reply) => {
    try {
      await pool.query(`SELECT pg_sleep(${config.holdMs / 1000})`)
      counts.queries++
      return { ok: true }
    } catch (error) {
      if (!(error instanceof Error) || !error.message.includes('timeout exceeded when trying to connect')) throw error
      counts.poolTimeouts++
      return await reply.code(500).send({ code: 'POOL_TIMEOUT', message: 'no database connection within 1000 ms' })
    }
  })
  const delay = monitorEventLoopDelay({ resolution: 10 })
  delay.enable()
  app.get('/stats', { config: { rateLimit: false } }, async (): Promise<ServerStats> => {
    const eventLoopDelayP99Ms = delay.percentile(99) / 1e6
    delay.reset()
    return { cpu: process.cpuUsage(), ...counts, eventLoopDelayP99Ms }
  })
  const address = await app.listen({ host: '127.0.0.1', port: 0 })
  process.stdout.write(`${JSON.stringify({ port: Number(new URL(address).port) })}\n`)
  let stopping = false
  const stop = (): void => {
    if (stopping) return
    stopping = true
    setTimeout(() => process.exit(0), 2000).unref()
    void app.close().then(async () => { await pool.end() }).finally(() => process.exit(0))
  }
  process.once('SIGTERM', stop)
  process.stdin.on('end', stop).resume()
}

await start(JSON.parse(process.argv[2] ?? '{"plugin":true,"protect":false,"holdMs":20}') as ServerConfig)
