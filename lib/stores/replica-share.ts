/**
 * `edge.mode: 'replica-share'`: the edge's buckets in this process's memory, each
 * quota divided by the live replicas the shared store counts (its heartbeat):
 * capacity max(1, B / N), refill R / N. No call to the shared store per request.
 * Spread evenly, N replicas admit B + R·t over t seconds together, as one bucket
 * would; a client pinned to one replica gets 1/N of its quota.
 */
import type { BucketPolicy } from '../types/engine.js'
import type { BucketRequest, Store, StoreDecision, StoreReading } from '../types/store.js'
import { onShare, sharePolicy } from '../engine/share.js'
import { MemoryStore } from './memory.js'

export class ReplicaShareEdge implements Store {
  private readonly local: MemoryStore
  private replicas = 0
  /** Each policy's share, and each step's list of them (the same array every time, for the headers' cache), for `replicas`. */
  private shares = new Map<BucketPolicy, BucketPolicy>()
  private lists = new Map<BucketPolicy, Map<BucketPolicy | undefined, BucketPolicy[]>>()

  /** `replicas`: the live replicas now (≥ 1), which divide the quotas; `clock` in ms. */
  constructor (private readonly replicasNow: () => number, clock: () => number) {
    this.local = new MemoryStore({ clock })
  }

  consume (buckets: readonly BucketRequest[]): StoreDecision {
    const policies = this.policiesOf(buckets)
    const local = buckets.map((bucket, i) => onShare(bucket, policies[i] as BucketPolicy))
    const decision: StoreDecision = this.local.consume(local)
    decision.policies = policies
    return decision
  }

  peek (bucket: BucketRequest): StoreReading {
    this.count()
    const policy = this.shareOf(bucket.policy)
    return { ...this.local.peek(onShare(bucket, policy)), policy }
  }

  refund (bucket: BucketRequest): number {
    this.count()
    return this.local.refund({ key: bucket.key, policy: this.shareOf(bucket.policy), cost: bucket.cost })
  }

  reset (key: string): void {
    this.local.reset(key)
  }

  close (): void {
    this.local.close()
  }

  private shareOf (policy: BucketPolicy): BucketPolicy {
    let share = this.shares.get(policy)
    if (share === undefined) {
      share = sharePolicy(policy, 1, this.replicas)
      this.shares.set(policy, share)
    }
    return share
  }

  /** The shares of the step's policies (one or two buckets at the edge), as one array kept per pair. */
  private policiesOf (buckets: readonly BucketRequest[]): BucketPolicy[] {
    this.count()
    const first = (buckets[0] as BucketRequest).policy
    const second = buckets[1]?.policy
    let bySecond = this.lists.get(first)
    if (bySecond === undefined) {
      bySecond = new Map()
      this.lists.set(first, bySecond)
    }
    let list = bySecond.get(second)
    if (list === undefined) {
      list = [first, second].filter((policy) => policy !== undefined).map((policy) => this.shareOf(policy))
      bySecond.set(second, list)
    }
    return list
  }

  /** Reads the live replicas; a new count drops the shares worked out for the old one. */
  private count (): void {
    const replicas = this.replicasNow()
    if (replicas !== this.replicas) {
      this.replicas = replicas
      this.shares = new Map()
      this.lists = new Map()
    }
  }
}
