/**
 * The engine's types: a bucket's policy, its stored state, and what a step or a
 * read of it decides. The functions are in engine/bucket.ts.
 */

/** How a bucket fills. Both numbers are validated at startup, never here. */
export interface BucketPolicy {
  /** Largest number of tokens the bucket holds (the burst), ≥ 1. */
  readonly capacity: number
  /** Tokens added per second, ≥ 0; 0 means the bucket never refills. */
  readonly refillPerSecond: number
}

/** What a store keeps per bucket. */
export interface BucketState {
  /** Tokens left at `lastMs` (fractional). */
  tokens: number
  /** When `tokens` was recorded, in the store's clock (ms). */
  lastMs: number
}

/** The outcome of one all-or-nothing step over one or more buckets. */
export interface BucketDecision {
  allowed: boolean
  /**
   * Tokens in each bucket after the step, in the order the buckets were given
   * (debited when allowed, untouched when denied).
   */
  tokens: number[]
  /**
   * When denied: milliseconds until every bucket holds its cost, so that the
   * same request would pass (`Infinity` when a bucket that is short never
   * refills). 0 when allowed.
   */
  retryAfterMs: number
}

/** A bucket as it is now, read without taking (see `read`). */
export interface BucketReading {
  /** Tokens held now: fractional, at most capacity, negative while in debt (an overdraft). */
  tokens: number
  /** Milliseconds until the bucket holds the cost read for (0: it does now; `Infinity`: never), as `consume` would refuse it. */
  retryAfterMs: number
  /** Milliseconds until the bucket is full (0: full now; `Infinity`: it never refills). */
  fullInMs: number
}
