/**
 * The Redis store's options: their types, and the one check that turns what the
 * user gave into a plain object of checked values (defaults filled in). Throws
 * the coded invalid-option error on the first option that is wrong, in the order
 * below.
 */
import { keysOf, REDIS_STORE_OPTIONS } from '../../config/rows.js'
import { checkFunction, checkInteger, checkKnownKeys, checkNumber, checkObject, checkTimer, expected, failOption } from '../../config/check.js'
import { MAX_BATCH } from './batcher.js'
import type { RedisClientLike } from './client.js'

/** What to do when Redis cannot answer in time. */
export type FailMode = 'open' | 'closed' | 'local'

export interface RedisStoreOptions {
  /** An ioredis `Redis` or `Cluster`. Recommended: `enableOfflineQueue: false`. Owned by you. */
  client: RedisClientLike
  /** Prepended to every key. Default `'tollgate:'`. Must not contain `{` or `}`. */
  prefix?: string | undefined
  /**
   * The silence from Redis a call waits out, in ms. Default 50. A call fails once it
   * has waited this long and no call on its connection (its Cluster node) was
   * answered in the last `timeoutMs` (see lib/stores/redis/bounded-wait.ts). Every timer
   * option (this one, `heartbeatIntervalMs`, `probeIntervalMs`, `connectWaitMs`) is
   * at most 2^31 − 1 ms, the longest delay a Node timer keeps.
   */
  timeoutMs?: number | undefined
  /** On an error or a timeout: `'open'` allows, `'closed'` refuses with 503, `'local'` (default) uses a local share. */
  failMode?: FailMode | undefined
  /** `'local'` mode: each replica's share is `(1 + headroom) / live replicas` of every quota. Default 0.2. */
  fallbackHeadroom?: number | undefined
  /** Live replicas assumed until the first heartbeat answers. Default 1. */
  replicas?: number | undefined
  /** How often this replica announces itself, in ms (a beat counts for 3 intervals); 0 disables. Default 2000. */
  heartbeatIntervalMs?: number | undefined
  /** Consecutive failed calls that open the circuit breaker. Default 3. */
  breakerThreshold?: number | undefined
  /** While the breaker is open, one call probes Redis this often, in ms. Default 1000. */
  probeIntervalMs?: number | undefined
  /** Most refusals remembered locally (0 disables the deny cache). Default 10 000. */
  denyCacheSize?: number | undefined
  /**
   * Most decisions in one script call, from 1 to `MAX_BATCH` (10 000). Default 500.
   * A script call holds Redis for its whole run, so keep it short.
   */
  maxBatch?: number | undefined
  /** TTL of a bucket that never refills (refill 0), in ms. Default one day. */
  neverFullTtlMs?: number | undefined
  /** Fewest ms between two log lines of one kind during an outage. Default 10 000. */
  logIntervalMs?: number | undefined
  /**
   * At `app.ready()`, how long to wait for a client that is still connecting, in ms,
   * so that a replica starts on the shared quota (and knows the live replicas).
   * Past it the app starts anyway and the store decides by `failMode`. Default 3000.
   */
  connectWaitMs?: number | undefined
  /**
   * Tests only: a clock (ms) passed to the script instead of Redis `TIME`, also used
   * locally. Keys then all get `neverFullTtlMs`, since Redis expires keys in its own time.
   */
  clock?: (() => number) | undefined
}

const OPTION_KEYS = keysOf(REDIS_STORE_OPTIONS)

/** The options, checked, with their defaults: every one set. */
export interface CheckedOptions {
  client: RedisClientLike
  prefix: string
  timeoutMs: number
  failMode: FailMode
  fallbackHeadroom: number
  replicas: number
  heartbeatIntervalMs: number
  breakerThreshold: number
  probeIntervalMs: number
  denyCacheSize: number
  maxBatch: number
  neverFullTtlMs: number
  logIntervalMs: number
  connectWaitMs: number
  /** Undefined: Redis `TIME` (and `performance.now()` locally). */
  clock: (() => number) | undefined
}

/** Checks `options` (as `redisStore(options)` was given them); returns them with their defaults. */
export function checkOptions (options: RedisStoreOptions): CheckedOptions {
  const fail = failOption
  const given = checkObject(fail, 'redisStore', options)
  checkKnownKeys(fail, 'redisStore', given, OPTION_KEYS)
  const client = given.client as Partial<RedisClientLike> | undefined
  if (typeof client !== 'object' || client === null || typeof client.defineCommand !== 'function') {
    expected(fail, 'redisStore.client', 'an ioredis Redis or Cluster client', client)
  }
  const prefix = given.prefix ?? 'tollgate:'
  if (typeof prefix !== 'string' || /[{}]/.test(prefix)) expected(fail, 'redisStore.prefix', 'a string without `{` or `}`', prefix)
  const failMode = given.failMode ?? 'local'
  if (failMode !== 'open' && failMode !== 'closed' && failMode !== 'local') {
    expected(fail, 'redisStore.failMode', "'open', 'closed' or 'local'", failMode)
  }
  return {
    client: client as RedisClientLike,
    prefix,
    failMode,
    timeoutMs: checkTimer(fail, 'redisStore.timeoutMs', given.timeoutMs ?? 50, 1),
    fallbackHeadroom: checkNumber(fail, 'redisStore.fallbackHeadroom', given.fallbackHeadroom ?? 0.2, 0),
    replicas: checkInteger(fail, 'redisStore.replicas', given.replicas ?? 1, 1),
    heartbeatIntervalMs: checkTimer(fail, 'redisStore.heartbeatIntervalMs', given.heartbeatIntervalMs ?? 2000, 0, true),
    breakerThreshold: checkInteger(fail, 'redisStore.breakerThreshold', given.breakerThreshold ?? 3, 1),
    probeIntervalMs: checkTimer(fail, 'redisStore.probeIntervalMs', given.probeIntervalMs ?? 1000, 1),
    denyCacheSize: checkInteger(fail, 'redisStore.denyCacheSize', given.denyCacheSize ?? 10_000, 0),
    maxBatch: checkInteger(fail, 'redisStore.maxBatch', given.maxBatch ?? 500, 1, MAX_BATCH),
    neverFullTtlMs: checkInteger(fail, 'redisStore.neverFullTtlMs', given.neverFullTtlMs ?? 86_400_000, 1),
    logIntervalMs: checkNumber(fail, 'redisStore.logIntervalMs', given.logIntervalMs ?? 10_000, 0),
    connectWaitMs: checkTimer(fail, 'redisStore.connectWaitMs', given.connectWaitMs ?? 3000, 0),
    clock: given.clock === undefined ? undefined : checkFunction<() => number>(fail, 'redisStore.clock', given.clock)
  }
}
