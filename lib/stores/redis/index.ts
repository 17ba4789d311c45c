/**
 * The Redis store: one quota shared by every replica.
 *
 * - One Lua script decides (scripts/consume.lua), with Redis `TIME` as the one clock.
 * - Decisions asked for in one event-loop turn go to Redis as one script call per
 *   node (micro-batching).
 * - A key refused until T is refused locally until T (the deny cache).
 * - Every call is bounded by `timeoutMs` of silence from Redis; on an error or a
 *   timeout, `failMode` decides, and a circuit breaker stops calling a dead Redis
 *   and probes it.
 * - `peek`, `refund` and `reset` (one bucket each, for `fastify.tollgate`) call a
 *   second script of the family at once. A peek follows `failMode`; a refund or a
 *   reset that Redis does not take rejects with `StoreUnavailableError`, whatever
 *   `failMode`. Both first clear the key's local state (deny cache, fallback).
 */
import { randomUUID } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { tokensNeeded } from '../../engine/bucket.js'
import type { BucketPolicy } from '../../types/engine.js'
import { StoreUnavailableError } from '../../output/errors.js'
import { type BucketDebit, type BucketRequest, type BucketSettlement, type Store, type StoreDecision, type StoreLogger, type StoreReading } from '../../types/store.js'
import { isUnshared, overdraws, sharePolicy } from '../../engine/share.js'
import {   checkFunction, checkInteger, checkKnownKeys, checkNumber, checkObject, checkTimer, expected, failOption } from '../../config/check.js'
import { publishStore, type StoreMessage } from '../../output/diagnostics.js'
import { BoundedWait } from './bounded-wait.js'
import { CircuitBreaker, type BreakerState } from './circuit-breaker.js'
import { clusterSlot } from './cluster-slot.js'
import { MemoryStore } from '../memory.js'
import { DenyCache } from './deny-cache.js'
import { SINGLE_NODE } from './cluster-slot.js'
import { callScript, MAX_BATCH, MicroBatcher, type Pending, type ScriptDecision, type ScriptCallOptions } from './batcher.js'
import type { RedisClientLike, ScriptCall } from './client.js'
import { callBucketScript, parseReading, type BucketOperation, type BucketScriptOptions } from './bucket-script.js'
import { defineScripts } from './scripts.js'
import { parseNumber } from './reply.js'
import { callSettleScript } from './settle-script.js'

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
   * answered in the last `timeoutMs` (see lib/stores/bounded-wait.ts). Every timer
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

/** The heartbeat's sorted set; hash-tagged like every other key. */
const REPLICAS_KEY = '{replicas}'
const OPTION_KEYS = [
  'client', 'prefix', 'timeoutMs', 'failMode', 'fallbackHeadroom', 'replicas', 'heartbeatIntervalMs', 'breakerThreshold',
  'probeIntervalMs', 'denyCacheSize', 'maxBatch', 'neverFullTtlMs', 'logIntervalMs', 'connectWaitMs', 'clock'
]
const ignore = (): void => {}
const silent: StoreLogger = { info: ignore, warn: ignore, error: ignore }

export class RedisStore implements Store {
  readonly quotaShare = 1
  readonly prefix: string
  readonly failMode: FailMode
  private readonly client: RedisClientLike
  private readonly heartbeatCommand: ScriptCall
  /** Every call to Redis goes through it: bounded by `timeoutMs` of silence. */
  private readonly bounded: BoundedWait
  private readonly fallbackHeadroom: number
  private readonly neverFullTtlMs: number
  private readonly logIntervalMs: number
  private readonly connectWaitMs: number
  private readonly now: () => number
  /** This process's clock (ms): the local fallback's, and the edge modes' that decide locally. */
  readonly localClock: () => number
  private readonly replicaId = randomUUID()
  private readonly heartbeatIntervalMs: number
  private heartbeatTimer: NodeJS.Timeout | undefined
  private logger: StoreLogger = silent
  private readonly lastLogged = new Map<string, { atMs: number, suppressed: number }>()

  private readonly script: ScriptCallOptions
  private readonly bucketScript: BucketScriptOptions
  private readonly settleScript: ScriptCallOptions
  private readonly maxBatch: number
  private readonly batcher: MicroBatcher
  private readonly breaker: CircuitBreaker

  /** Live replicas, from the heartbeat. */
  liveReplicas: number
  private readonly fallback: MemoryStore
  /** The deny cache; `undefined` when `denyCacheSize` is 0. */
  private readonly denials: DenyCache | undefined

  constructor (options: RedisStoreOptions) {
    const fail = failOption
    const given = checkObject(fail, 'redisStore', options)
    checkKnownKeys(fail, 'redisStore', given, OPTION_KEYS)
    const client = given.client as Partial<RedisClientLike> | undefined
    if (typeof client !== 'object' || client === null || typeof client.defineCommand !== 'function') {
      expected(fail, 'redisStore.client', 'an ioredis Redis or Cluster client', client)
    }
    this.client = client as RedisClientLike
    const prefix = given.prefix ?? 'tollgate:'
    if (typeof prefix !== 'string' || /[{}]/.test(prefix)) expected(fail, 'redisStore.prefix', 'a string without `{` or `}`', prefix)
    this.prefix = prefix
    const failMode = given.failMode ?? 'local'
    if (failMode !== 'open' && failMode !== 'closed' && failMode !== 'local') {
      expected(fail, 'redisStore.failMode', "'open', 'closed' or 'local'", failMode)
    }
    this.failMode = failMode
    this.bounded = new BoundedWait(checkTimer(fail, 'redisStore.timeoutMs', given.timeoutMs ?? 50, 1))
    this.fallbackHeadroom = checkNumber(fail, 'redisStore.fallbackHeadroom', given.fallbackHeadroom ?? 0.2, 0)
    this.liveReplicas = checkInteger(fail, 'redisStore.replicas', given.replicas ?? 1, 1)
    this.heartbeatIntervalMs = checkTimer(fail, 'redisStore.heartbeatIntervalMs', given.heartbeatIntervalMs ?? 2000, 0, true)
    const breakerThreshold = checkInteger(fail, 'redisStore.breakerThreshold', given.breakerThreshold ?? 3, 1)
    const probeIntervalMs = checkTimer(fail, 'redisStore.probeIntervalMs', given.probeIntervalMs ?? 1000, 1)
    const denyCacheSize = checkInteger(fail, 'redisStore.denyCacheSize', given.denyCacheSize ?? 10_000, 0)
    this.denials = denyCacheSize > 0 ? new DenyCache(denyCacheSize) : undefined
    const maxBatch = checkInteger(fail, 'redisStore.maxBatch', given.maxBatch ?? 500, 1, MAX_BATCH)
    this.maxBatch = maxBatch
    this.neverFullTtlMs = checkInteger(fail, 'redisStore.neverFullTtlMs', given.neverFullTtlMs ?? 86_400_000, 1)
    this.logIntervalMs = checkNumber(fail, 'redisStore.logIntervalMs', given.logIntervalMs ?? 10_000, 0)
    this.connectWaitMs = checkTimer(fail, 'redisStore.connectWaitMs', given.connectWaitMs ?? 3000, 0)
    const testClock = given.clock === undefined ? undefined : checkFunction<() => number>(fail, 'redisStore.clock', given.clock)
    this.now = testClock ?? ((): number => performance.now())
    this.localClock = this.now
    this.fallback = new MemoryStore({ clock: this.now })
    this.breaker = new CircuitBreaker(breakerThreshold, probeIntervalMs)

    const cluster = Array.isArray(this.client.slots)
    const scripts = defineScripts(this.client, cluster)
    this.heartbeatCommand = scripts.heartbeat
    this.script = {
      client: this.client,
      command: scripts.consume,
      cluster,
      prefix,
      neverFullTtlMs: this.neverFullTtlMs,
      clock: testClock
    }
    this.bucketScript = { client: this.client, command: scripts.bucket, neverFullTtlMs: this.neverFullTtlMs, clock: testClock }
    this.settleScript = { ...this.script, command: scripts.settle }
    this.batcher = new MicroBatcher({
      maxBatch,
      nodeOf: cluster ? (buckets) => this.nodeOf((buckets[0] as BucketRequest).key) : undefined,
      send: (batch, node) => { this.send(batch, node) }
    })

    if (this.heartbeatIntervalMs > 0) {
      void this.heartbeat()
      this.heartbeatTimer = setInterval(() => { void this.heartbeat() }, this.heartbeatIntervalMs)
      this.heartbeatTimer.unref()
    }
  }

  /** This client and prefix: two stores on both share keys. */
  get keyspace (): { owner: object, prefix: string } {
    return { owner: this.client, prefix: this.prefix }
  }

  useLogger (logger: StoreLogger): void {
    this.logger = logger
  }

  /**
   * Waits (up to `connectWaitMs`) for a client that is still connecting, then
   * counts the live replicas once. Called by the plugin at `app.ready()`.
   */
  async ready (): Promise<void> {
    const client = this.client
    if (client.status !== undefined && client.status !== 'ready' && client.status !== 'wait' && typeof client.once === 'function') {
      let timer: NodeJS.Timeout | undefined
      await new Promise<void>((resolve) => {
        client.once?.('ready', resolve)
        timer = setTimeout(resolve, this.connectWaitMs)
      })
      clearTimeout(timer)
      if (this.client.status !== 'ready') {
        this.logger.warn({ status: this.client.status }, 'fastify-tollgate: Redis is not connected yet; deciding by failMode until it is')
      }
    }
    if (this.heartbeatIntervalMs > 0) await this.heartbeat()
  }

  /** The breaker's state: `'closed'` (Redis in use), `'open'` (failing over), `'probing'`. */
  get state (): BreakerState {
    return this.breaker.state
  }

  consume (buckets: readonly BucketRequest[]): StoreDecision | Promise<StoreDecision> {
    const nowMs = this.now()
    const denial = this.denials?.lookup(buckets, nowMs)
    if (denial !== undefined) return denial
    if (!this.breaker.allows(nowMs)) return this.degrade(buckets)
    this.denials?.sending(buckets)
    return this.batcher.add(buckets)
  }

  async close (): Promise<void> {
    if (this.heartbeatTimer !== undefined) clearInterval(this.heartbeatTimer)
    this.heartbeatTimer = undefined
    if (this.heartbeatIntervalMs > 0) {
      await this.beat('1').catch(() => {})
    }
    this.fallback.close()
    this.denials?.clear()
    this.publish('closed')
  }

  private key (key: string): string {
    return this.prefix + key
  }

  /** Cluster: the node serving a key's slot (the slot itself while the slots are unknown). */
  private nodeOf (key: string): string {
    const slot = clusterSlot(key)
    return this.client.slots?.[slot]?.[0] ?? `slot:${slot}`
  }

  /** Settles `batch` with the script's answer, or by `failMode` when Redis (`node`) stayed silent for `timeoutMs`. */
  private send (batch: Pending[], node: string): void {
    const sentMs = this.now()
    const call = callScript(this.script, batch)
    this.denials?.settle(batch, call) // before the wait below: its reply is read once the batch has landed
    this.bounded.wait(call, node)
      .then((decisions) => {
        this.answered()
        const receivedMs = this.now()
        batch.forEach((pending, i) => {
          const { decision, refusal } = decisions[i] as ScriptDecision
          // In Redis's order: a refusal's states are kept, an admission's forgotten.
          if (refusal === undefined) this.denials?.forget(pending.buckets)
          else this.denials?.remember(pending.buckets, refusal, sentMs, receivedMs)
          pending.resolve(decision)
        })
      })
      .catch((error: unknown) => {
        this.failed()
        this.log('error', 'redis-failed', { err: error, failMode: this.failMode, breaker: this.breaker.state },
          'fastify-tollgate: Redis call failed; deciding by failMode')
        for (const pending of batch) {
          try {
            pending.resolve(this.degrade(pending.buckets))
          } catch (refusal) {
            pending.reject(refusal)
          }
        }
      })
  }

  /** A call answered: closes the breaker if it was open (logged once, published). */
  private answered (): void {
    if (this.breaker.succeeded()) {
      this.lastLogged.clear()
      this.logger.info({ store: 'redis' }, 'fastify-tollgate: Redis answers again; shared quotas restored')
      this.publish('restored')
    }
  }

  /** A call failed: counted by the breaker; its opening is published. */
  private failed (): void {
    if (this.breaker.failed(this.now())) this.publish('degraded')
  }

  /** Publishes a health event (publishStore drops those after `'closed'`: a call that fails after close). */
  private publish (event: StoreMessage['event']): void {
    publishStore(this, 'redis', this.prefix, event, this.breaker.state !== 'closed', this.liveReplicas)
  }

  /** Logs that Redis cannot be used, by `failMode` (at most once per `logIntervalMs`). Throws for `'closed'`. */
  private unavailable (): void {
    if (this.failMode === 'closed') {
      this.log('warn', 'degraded', { failMode: 'closed' }, 'fastify-tollgate: Redis unavailable; refusing requests (failMode closed)')
      throw new StoreUnavailableError()
    }
    if (this.failMode === 'open') {
      this.log('warn', 'degraded', { failMode: 'open' }, 'fastify-tollgate: Redis unavailable; allowing requests uncounted (failMode open)')
      return
    }
    this.log('warn', 'degraded', { failMode: 'local', headroom: this.fallbackHeadroom, liveReplicas: this.liveReplicas },
      'fastify-tollgate: Redis unavailable; enforcing this replica\'s share locally (failMode local)')
  }

  /** The decision when Redis cannot be used, by `failMode`. Throws for `'closed'`. */
  private degrade (buckets: readonly BucketRequest[]): StoreDecision {
    this.unavailable()
    if (this.failMode === 'open') {
      return { allowed: true, tokens: buckets.map((bucket) => bucket.policy.capacity), retryAfterMs: 0, degraded: 'open' }
    }
    const local = buckets.map((bucket) => this.localBucket(bucket))
    return { ...this.fallback.consume(local), degraded: 'local', policies: local.map((bucket) => bucket.policy) }
  }

  /** `bucket` in the local fallback: this replica's share of its policy. */
  private localBucket (bucket: BucketRequest): BucketRequest {
    if (isUnshared(bucket.policy)) return bucket
    // x × (1 + headroom) / N, never above the quota (engine/share.ts). A cost above the local share but
    // within the quota overdraws the share: heavy routes stay possible, and the long-run rate stays the share's.
    const policy = sharePolicy(bucket.policy, 1 + this.fallbackHeadroom, this.liveReplicas)
    return { key: bucket.key, policy, cost: bucket.cost, overdraft: overdraws(bucket.cost, bucket.policy.capacity) }
  }

  /**
   * Reads a bucket in Redis without taking. When Redis cannot answer, by
   * `failMode`: the local fallback bucket (`'local'`), a full bucket (`'open'`),
   * or a rejection with `StoreUnavailableError` (`'closed'`).
   */
  peek (bucket: BucketRequest): StoreReading | Promise<StoreReading> {
    if (!this.breaker.allows(this.now())) return this.degradePeek(bucket)
    return this.call('peek', bucket.key, bucket.policy, tokensNeeded(bucket.cost, bucket.policy, bucket.overdraft === true))
      .then(parseReading, (error: unknown) => {
        this.log('error', 'redis-failed', { err: error, failMode: this.failMode, breaker: this.breaker.state },
          'fastify-tollgate: Redis call failed; deciding by failMode')
        return this.degradePeek(bucket)
      })
  }

  /**
   * Gives `bucket.cost` tokens back in Redis; resolves with the tokens the bucket
   * holds then. Rejects with `StoreUnavailableError` when Redis does not take it.
   * The key's local state goes first: its deny-cache refusal, and the local
   * fallback's bucket gets the same refund.
   */
  async refund (bucket: BucketRequest): Promise<number> {
    const local = this.localBucket(bucket)
    this.fallback.refund(local)
    return parseNumber(await this.write('refund', bucket.key, bucket.policy, bucket.cost))
  }

  /**
   * Deletes a bucket in Redis (it is full again). Rejects with
   * `StoreUnavailableError` when Redis does not take it. The key's deny-cache
   * refusal and its local fallback bucket go first.
   */
  async reset (key: string): Promise<void> {
    this.fallback.reset(key)
    await this.write('reset', key, undefined, 0)
  }

  /**
   * Settles what `edge.mode: 'settle'` spent locally and reserves its next tokens
   * (see `Store.settle`): one call of the settle script per node and `maxBatch`
   * buckets. Not bounded by
   * `timeoutMs`: a call that Redis was slow to answer may still have been applied,
   * so it resolves when Redis answers (the caller decides locally meanwhile), with
   * `tokens: NaN` for the buckets of a call that failed (not applied). Throws
   * `StoreUnavailableError` when the breaker is open (nothing sent).
   */
  async settle (debits: readonly BucketDebit[]): Promise<BucketSettlement[]> {
    if (!this.breaker.allows(this.now())) throw new StoreUnavailableError()
    const groups = new Map<string, number[]>()
    debits.forEach((debit, i) => {
      const node = this.script.cluster ? this.nodeOf(debit.key) : SINGLE_NODE
      const group = groups.get(node)
      if (group === undefined) groups.set(node, [i])
      else group.push(i)
    })
    const settlements = debits.map((): BucketSettlement => ({ tokens: NaN, reserved: 0 }))
    const calls: Array<Promise<void>> = []
    for (const indexes of groups.values()) {
      for (let start = 0; start < indexes.length; start += this.maxBatch) {
        const chunk = indexes.slice(start, start + this.maxBatch)
        calls.push(callSettleScript(this.settleScript, chunk.map((i) => debits[i] as BucketDebit)).then((answer) => {
          this.answered()
          chunk.forEach((i, j) => { settlements[i] = answer[j] as BucketSettlement })
        }))
      }
    }
    await Promise.all(calls.map(async (call) => call.catch((error: unknown) => {
      this.failed()
      this.log('error', 'settle-failed', { err: error, breaker: this.breaker.state },
        'fastify-tollgate: Redis settlement failed; the edge decides locally until Redis answers')
    })))
    return settlements
  }

  /** The reading when Redis cannot be used, by `failMode`. Throws for `'closed'`. */
  private degradePeek (bucket: BucketRequest): StoreReading {
    this.unavailable()
    if (this.failMode === 'open') return { tokens: bucket.policy.capacity, retryAfterMs: 0, fullInMs: 0, degraded: 'open' }
    const local = this.localBucket(bucket)
    return { ...this.fallback.peek(local), degraded: 'local', policy: local.policy }
  }

  /**
   * A refund or a reset. The key's deny-cache state is dropped when it goes, none
   * is kept while it is on its way, and it is dropped again once it is answered:
   * a refusal read by Redis before this call, whose reply is read in the same turn,
   * may have been kept meanwhile.
   */
  private async write (operation: BucketOperation, key: string, policy: BucketPolicy | undefined, amount: number): Promise<unknown> {
    const keys = [{ key }]
    this.denials?.forget(keys)
    if (!this.breaker.allows(this.now())) {
      this.log('warn', 'write-refused', { operation }, 'fastify-tollgate: Redis unavailable; refund or reset not applied to the shared quota')
      throw new StoreUnavailableError()
    }
    this.denials?.sending(keys)
    try {
      return await this.call(operation, key, policy, amount, keys)
    } catch (error) {
      this.log('error', 'write-failed', { err: error, operation, breaker: this.breaker.state },
        'fastify-tollgate: Redis call failed; refund or reset not applied to the shared quota')
      throw new StoreUnavailableError()
    } finally {
      this.denials?.forget(keys)
    }
  }

  /** One call of the bucket script, bounded by `timeoutMs`, counted by the breaker; `inFlight`: settles the deny cache's count. */
  private call (operation: BucketOperation, key: string, policy: BucketPolicy | undefined, amount: number, inFlight?: ReadonlyArray<{ key: string }>): Promise<unknown> {
    const stored = this.key(key)
    const call = callBucketScript(this.bucketScript, operation, stored, policy, amount)
    if (inFlight !== undefined) this.denials?.settle([{ buckets: inFlight }], call)
    return this.bounded.wait(call, this.script.cluster ? this.nodeOf(stored) : SINGLE_NODE).then(
      (reply) => { this.answered(); return reply },
      (error: unknown) => { this.failed(); throw error })
  }

  /** Announces this replica (`leaving` '0') or its leaving ('1'); resolves with the live replicas. */
  private beat (leaving: '0' | '1'): Promise<unknown> {
    const node = this.script.cluster ? this.nodeOf(REPLICAS_KEY) : SINGLE_NODE
    return this.bounded.wait(this.heartbeatCommand.call(this.client, this.key(REPLICAS_KEY), this.replicaId, 3 * this.heartbeatIntervalMs, leaving), node)
  }

  private async heartbeat (): Promise<void> {
    await this.beat('0')
      .then((count) => {
        this.liveReplicas = Math.max(1, parseNumber(count))
        this.publish('replicas')
      })
      .catch((error: unknown) => {
        this.log('warn', 'heartbeat-failed', { err: error }, 'fastify-tollgate: Redis heartbeat failed; keeping the last replica count')
      })
  }

  /** Logs at most once per `logIntervalMs` per kind, with how many lines were held back. */
  private log (level: keyof StoreLogger, kind: string, details: Record<string, unknown>, message: string): void {
    const nowMs = Date.now()
    const last = this.lastLogged.get(kind)
    if (last !== undefined && nowMs - last.atMs < this.logIntervalMs) {
      last.suppressed++
      return
    }
    this.lastLogged.set(kind, { atMs: nowMs, suppressed: 0 })
    this.logger[level]({ ...details, suppressed: last?.suppressed ?? 0 }, message)
  }
}

/** Creates a store that keeps buckets in Redis, shared by every replica. */
export function redisStore (options: RedisStoreOptions): RedisStore {
  return new RedisStore(options)
}
