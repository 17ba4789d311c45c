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
 * pool's counts. A twin of the API on a stand-in pool (`standIn`) serves to warm
 * the code up before a phase. It prints `{"port":…,"warmPort":…}` on stdout once
 * both listen, and exits when its stdin closes (the driver ended) or on SIGTERM.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import pg from 'pg'
import tollgate, { type TollgateOptions } from 'fastify-tollgate'
import { EDGE, POOL, TIERS, type ServerConfig, type ServerStats } from './config.js'

const header = (request: FastifyRequest, name: string): string | undefined => {
  const value = request.headers[name]
  return typeof value === 'string' && value !== '' ? value : undefined
}

function pluginOptions (config: ServerConfig, waiting: () => number): TollgateOptions {
  const options: TollgateOptions = {
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
      gauge: { read: waiting, target: 2 },
      priorities: ['vip', 'default', 'anonymous'],
      // The pool's 10 connections and the 2 waiting the gauge allows: the limit never sheds below what the pool serves.
      minConcurrency: POOL.max + 2,
      maxConcurrency: 1000,
      intervalMs: 100,
      status: 503
    }
  }
  return options
}

/** What the API's handler does with the database, and how many wait for it. */
interface Database { hold: () => Promise<void>, waiting: () => number }

async function connect (holdMs: number): Promise<{ database: Database, end: () => Promise<void> }> {
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
  const sql = `SELECT pg_sleep(${holdMs / 1000})`
  return { database: { hold: async () => { await pool.query(sql) }, waiting: () => pool.waitingCount }, end: async () => { await pool.end() } }
}

/**
 * The twin's stand-in for the pool: a wait of `holdMs`, no connection; "waiting" is what a pool of
 * 10 would have waiting. The twin runs the same code as the API (the plugin, Fastify, the handler)
 * on its own state, so the driver can warm that code up before a phase without touching the API's
 * buckets or controller: the API starts the phase as a service that has been running does.
 */
function standIn (holdMs: number): Database {
  let inFlight = 0
  return {
    hold: async () => {
      inFlight++
      await new Promise((resolve) => setTimeout(resolve, holdMs))
      inFlight--
    },
    waiting: () => Math.max(0, inFlight - POOL.max)
  }
}

async function api (config: ServerConfig, database: Database, counts: Omit<ServerStats, 'cpu' | 'eventLoopDelayP99Ms'>): Promise<FastifyInstance> {
  const app = Fastify({ trustProxy: true })
  if (config.plugin) await app.register(tollgate, pluginOptions(config, database.waiting))
  app.get('/work', async (_request, reply) => {
    try {
      await database.hold()
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
  return app
}

async function start (config: ServerConfig): Promise<void> {
  const { database, end } = await connect(config.holdMs)
  const app = await api(config, database, { poolTimeouts: 0, queries: 0 })
  const twin = await api(config, standIn(config.holdMs), { poolTimeouts: 0, queries: 0 })
  const port = async (one: FastifyInstance): Promise<number> => Number(new URL(await one.listen({ host: '127.0.0.1', port: 0 })).port)
  process.stdout.write(`${JSON.stringify({ port: await port(app), warmPort: await port(twin) })}\n`)
  let stopping = false
  const stop = (): void => {
    if (stopping) return
    stopping = true
    setTimeout(() => process.exit(0), 2000).unref()
    void Promise.all([app.close(), twin.close()]).then(end).finally(() => process.exit(0))
  }
  process.once('SIGTERM', stop)
  process.stdin.on('end', stop).resume()
}

await start(JSON.parse(process.argv[2] ?? '{"plugin":true,"protect":false,"holdMs":20}') as ServerConfig)
