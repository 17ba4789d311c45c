/**
 * The Redis store's decisions when Redis cannot be used, by `failMode`: `'open'`
 * allows (a full bucket), `'closed'` refuses (`StoreUnavailableError`, a 503), and
 * `'local'` decides in this process, on this replica's share of each quota (a
 * `MemoryStore`, kept across outages). Each such decision is logged (at most once
 * per `logIntervalMs`).
 */
import { isUnshared, onShare, sharePolicy } from '../../engine/share.js'
import { StoreUnavailableError } from '../../output/errors.js'
import type { BucketRequest, StoreDecision, StoreReading } from '../../types/store.js'
import { MemoryStore } from '../memory.js'
import type { Pending } from './batcher.js'
import type { BreakerState } from './circuit-breaker.js'
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
}

export class Fallback {
  private readonly local: MemoryStore

  constructor (private readonly options: FallbackOptions) {
    this.local = new MemoryStore({ clock: options.clock })
  }

  /** The decision when Redis cannot be used, by `failMode`. Throws for `'closed'`. */
  degrade (buckets: readonly BucketRequest[]): StoreDecision {
    this.unavailable()
    if (this.options.failMode === 'open') {
      return { allowed: true, tokens: buckets.map((bucket) => bucket.policy.capacity), retryAfterMs: 0, degraded: 'open' }
    }
    const local = buckets.map((bucket) => this.localBucket(bucket))
    return { ...this.local.consume(local), degraded: 'local', policies: local.map((bucket) => bucket.policy) }
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

  /** The local bucket gets a refund given in Redis too. */
  refund (bucket: BucketRequest): void {
    this.local.refund(this.localBucket(bucket))
  }

  /** The local bucket of a key reset in Redis goes too. */
  reset (key: string): void {
    this.local.reset(key)
  }

  close (): void {
    this.local.close()
  }

  /** Logs that Redis cannot be used, by `failMode` (at most once per `logIntervalMs`). Throws for `'closed'`. */
  private unavailable (): void {
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

  /** `bucket` in the local fallback: this replica's share of its policy. */
  private localBucket (bucket: BucketRequest): BucketRequest {
    if (isUnshared(bucket.policy)) return bucket
    // x × (1 + headroom) / N, never above the quota (engine/share.ts). A cost above the local share but
    // within the quota overdraws the share: heavy routes stay possible, and the long-run rate stays the share's.
    return onShare(bucket, sharePolicy(bucket.policy, 1 + this.options.fallbackHeadroom, this.options.liveReplicas()))
  }
}
