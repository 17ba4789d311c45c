/**
 * The contract every store implements (memory, Redis, or your own).
 * Stores keep bucket state by key and decide with the engine's rules (`bucket.ts`).
 */
import type { BucketDecision, BucketPolicy, BucketReading } from './engine.js'

/** One bucket of a store step. */
export interface BucketRequest {
  /**
   * The bucket's key. All keys of one step share one hash tag (the text between
   * the first `{` and the next `}`), so a Redis Cluster can take them in one slot.
   */
  readonly key: string
  readonly policy: BucketPolicy
  /** Tokens to take, finite and ≥ 0 (checked before the store is called). */
  readonly cost: number
  /**
   * `policy` is this process's share of a larger quota, and `cost` may exceed its
   * capacity (the caller sets it only for a cost within the whole quota): such a cost passes when the bucket is
   * full and is debited whole, leaving the bucket in debt, so that N shares still
   * spend one quota in the long run (`tokensNeeded` in bucket.ts). Default `false`:
   * a cost above capacity never passes. Set by the plugin under
   * `memoryStore({ replicas })`; a store that keeps whole quotas may ignore it.
   */
  readonly overdraft?: boolean | undefined
}

/** What a replica settles of one bucket (`Store.settle`). */
export interface BucketDebit {
  readonly key: string
  readonly policy: BucketPolicy
  /**
   * Tokens spent without a reservation, less reserved tokens given back: taken
   * whatever the bucket holds (it may go into debt); a negative number gives
   * tokens back, never above capacity.
   */
  readonly spent: number
  /** Tokens to reserve for this replica (≥ 0), taken from what the bucket then holds, at most all of it. */
  readonly reserve: number
}

/** A bucket after a settlement: its tokens (`NaN`: the debit was certainly not taken) and the tokens reserved. */
export interface BucketSettlement {
  tokens: number
  reserved: number
}

/** A decision, and how it was reached when the store could not use its shared state. */
export interface StoreDecision extends BucketDecision {
  /**
   * Unset in normal operation. `'open'`: the shared state was unreachable and the
   * request was let through uncounted (`tokens` mean nothing). `'local'`: decided
   * by a local fallback bucket under `policies`.
   */
  degraded?: 'open' | 'local'
  /** The policies actually applied, when they differ from the requested ones (a local share). */
  policies?: readonly BucketPolicy[]
}

/** A bucket read without taking (`Store.peek`), and how it was read when the store could not use its shared state. */
export interface StoreReading extends BucketReading {
  /** As in `StoreDecision`: `'open'`, a full bucket reported uncounted; `'local'`, the local fallback bucket under `policy`. */
  degraded?: 'open' | 'local'
  /** The policy actually applied, when it differs from the requested one (a local share). */
  policy?: BucketPolicy
}

/** What a store may log through: Fastify's logger fits. */
export interface StoreLogger {
  info (object: object, message: string): void
  warn (object: object, message: string): void
  error (object: object, message: string): void
}

/**
 * `consume` and `close` are required. `peek`, `refund` and `reset` are optional: a
 * store without them registers and limits as usual, and only a call of the
 * matching `fastify.tollgate` method fails (`TOLLGATE_STORE_UNSUPPORTED`, naming it).
 */
export interface Store {
  /**
   * The part of every quota this process enforces, in (0, 1]: 1 when the state is
   * shared or there is one process; `1 / N` for N replicas that each keep their own.
   * Read once at startup. Default 1.
   */
  readonly quotaShare?: number
  /**
   * Takes every bucket's cost, all or nothing (see `consume` in bucket.ts).
   * Answers synchronously when it can; a promise otherwise. A rejection or a throw
   * means the store could not decide (the request gets a 503).
   */
  consume (buckets: readonly BucketRequest[]): StoreDecision | Promise<StoreDecision>
  /**
   * Optional, for `fastify.tollgate.peek`: reads the bucket `bucket.key` under
   * `bucket.policy` without taking anything (`read` in bucket.ts), with
   * `retryAfterMs` for `bucket.cost` (and `bucket.overdraft`). Changes nothing.
   */
  peek? (bucket: BucketRequest): StoreReading | Promise<StoreReading>
  /**
   * Optional, for `fastify.tollgate.refund`: gives `bucket.cost` tokens back to the
   * bucket (`refund` in bucket.ts: never above capacity; an absent bucket stays
   * absent) and returns the tokens it holds then. A negative `cost` (from a penalty,
   * never from `fastify.tollgate`) is a debt to put the bucket in: it then holds at
   * most that many tokens. Rejects (or throws) when the shared state could not be changed.
   */
  refund? (bucket: BucketRequest): number | Promise<number>
  /**
   * Optional, for `fastify.tollgate.reset`: deletes the bucket `key`, which is then
   * full (absent). Rejects (or throws) when the shared state could not be changed.
   */
  reset? (key: string): void | Promise<void>
  /**
   * Optional, for `edge.mode: 'settle'`: for each bucket, takes `spent` whatever
   * it holds, then reserves up to `reserve` of what it holds (see `BucketDebit`),
   * atomically per bucket; resolves with each bucket's settlement, in order, with
   * `tokens: NaN` for a bucket whose debit was certainly not taken. A key may
   * come twice: its debits are taken in order. Resolve only once the outcome is
   * known: a debit that was sent but not answered may have been taken. Rejects
   * (or throws) when nothing was taken.
   */
  settle? (debits: readonly BucketDebit[]): Promise<readonly BucketSettlement[]>
  /**
   * Optional, for `edge.mode: 'replica-share'` and `'settle'`: how many replicas
   * share this store now (an integer ≥ 1), read at each use.
   */
  readonly liveReplicas?: number
  /**
   * Optional: this process's clock in ms, by which the store decides locally (a
   * fallback). Edge modes that decide in this process use it too. Default
   * `performance.now()`.
   */
  readonly localClock?: () => number
  /** Releases timers and state when the app closes. Never closes a client the user owns. */
  close (): void | Promise<void>
  /** Called once at register with the app's logger. */
  useLogger? (logger: StoreLogger): void
  /** Awaited at `app.ready()`: a store that connects somewhere may wait for it here (bounded). */
  ready? (): Promise<void>
  /**
   * Where the keys live, for the TOLLGATE_SHARED_STORE warning: two registrations
   * in one process whose stores have the same `owner` (e.g. a Redis client) and
   * `prefix` share keys. Default: the store object itself, with no prefix.
   */
  readonly keyspace?: { owner: object, prefix: string }
}
