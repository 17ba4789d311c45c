/**
 * The one rule for a part of a quota: a replica's share of it (`memoryStore({ replicas })`,
 * `edge.mode: 'replica-share'` and `'settle'`, the Redis store's local fallback), and
 * the overdraft of a cost that is above a share but within the whole quota.
 */
import type { BucketPolicy } from '../types/engine.js'
import type { BucketRequest } from '../types/store.js'

/**
 * Policies that are never divided among replicas: a penalty's (a time, not a
 * quota). The Redis store's local fallback applies them whole.
 */
const UNSHARED = new WeakSet<BucketPolicy>()

/** Marks `policy` as never divided among replicas (see `isUnshared`); returns it. */
export function unshared (policy: BucketPolicy): BucketPolicy {
  UNSHARED.add(policy)
  return policy
}

export const isUnshared = (policy: BucketPolicy): boolean => UNSHARED.has(policy)

/**
 * `capacity × numerator / denominator`, in that order (30 × 1.2 / 3 is 12, where
 * 30 × (1.2 / 3) falls short of it), never above `capacity` and never below one
 * token: a share must still admit one request.
 */
export function shareOf (capacity: number, numerator: number, denominator = 1): number {
  return Math.max(1, Math.min(capacity, capacity * numerator / denominator))
}

/** `policy` scaled by `numerator / denominator` (see `shareOf`), its refill likewise (without the floor). */
export function sharePolicy (policy: BucketPolicy, numerator: number, denominator = 1): BucketPolicy {
  const rate = policy.refillPerSecond
  return { capacity: shareOf(policy.capacity, numerator, denominator), refillPerSecond: Math.min(rate, rate * numerator / denominator) }
}

/**
 * Whether a request of `cost` on a share of a quota whose whole capacity is
 * `wholeCapacity` may overdraw the share (`tokensNeeded` in bucket.ts): a cost
 * the whole quota admits passes on a full share, however small the share. A cost
 * above the whole quota never passes, share or not.
 */
export function overdraws (cost: number, wholeCapacity: number): boolean {
  return cost <= wholeCapacity
}

/**
 * `bucket` decided on `share`, a part of its policy: a cost above the share but
 * within the whole quota overdraws it (see `overdraws`).
 */
export function onShare (bucket: BucketRequest, share: BucketPolicy): BucketRequest {
  return { key: bucket.key, policy: share, cost: bucket.cost, overdraft: overdraws(bucket.cost, bucket.policy.capacity) }
}
