/**
 * The `'local'` fallback's buckets: this replica's share of each quota while
 * Redis is away, on a `MemoryStore`. An outage hands out no fresh quota:
 *
 * - a key's share starts, at its first local decision, from its part of the level
 *   Redis last reported (last-levels.ts), less what is still owed on it; a key
 *   with no level known starts from a full share;
 * - what it admits is owed to the shared bucket (charge-back.ts), sent ahead of
 *   the next call to Redis, after a heartbeat that answered, and at close;
 * - a key's share ends when Redis decides that key again: its next outage starts
 *   from the level of then.
 */
import { isUnshared, onShare, sharePolicy } from '../../engine/share.js'
import type { BucketRequest, StoreDecision, StoreReading } from '../../types/store.js'
import { MemoryStore } from '../memory.js'
import { ChargeBack, type Debit } from './charge-back.js'
import { LastLevels } from './last-levels.js'

export interface LocalSharesOptions {
  /** Each replica's share is `(1 + headroom) / live replicas` of every quota. */
  fallbackHeadroom: number
  /** The live replicas now (the heartbeat's count). */
  liveReplicas: () => number
  /** The local buckets' clock (ms). */
  clock: () => number
  /** Takes what was admitted locally from the shared buckets (the settle script). */
  debit: Debit
  /** Most keys with a local share at once (the local store's bound). Default 100 000. */
  maxKeys?: number
}

/** How long `close()` waits for what is owed to be charged, in ms. */
export const CLOSE_CHARGE_MS = 1000

export class LocalShares {
  private readonly local: MemoryStore
  private readonly levels = new LastLevels()
  private readonly owed: ChargeBack
  /** Keys whose local share has started since Redis last decided them. */
  private readonly started = new Set<string>()

  constructor (private readonly options: LocalSharesOptions) {
    this.local = new MemoryStore({ clock: options.clock, maxKeys: options.maxKeys })
    this.owed = new ChargeBack(options.debit, (bucket, tokens) => { this.levels.note([bucket], [tokens], options.clock()) })
  }

  /** Redis decided `buckets` (`tokens[i]` left in each, answered at `atMs`, the local clock): their levels are kept, and their local shares end. */
  decided (buckets: readonly BucketRequest[], tokens: readonly number[], atMs: number): void {
    this.levels.note(buckets, tokens, atMs)
    if (this.started.size === 0) return
    for (const { key } of buckets) {
      if (this.started.delete(key)) this.local.reset(key)
    }
  }

  /** Whether what was admitted locally is still to be charged. */
  get owing (): boolean {
    return this.owed.pending
  }

  /** Whether no charge is on its way. */
  get idle (): boolean {
    return this.owed.idle
  }

  /** Sends what is owed (see `ChargeBack.flush`). */
  charge (): Promise<void> {
    return this.owed.flush()
  }

  /** Decides on the local shares; what is admitted is owed. */
  consume (buckets: readonly BucketRequest[]): StoreDecision {
    const local = buckets.map((bucket) => this.shareOf(bucket))
    const decision = this.local.consume(local)
    if (decision.allowed) this.owed.add(buckets.filter((bucket) => !isUnshared(bucket.policy)))
    return { ...decision, degraded: 'local', policies: local.map((bucket) => bucket.policy) }
  }

  peek (bucket: BucketRequest): StoreReading {
    const local = this.shareOf(bucket)
    return { ...this.local.peek(local), degraded: 'local', policy: local.policy }
  }

  /** A refund given in Redis: a local share started gets it too. */
  refund (bucket: BucketRequest): void {
    if (this.started.has(bucket.key)) this.local.refund(this.shareOf(bucket))
  }

  /** A key reset in Redis: its local share, its level and what it owed go. */
  reset (key: string): void {
    this.started.delete(key)
    this.local.reset(key)
    this.levels.forget(key)
    this.owed.forget(key)
  }

  /** Charges what is owed, flush after flush while they are taken (for at most `CLOSE_CHARGE_MS`), then stops the local store. */
  async close (): Promise<void> {
    let timer: NodeJS.Timeout | undefined
    let late = false
    const waited = new Promise<void>((resolve) => { timer = setTimeout(() => { late = true; resolve() }, CLOSE_CHARGE_MS) })
    const chargeAll = async (): Promise<void> => {
      // A flush whose debits were not taken leaves them owed: it stops there, Redis is not answering.
      for (let left = this.owed.size; left > 0 && !late; left = this.owed.size) {
        await this.owed.flush()
        if (this.owed.size >= left) return
      }
    }
    await Promise.race([chargeAll(), waited])
    clearTimeout(timer)
    this.local.close()
  }

  /** `bucket` on this replica's share of its policy, started from its last level. */
  private shareOf (bucket: BucketRequest): BucketRequest {
    // x × (1 + headroom) / N, never above the quota (engine/share.ts). A cost above the local share but
    // within the quota overdraws the share: heavy routes stay possible, and the long-run rate stays the share's.
    const local = isUnshared(bucket.policy)
      ? bucket
      : onShare(bucket, sharePolicy(bucket.policy, 1 + this.options.fallbackHeadroom, this.options.liveReplicas()))
    if (!this.started.has(bucket.key)) this.start(bucket, local)
    return local
  }

  /** Starts `local`, the share of `bucket`, where `LastLevels.shareAt` says: a full share less that, taken. */
  private start (bucket: BucketRequest, local: BucketRequest): void {
    // Bounded like the local store; a key started again starts from its level less what it owes, as the first time.
    if (this.started.size >= this.local.maxKeys) this.started.clear()
    this.started.add(bucket.key)
    this.local.reset(bucket.key)
    const { policy } = local
    const tokens = this.levels.shareAt(bucket, policy, this.options.clock(), this.owed.on(bucket.key))
    if (tokens !== undefined && tokens < policy.capacity) {
      this.local.consume([{ key: bucket.key, policy, cost: policy.capacity - tokens, overdraft: true }])
    }
  }
}
