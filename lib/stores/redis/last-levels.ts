/**
 * The level Redis last reported for each bucket this replica used, and when: where
 * the `'local'` fallback starts a bucket's share when Redis goes away (its share of
 * that level, refilled since), instead of a full share at every outage. Bounded:
 * past `maxKeys` the tenth first noted goes (a key not known starts from a full
 * share; a hot key is noted again at its next reply).
 */
import { tokensAt } from '../../engine/bucket.js'
import type { BucketPolicy, BucketState } from '../../types/engine.js'
import type { BucketRequest } from '../../types/store.js'

/** Keys kept at most (about 100 bytes each): as many as the local store keeps. */
export const LAST_LEVEL_KEYS = 100_000

export class LastLevels {
  private readonly levels = new Map<string, BucketState>()

  constructor (private readonly maxKeys = LAST_LEVEL_KEYS) {}

  /** Redis reported `tokens[i]` for `buckets[i]` at `atMs` (this process's clock). */
  note (buckets: readonly BucketRequest[], tokens: readonly number[], atMs: number): void {
    for (let i = 0; i < buckets.length; i++) {
      const key = (buckets[i] as BucketRequest).key
      const level = this.levels.get(key)
      if (level !== undefined) {
        level.tokens = tokens[i] as number
        level.lastMs = atMs
        continue
      }
      if (this.levels.size >= this.maxKeys) this.evict()
      this.levels.set(key, { tokens: tokens[i] as number, lastMs: atMs })
    }
  }

  /** Drops the tenth of the keys first noted. */
  private evict (): void {
    const keys = this.levels.keys() // in the order first noted; a Map's iterator goes on past a deletion
    for (let left = Math.max(1, Math.floor(this.maxKeys / 10)); left > 0; left--) this.levels.delete(keys.next().value as string)
  }

  /**
   * Where this replica's share `share` of `bucket` starts at `nowMs`: the share's
   * part of the level last reported, refilled since under the whole policy, less
   * `owed` (spent locally and not charged yet; it may be negative: a bucket in
   * debt); `undefined` for a key with no level known.
   */
  shareAt (bucket: BucketRequest, share: BucketPolicy, nowMs: number, owed: number): number | undefined {
    const level = this.levels.get(bucket.key)
    if (level === undefined) return undefined
    return (tokensAt(level, bucket.policy, nowMs) - owed) * share.capacity / bucket.policy.capacity
  }

  /** A key reset in Redis is full again. */
  forget (key: string): void {
    this.levels.delete(key)
  }
}
