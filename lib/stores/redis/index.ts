/**
 * The Redis store: one quota shared by every replica.
 *
 * - One Lua script decides (scripts/consume.lua), with Redis `TIME` as the one clock.
 * - A key refused until T is refused locally until T (the deny cache, deny-cache.ts).
 * - Decisions asked for in one event-loop turn go to Redis as one script call per
 *   node (micro-batching, batcher.ts).
 * - Every call is bounded by `timeoutMs` of silence from Redis, and a circuit breaker
 *   stops calling a dead Redis and probes it (calls.ts); on an error, a timeout or an
 *   open breaker, `failMode` decides (fallback.ts).
 * - `peek`, `refund` and `reset` (one bucket each, for `fastify.tollgate`) call a
 *   second script of the family at once (bucket-script.ts). A peek follows `failMode`;
 *   a refund or a reset that Redis does not take rejects with `StoreUnavailableError`,
 *   whatever `failMode`. Both first clear the key's local state (deny cache, fallback).
 * - `settle` (settle-script.ts) serves `edge.mode: 'settle'`; a heartbeat counts the
 *   live replicas (heartbeat.ts). The options are checked in options.ts.
 */
import { performance } from 'node:perf_hooks'
import { tokensNeeded } from '../../engine/bucket.js'
import { StoreUnavailableError } from '../../output/errors.js'
import { publishStore, type StoreMessage } from '../../output/diagnostics.js'
import type { BucketDebit, BucketRequest, BucketSettlement, Store, StoreDecision, StoreLogger, StoreReading } from '../../types/store.js'
import { MicroBatcher, type Pending } from './batcher.js'
import { BucketCalls, parseReading } from './bucket-script.js'
import { RedisCalls } from './calls.js'
import type { BreakerState } from './circuit-breaker.js'
import { whenConnected, type RedisClientLike } from './client.js'
import { callScript, consumeCallOptions, parseReply, type ConsumeCallOptions, type ScriptDecision } from './consume-script.js'
import { DenyCache } from './deny-cache.js'
import { Fallback } from './fallback.js'
import { Heartbeat } from './heartbeat.js'
import { checkOptions, type FailMode, type RedisStoreOptions } from './options.js'
import { OutageLog } from './outage-log.js'
import { parseNumber } from './reply.js'
import { defineScripts } from './scripts.js'
import { settleByNode, type SettleCallOptions } from './settle-script.js'

export type { FailMode, RedisStoreOptions } from './options.js'

export class RedisStore implements Store {
  readonly quotaShare = 1
  readonly prefix: string
  readonly failMode: FailMode
  /** This process's clock (ms): the local fallback's, and the edge modes' that decide locally. */
  readonly localClock: () => number
  private readonly client: RedisClientLike
  private readonly connectWaitMs: number
  private readonly maxBatch: number
  private readonly log: OutageLog
  /** Every call to Redis goes through it: bounded by `timeoutMs` of silence, counted by the breaker. */
  private readonly calls: RedisCalls
  /** The deny cache; `undefined` when `denyCacheSize` is 0. */
  private readonly denials: DenyCache | undefined
  private readonly fallback: Fallback
  private readonly batcher: MicroBatcher
  private readonly script: ConsumeCallOptions
  private readonly buckets: BucketCalls
  private readonly settleScript: SettleCallOptions
  private readonly heartbeat: Heartbeat

  constructor (options: RedisStoreOptions) {
    const checked = checkOptions(options)
    const { client, prefix, neverFullTtlMs, clock } = checked
    this.client = client
    this.prefix = prefix
    this.failMode = checked.failMode
    this.connectWaitMs = checked.connectWaitMs
    this.maxBatch = checked.maxBatch
    const now = this.localClock = clock ?? ((): number => performance.now())
    const log = this.log = new OutageLog(checked.logIntervalMs)
    const calls = this.calls = new RedisCalls({ ...checked, now, restored: () => { this.restored() }, degraded: () => { this.publish('degraded') } })
    this.denials = checked.denyCacheSize > 0 ? new DenyCache(checked.denyCacheSize) : undefined
    const cluster = calls.cluster
    const scripts = defineScripts(client, cluster)
    const consume = { client, command: scripts.consume, cluster, prefix, neverFullTtlMs, clock }
    this.script = consumeCallOptions(consume)
    this.buckets = new BucketCalls({ client, command: scripts.bucket, neverFullTtlMs, clock, prefix, calls, denials: this.denials, log, now })
    this.settleScript = { ...consume, command: scripts.settle, debt: 'any' }
    const chargeScript: SettleCallOptions = { ...this.settleScript, debt: 'none' }
    this.fallback = new Fallback({
      ...checked, liveReplicas: () => this.liveReplicas, clock: now, log,
      debit: (debits) => settleByNode(chargeScript, this.calls, this.maxBatch, debits, (error) => {
        log.line('error', 'charge-back-failed', { err: error, breaker: calls.state },
          'fastify-tollgate: Redis did not take what was admitted locally; it is sent again at its next answer')
      })
    })
    this.batcher = new MicroBatcher({
      maxBatch: this.maxBatch,
      nodeOf: cluster ? (buckets) => calls.nodeOf((buckets[0] as BucketRequest).key) : undefined,
      send: (batch, node) => { this.send(batch, node) }
    })
    this.heartbeat = new Heartbeat({
      client, command: scripts.heartbeat, calls, prefix, intervalMs: checked.heartbeatIntervalMs,
      replicas: checked.replicas, log, counted: () => { this.counted() }
    })
    this.heartbeat.start()
  }

  /** This client and prefix: two stores on both share keys. */
  get keyspace (): { owner: object, prefix: string } {
    return { owner: this.client, prefix: this.prefix }
  }

  /** The breaker's state: `'closed'` (Redis in use), `'open'` (failing over), `'probing'`. */
  get state (): BreakerState {
    return this.calls.state
  }

  /** Live replicas, from the heartbeat. */
  get liveReplicas (): number {
    return this.heartbeat.liveReplicas
  }

  set liveReplicas (count: number) {
    this.heartbeat.liveReplicas = count
  }

  useLogger (logger: StoreLogger): void {
    this.log.logger = logger
  }

  /**
   * Waits (up to `connectWaitMs`) for a client that is still connecting, then
   * counts the live replicas once. Called by the plugin at `app.ready()`.
   */
  async ready (): Promise<void> {
    await whenConnected(this.client, this.connectWaitMs, this.log)
    if (this.heartbeat.enabled) await this.heartbeat.count()
  }

  /** The deny cache's refusal; else, the breaker open, by `failMode`; else the script's decision, in the next batch. */
  consume (buckets: readonly BucketRequest[]): StoreDecision | Promise<StoreDecision> {
    const nowMs = this.localClock()
    const denial = this.denials?.lookup(buckets, nowMs)
    if (denial !== undefined) return denial
    if (!this.calls.allows(nowMs)) return this.fallback.degrade(buckets)
    if (this.fallback.owing) {
      if (this.calls.state === 'probing') this.fallback.chargeNow() // this call is the probe: the debit goes first
      else this.fallback.charge()
    }
    this.denials?.sending(buckets)
    return this.batcher.add(buckets)
  }

  /**
   * Settles `batch` with the script's answer, or by `failMode` when the call fails
   * or Redis (`node`) stayed silent for `timeoutMs`. One reaction to the client's
   * promise does it all: a batch of one is a request's whole cost.
   */
  private send (batch: Pending[], node: string): void {
    const sentMs = this.localClock()
    let call: Promise<unknown>
    try {
      call = callScript(this.script, batch)
    } catch (error) {
      this.denials?.landed(batch)
      this.failed(batch, error)
      return
    }
    const watch = this.calls.watch(node, (error) => { this.failed(batch, error) })
    call.then((reply) => {
      this.denials?.landed(batch) // before its reply is read
      if (watch.answered()) this.decided(batch, reply, sentMs)
    }, (error: unknown) => {
      this.denials?.landed(batch)
      if (watch.failed()) this.failed(batch, error)
    })
  }

  /** Settles `batch` with the script's `reply` to a call sent at `sentMs`; a reply it cannot read fails the call. */
  private decided (batch: Pending[], reply: unknown, sentMs: number): void {
    try {
      const decisions = parseReply(reply, batch)
      this.calls.answered()
      const receivedMs = this.localClock()
      for (let i = 0; i < batch.length; i++) {
        const pending = batch[i] as Pending
        const { decision, refusal } = decisions[i] as ScriptDecision
        // In Redis's order: a refusal's states are kept, an admission's forgotten.
        if (refusal === undefined) this.denials?.forget(pending.buckets)
        else this.denials?.remember(pending.buckets, refusal, sentMs, receivedMs)
        this.fallback.decided(pending.buckets, decision.tokens, receivedMs)
        pending.resolve(decision)
      }
      this.fallback.answered()
    } catch (error) {
      // A decision already given stays (a promise settles once); the others go by failMode.
      this.failed(batch, error)
    }
  }

  /** The call for `batch` failed (an error, a timeout, a reply it cannot read): counted, logged, decided by `failMode`. */
  private failed (batch: readonly Pending[], error: unknown): void {
    this.calls.failed()
    this.fallback.callFailed(error, this.calls.state)
    this.fallback.degradeBatch(batch)
  }

  /**
   * Reads a bucket in Redis without taking. When Redis cannot answer, by
   * `failMode`: the local fallback bucket (`'local'`), a full bucket (`'open'`),
   * or a rejection with `StoreUnavailableError` (`'closed'`).
   */
  peek (bucket: BucketRequest): StoreReading | Promise<StoreReading> {
    if (!this.calls.allows(this.localClock())) return this.fallback.degradePeek(bucket)
    return this.buckets.call('peek', bucket.key, bucket.policy, tokensNeeded(bucket.cost, bucket.policy, bucket.overdraft === true))
      .then(parseReading, (error: unknown) => {
        this.fallback.callFailed(error, this.calls.state)
        return this.fallback.degradePeek(bucket)
      })
  }

  /**
   * Gives `bucket.cost` tokens back in Redis, once however often the client sends
   * the call (its id, bucket.lua); resolves with the tokens the bucket holds then.
   * Rejects with `StoreUnavailableError` when Redis does not answer (then it may
   * or may not have been applied) or the breaker is open (nothing sent).
   * The key's local state goes first: its deny-cache refusal, and the local
   * fallback's bucket gets the same refund.
   */
  async refund (bucket: BucketRequest): Promise<number> {
    this.fallback.refund(bucket)
    const tokens = parseNumber(await this.buckets.write('refund', bucket.key, bucket.policy, bucket.cost))
    this.fallback.decided([bucket], [tokens], this.localClock())
    return tokens
  }

  /**
   * Deletes a bucket in Redis (it is full again). Rejects with
   * `StoreUnavailableError` when Redis does not answer (it may or may not have
   * been applied) or the breaker is open. The key's deny-cache
   * refusal and its local fallback bucket go first.
   */
  async reset (key: string): Promise<void> {
    this.fallback.reset(key)
    await this.buckets.write('reset', key, undefined, 0)
  }

  /**
   * Settles what `edge.mode: 'settle'` spent locally and reserves its next tokens
   * (see `Store.settle`): one call of the settle script per node and `maxBatch`
   * buckets. Not bounded by `timeoutMs`: a call that Redis was slow to answer may
   * still have been applied, so it resolves when Redis answers (the caller decides
   * locally meanwhile), with `tokens: NaN` for the buckets of a call that failed
   * (not applied). Rejects with `StoreUnavailableError` when the breaker is open
   * (nothing sent).
   */
  settle (debits: readonly BucketDebit[]): Promise<BucketSettlement[]> {
    if (!this.calls.allows(this.localClock())) return Promise.reject(new StoreUnavailableError())
    return settleByNode(this.settleScript, this.calls, this.maxBatch, debits, (error) => {
      this.log.line('error', 'settle-failed', { err: error, breaker: this.calls.state },
        'fastify-tollgate: Redis settlement failed; the edge decides locally until Redis answers')
    })
  }

  async close (): Promise<void> {
    this.heartbeat.stop()
    await this.fallback.close()
    if (this.heartbeat.enabled) await this.heartbeat.leave()
    this.denials?.clear()
    this.publish('closed')
  }

  /** A heartbeat counted the live replicas (published): Redis answers, so what the fallback owes goes too. */
  private counted (): void {
    this.publish('replicas')
    if (this.fallback.owing) this.fallback.charge()
  }

  /** The breaker closed: Redis answers again (logged, published); the outage's log intervals start over. */
  private restored (): void {
    this.log.clear()
    this.fallback.restored()
    this.publish('restored')
  }

  /** Publishes a health event (publishStore drops those after `'closed'`: a call that fails after close). */
  private publish (event: StoreMessage['event']): void {
    publishStore(this, 'redis', this.prefix, event, this.calls.state !== 'closed', this.liveReplicas)
  }
}

/** Creates a store that keeps buckets in Redis, shared by every replica. */
export function redisStore (options: RedisStoreOptions): RedisStore {
  return new RedisStore(options)
}
