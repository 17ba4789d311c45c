/**
 * The pool scenario's settings, shared by the API process (server.ts) and the
 * driver: the pool, the plugin's limits, and what the server reports.
 */
export interface ServerConfig {
  /** Register fastify-tollgate (edge per IP, app layer per user and tier). */
  plugin: boolean
  /** Add the plugin's capacity protection on the pool's waiting queue. */
  protect: boolean
  /** How long each request holds its connection (`SELECT pg_sleep`), in ms. */
  holdMs: number
}

/** The pool's size and how long a request may wait for one of its connections. */
export const POOL = { max: 10, connectionTimeoutMillis: 1000 }
/** The demo's hold: 20 ms, so the pool serves about 500 requests a second. */
export const HOLD_MS = 20
/** What the pool serves at most, per second, when each request holds a connection `holdMs`. */
export const capacityPerSecond = (holdMs: number): number => POOL.max * 1000 / holdMs
/** Per client address: 50 at once, then 25 a second. */
export const EDGE = { capacity: 50, refillPerSecond: 25 }
/** Per user by tier; a request without a user is `anonymous`, keyed by its address. */
export const TIERS = {
  vip: { capacity: 40, refillPerSecond: 20 },
  default: { capacity: 20, refillPerSecond: 10 },
  anonymous: { capacity: 10, refillPerSecond: 3 }
}

/** What `GET /stats` answers. */
export interface ServerStats {
  /** process.cpuUsage(): user and system, in microseconds. */
  cpu: { user: number, system: number }
  /** Requests answered 500 POOL_TIMEOUT since the start. */
  poolTimeouts: number
  /** Queries that ran. */
  queries: number
  /** The p99 of the event loop's delay since the previous `GET /stats`, in ms. */
  eventLoopDelayP99Ms: number
}
