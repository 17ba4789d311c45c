/**
 * The Redis store's decisions when Redis cannot be used, by `failMode`: `'open'`
 * allows (a full bucket), `'closed'` refuses (`StoreUnavailableError`, a 503), and
 * `'local'` decides in this process, on this replica's share of each quota
 * (local-shares.ts: started from the level Redis last reported, and charged back
 * once it answers). Each such decision is logged (at most once per
 * `logIntervalMs`), and so is Redis's return after one.
 */
import { StoreUnavailableError } from '../../output/errors.js'
import type { BucketRequest, StoreDecision, StoreReading } from '../../types/store.js'
import type { Pending } from './batcher.js'
import type { Debit } from './charge-back.js'
import type { BreakerState } from './circuit-breaker.js'
import { LocalShares } from './local-shares.js'
import type { FailMode } from './options.js'
import type { OutageLog } from './outage-log.js'

export interface FallbackOptions {
  failMode: FailMode
  /** `'local'`: each replica's share is `(1 + headroom) / live replicas` of every quota. */
  fallbackHeadroom: number
  /** The live replicas now (the heartbeat's count). */
  liveReplicas: () => number
  /** The local buckets' clock (ms). */
  clock: () => number
  log: OutageLog
  /** Takes what was admitted locally from the shared buckets (the settle script). */
  debit: Debit
}

export class Fallback {
  /** `'local'`'s buckets; `undefined` under the other failModes. */
  private readonly shares: LocalShares | undefined
  /** Whether a decision was made without Redis since it last answered (its return is logged). */
  private away = false

  constructor (private readonly options: FallbackOptions) {
    this.shares = options.failMode === 'local' ? new LocalShares(options) : undefined
  }

  /** Redis decided `buckets`, `tokens[i]` left in each, answering at `atMs` (see `LocalShares.decided`). */
  decided (buckets: readonly BucketRequest[], tokens: readonly number[], atMs: number): void {
    this.shares?.decided(buckets, tokens, atMs)
  }

  /** Whether what was admitted locally is still to be charged. */
  get owing (): boolean {
    return this.shares?.owing === true
  }

  /**
   * Sends what was admitted locally, to be charged before the call about to go
   * (calls on a connection are taken in order): the probe that finds Redis back
   * is decided after the debit.
   */
  chargeNow (): void {
    void this.shares?.charge()
  }

  /**
   * `chargeNow`, unless a charge is on its way: while some node is silent (a
   * Cluster with one node frozen keeps the breaker closed), what it owes is not
   * sent again with every call.
   */
  charge (): void {
    if (this.shares?.idle === true) void this.shares.charge()
  }

  /** Redis answers again after decisions made without it (or the breaker closed): logged once. */
  restored (): void {
    this.away = false
    this.options.log.logger.info({ store: 'redis' }, 'fastify-tollgate: Redis answers again; shared quotas restored')
  }

  /** Redis answered: its return is logged if anything was decided without it, and what is owed is sent. */
  answered (): void {
    if (this.away) this.restored()
    if (this.owing) this.charge()
  }

  /** The decision when Redis cannot be used, by `failMode`. Throws for `'closed'`. */
  degrade (buckets: readonly BucketRequest[]): StoreDecision {
    this.unavailable()
    if (this.shares !== undefined) return this.shares.consume(buckets)
    return { allowed: true, tokens: buckets.map((bucket) => bucket.policy.capacity), retryAfterMs: 0, degraded: 'open' }
  }

  /** The reading when Redis cannot be used, by `failMode`. Throws for `'closed'`. */
  degradePeek (bucket: BucketRequest): StoreReading {
    this.unavailable()
    if (this.shares !== undefined) return this.shares.peek(bucket)
    return { tokens: bucket.policy.capacity, retryAfterMs: 0, fullInMs: 0, degraded: 'open' }
  }

  /** Logs a call that failed (at most once per `logIntervalMs`); the caller then decides by `failMode`. */
  callFailed (error: unknown, breaker: BreakerState): void {
    this.options.log.line('error', 'redis-failed', { err: error, failMode: this.options.failMode, breaker },
      'fastify-tollgate: Redis call failed; deciding by failMode')
  }

  /** Decides every decision of a batch whose call failed, by `failMode`; `'closed'` rejects them. */
  degradeBatch (batch: readonly Pending[]): void {
    for (const pending of batch) {
      try {
        pending.resolve(this.degrade(pending.buckets))
      } catch (refusal) {
        pending.reject(refusal)
      }
    }
  }

  /** A refund given in Redis: a local share started gets it too. */
  refund (bucket: BucketRequest): void {
    this.shares?.refund(bucket)
  }

  /** The local share of a key reset in Redis goes too, with what it owed. */
  reset (key: string): void {
    this.shares?.reset(key)
  }

  /** Charges what is owed (for a second at most), then stops the local buckets. */
  async close (): Promise<void> {
    await this.shares?.close()
  }

  /** Logs that Redis cannot be used, by `failMode` (at most once per `logIntervalMs`). Throws for `'closed'`. */
  private unavailable (): void {
    this.away = true
    const { failMode, log } = this.options
    if (failMode === 'closed') {
      log.line('warn', 'degraded', { failMode: 'closed' }, 'fastify-tollgate: Redis unavailable; refusing requests (failMode closed)')
      throw new StoreUnavailableError()
    }
    if (failMode === 'open') {
      log.line('warn', 'degraded', { failMode: 'open' }, 'fastify-tollgate: Redis unavailable; allowing requests uncounted (failMode open)')
      return
    }
    log.line('warn', 'degraded', { failMode: 'local', headroom: this.options.fallbackHeadroom, liveReplicas: this.options.liveReplicas() },
      'fastify-tollgate: Redis unavailable; enforcing this replica\'s share locally (failMode local)')
  }
}
