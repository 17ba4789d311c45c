/**
 * The Redis store's decisions when Redis cannot be used, by `failMode`: `'open'`
 * allows (a full bucket), `'closed'` refuses (`StoreUnavailableError`, a 503), and
 * `'local'` decides in this process, on this replica's share of each quota (a
 * `MemoryStore`). Each such decision is logged (at most once per `logIntervalMs`).
 *
 * Under `'local'` an outage hands out no fresh quota: a key's share starts, at its
 * first local decision of the outage, from its part of the level Redis last
 * reported (last-levels.ts), and what is admitted on it is debited from the shared
 * bucket once Redis answers again (charge-back.ts); the local buckets then go, so
 * the next outage starts from the level of then.
 */
import { isUnshared, onShare, sharePolicy } from '../../engine/share.js'
import { StoreUnavailableError } from '../../output/errors.js'
import type { BucketRequest, StoreDecision, StoreReading } from '../../types/store.js'
import { MemoryStore } from '../memory.js'
import type { Pending } from './batcher.js'
import { ChargeBack, type Debit } from './charge-back.js'
import type { BreakerState } from './circuit-breaker.js'
import { LastLevels } from './last-levels.js'
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
  private readonly local: MemoryStore
  private readonly levels = new LastLevels()
  private readonly owed: ChargeBack
  /** Keys whose local bucket this outage has started (from their last level). */
  private readonly started = new Set<string>()
  /** Whether a decision was made without Redis since it last answered (its return is logged). */
  private away = false

  constructor (private readonly options: FallbackOptions) {
    this.local = new MemoryStore({ clock: options.clock })
    this.owed = new ChargeBack(options.debit)
  }

  /** Redis reported `tokens[i]` for `buckets[i]` (`'local'` keeps them, to start a share from). */
  noteLevels (buckets: readonly BucketRequest[], tokens: readonly number[]): void {
    if (this.options.failMode === 'local') this.levels.note(buckets, tokens, this.options.clock())
  }

  /** Whether what was admitted locally is still to be charged. */
  get owing (): boolean {
    return this.owed.pending
  }

  /**
   * Sends what was admitted locally, to be charged before the call about to go
   * (calls on a connection are taken in order): the request that finds Redis
   * back is decided after the debit.
   */
  charge (): void {
    this.owed.flush()
  }

  /** Redis answers again after decisions made without it (or the breaker closed): logged once. */
  restored (): void {
    this.away = false
    this.options.log.logger.info({ store: 'redis' }, 'fastify-tollgate: Redis answers again; shared quotas restored')
  }

  /** Redis answered: the local buckets go (the next outage starts from the levels of then), and what is owed is sent. */
  answered (): void {
    if (this.away) this.restored()
    if (this.started.size > 0) {
      for (const key of this.started) this.local.reset(key)
      this.started.clear()
    }
    if (this.owed.pending) this.owed.flush()
  }

  /** The decision when Redis cannot be used, by `failMode`. Throws for `'closed'`. */
  degrade (buckets: readonly BucketRequest[]): StoreDecision {
    this.unavailable()
    if (this.options.failMode === 'open') {
      return { allowed: true, tokens: buckets.map((bucket) => bucket.policy.capacity), retryAfterMs: 0, degraded: 'open' }
    }
    const local = buckets.map((bucket) => this.localBucket(bucket))
    const decision = this.local.consume(local)
    if (decision.allowed) this.owed.add(buckets.filter((bucket) => !isUnshared(bucket.policy)))
    return { ...decision, degraded: 'local', policies: local.map((bucket) => bucket.policy) }
  }

  /** The reading when Redis cannot be used, by `failMode`. Throws for `'closed'`. */
  degradePeek (bucket: BucketRequest): StoreReading {
    this.unavailable()
    if (this.options.failMode === 'open') return { tokens: bucket.policy.capacity, retryAfterMs: 0, fullInMs: 0, degraded: 'open' }
    const local = this.localBucket(bucket)
    return { ...this.local.peek(local), degraded: 'local', policy: local.policy }
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

  /** A refund given in Redis: the local bucket of this outage gets it too, and Redis's answer is the key's level. */
  refund (bucket: BucketRequest): void {
    if (this.started.has(bucket.key)) this.local.refund(this.localBucket(bucket))
  }

  /** The local bucket of a key reset in Redis goes too, with what it owed. */
  reset (key: string): void {
    this.local.reset(key)
    this.levels.forget(key)
    this.owed.forget(key)
  }

  close (): void {
    this.local.close()
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

  /** `bucket` in the local fallback: this replica's share of its policy, started from its last level. */
  private localBucket (bucket: BucketRequest): BucketRequest {
    // x × (1 + headroom) / N, never above the quota (engine/share.ts). A cost above the local share but
    // within the quota overdraws the share: heavy routes stay possible, and the long-run rate stays the share's.
    const local = isUnshared(bucket.policy)
      ? bucket
      : onShare(bucket, sharePolicy(bucket.policy, 1 + this.options.fallbackHeadroom, this.options.liveReplicas()))
    if (!this.started.has(bucket.key)) this.start(bucket, local)
    return local
  }

  /**
   * Starts `local`, the share of `bucket`, at its part of the level Redis last
   * reported (full for a key with none known): a full share less that, taken.
   */
  private start (bucket: BucketRequest, local: BucketRequest): void {
    this.started.add(bucket.key)
    this.local.reset(bucket.key)
    const { policy } = local
    const tokens = this.levels.shareAt(bucket, policy, this.options.clock())
    if (tokens !== undefined && tokens < policy.capacity) {
      this.local.consume([{ key: bucket.key, policy, cost: policy.capacity - tokens, overdraft: true }])
    }
  }
}
