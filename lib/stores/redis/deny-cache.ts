/**
 * The Redis store's deny cache: after Redis refuses a request, the same buckets
 * are decided locally, with no Redis call, for as long as the answer is surely a
 * refusal that Redis would give too.
 *
 * What it keeps, per bucket key, is the bucket's state as the refusal read it in
 * Redis (tokens and last step, both in ms; not the refused cost), the policy it
 * was read under, and how long the key lives yet. A later request whose every
 * bucket is known, under the same policies, is then decided by the engine
 * (`bucket.ts`) on those states:
 * - it is refused only if a bucket is short even as early as the refusal can have
 *   been decided (the moment the call was sent), so never where Redis would admit;
 * - its retry time and tokens are computed as late as it can have been decided
 *   (the moment the reply came back), so the retry time is never early;
 * - a bucket whose key may have expired by now (a full bucket again) is not known.
 *
 * Only this process's replies update it, in Redis's order: a refusal replaces the
 * states of its buckets, an admission forgets them. A request that goes to Redis
 * forgets its buckets' states at once, and while it is on its way (until the
 * client answers or fails its call; a timeout is not enough) no refusal is kept
 * for its keys: its debit would make such a state's wait early. This counts requests in
 * flight per key: one map update per bucket when a request goes to Redis and one
 * when its call settles, only while the cache is on. Requests decided meanwhile
 * for the same keys by another replica can take tokens, as they can after any
 * refusal. One under another policy (another replica's tier for the same user)
 * can also leave more tokens than a kept state counts; the cache then refuses
 * at most until that state's bucket refills to the cost or its key expires.
 *
 * A bucket asked for nothing (cost 0: a penalty's, layers/penalty.ts) refuses
 * only in debt, and another replica puts it in debt with a write this process
 * never sees (the penalty it starts, a refund of a negative amount). Kept as a
 * refusal read it, it would let this cache answer that client's quota refusals,
 * with their shorter wait, through another replica's penalty. So its state is
 * kept at most `ZERO_COST_HOLD_MS` past the earliest moment it may be out of
 * debt (the moment the call went out, for one read out of debt): a penalty
 * started elsewhere is answered here at most that long after it reached Redis.
 * A state read in debt is kept while in debt, so a flood during a penalty still
 * costs Redis nothing.
 */
import { consume, consumeOne, enough, msUntil, tokensAt } from '../../engine/bucket.js'
import type { BucketDecision, BucketPolicy, BucketState } from '../../types/engine.js'
import type { BucketRequest } from '../../types/store.js'
import type { ReplyReader } from './reply.js'

/** What the script tells about a refusal, beyond the decision (see scripts/consume.lua). */
export interface ScriptRefusal {
  /** The script's time when it decided (ms, Redis `TIME` or the test clock). */
  atMs: number
  /** Per bucket, its stored state and its key's remaining TTL; `undefined` when absent (full). */
  buckets: Array<{ tokens: number, lastMs: number, ttlMs: number } | undefined>
}

/**
 * Reads the refusal details that follow a refused decision in the script's reply:
 * the time, then per bucket `<tokens> <last ms> <ttl ms>`, or `-` (absent).
 */
export function readRefusal (values: ReplyReader, count: number): ScriptRefusal {
  const atMs = values.number()
  const buckets: ScriptRefusal['buckets'] = []
  for (let i = 0; i < count; i++) {
    buckets.push(values.absent() ? undefined : { tokens: values.number(), lastMs: values.number(), ttlMs: values.number() })
  }
  return { atMs, buckets }
}

interface Entry {
  policy: BucketPolicy
  /** The state with its last step moved as early as the refusal can have been decided (store clock); `undefined`: full. */
  early: BucketState | undefined
  /** The same state moved as late as it can have been decided (store clock). */
  late: BucketState | undefined
  /** Until when (store clock, ms) the key surely exists; `Infinity` for an absent key or a key without TTL. */
  untilMs: number
}

const samePolicy = (a: BucketPolicy, b: BucketPolicy): boolean =>
  a === b || (a.capacity === b.capacity && a.refillPerSecond === b.refillPerSecond)

/** Keys at 0 requests in flight kept at least (see `landed`). */
const IDLE_KEYS = 1024

/** How long (ms) the state of a bucket asked for nothing is kept once it may be out of debt. */
export const ZERO_COST_HOLD_MS = 100

/**
 * Until when (store clock) the state `early` of a bucket asked for nothing, read by
 * a call sent at `sentMs`, is kept: `ZERO_COST_HOLD_MS` past the earliest moment
 * it may hold 0 tokens again, or past `sentMs` if it may have by then.
 */
function zeroCostUntil (early: BucketState | undefined, policy: BucketPolicy, sentMs: number): number {
  const outMs = early === undefined ? sentMs : early.lastMs + msUntil(early.tokens, 0, policy)
  return (outMs > sentMs ? outMs : sentMs) + ZERO_COST_HOLD_MS
}

export class DenyCache {
  private readonly entries = new Map<string, Entry>()
  /** Per key, this process's requests on their way to Redis (0, or absent, for none). */
  private readonly inFlight = new Map<string, number>()
  /** Keys at 0 in `inFlight`. */
  private idle = 0

  /** `maxSize`: most bucket states kept (≥ 1); all are dropped when it is reached. */
  constructor (private readonly maxSize: number) {}

  /** Bucket states kept now. */
  get size (): number {
    return this.entries.size
  }

  /**
   * The decision for `buckets` at `nowMs` (store clock) if it is surely a refusal
   * Redis would give: every bucket known under the same policy, one of them short.
   * `undefined` otherwise: ask Redis.
   */
  lookup (buckets: readonly BucketRequest[], nowMs: number): BucketDecision | undefined {
    if (this.entries.size === 0) return undefined
    const count = buckets.length
    const late: Array<BucketState | undefined> = []
    let short = false
    for (let i = 0; i < count; i++) {
      const bucket = buckets[i] as BucketRequest
      const entry = this.entries.get(bucket.key)
      if (entry === undefined || !samePolicy(entry.policy, bucket.policy)) return undefined
      if (nowMs >= entry.untilMs) {
        this.entries.delete(bucket.key)
        return undefined
      }
      if (!short) short = !enough(tokensAt(entry.early, bucket.policy, nowMs), bucket.cost)
      late.push(entry.late)
    }
    if (!short) return undefined
    // Short as early as it can be, so short as late too: a refusal, with the later (never early) wait.
    if (count === 1) {
      const bucket = buckets[0] as BucketRequest
      return consumeOne(late[0], bucket.policy, bucket.cost, nowMs)
    }
    return consume(late, buckets.map((bucket) => bucket.policy), buckets.map((bucket) => bucket.cost), nowMs)
  }

  /**
   * Notes that `buckets` go to Redis: their states are forgotten (the call may
   * change them) and no refusal is kept for their keys until `settle(call)`.
   */
  sending (buckets: ReadonlyArray<Pick<BucketRequest, 'key'>>): void {
    this.forget(buckets)
    const inFlight = this.inFlight
    for (const bucket of buckets) {
      const count = inFlight.get(bucket.key)
      if (count === 0) this.idle--
      inFlight.set(bucket.key, (count ?? 0) + 1)
    }
  }

  /**
   * Ends, once `call` settles, the flight of the requests of `batch` (each noted by
   * `sending`); see `landed`.
   */
  settle (batch: ReadonlyArray<{ readonly buckets: ReadonlyArray<Pick<BucketRequest, 'key'>> }>, call: Promise<unknown>): void {
    const landed = (): void => { this.landed(batch) }
    call.then(landed, landed)
  }

  /**
   * Ends the flight of the requests of `batch` (each noted by `sending`): their
   * call was answered or failed. Called before the store reads that call's reply,
   * so that reply's own requests are no longer counted when its refusals are kept.
   */
  landed (batch: ReadonlyArray<{ readonly buckets: ReadonlyArray<Pick<BucketRequest, 'key'>> }>): void {
    const inFlight = this.inFlight
    for (const { buckets } of batch) {
      for (const bucket of buckets) {
        const count = inFlight.get(bucket.key) as number // counted by `sending`
        inFlight.set(bucket.key, count - 1)
        if (count === 1) this.idle++
      }
    }
    // A key's count stays at 0 when its last request lands (a Map's delete and
    // re-add cost more than an update); the keys at 0 go once they outnumber both
    // IDLE_KEYS and the keys in flight: a sweep each of them pays for once.
    if (this.idle > IDLE_KEYS && this.idle > inFlight.size / 2) {
      for (const [key, count] of inFlight) if (count === 0) inFlight.delete(key)
      this.idle = 0
    }
  }

  /**
   * Keeps the states a refusal read, but not for a key that a request sent after
   * it still has in flight. `sentMs` and `receivedMs` (store clock) are when the
   * call went out and when its reply came back: Redis decided in between.
   */
  remember (buckets: readonly BucketRequest[], refusal: ScriptRefusal, sentMs: number, receivedMs: number): void {
    if (buckets.length > this.maxSize) return
    if (this.entries.size + buckets.length > this.maxSize) this.entries.clear()
    // From the script's clock to the store's: as early, and as late, as the decision can have been.
    const toEarly = sentMs - refusal.atMs
    const toLate = receivedMs - refusal.atMs
    buckets.forEach((bucket, i) => {
      if ((this.inFlight.get(bucket.key) ?? 0) > 0) return
      const state = refusal.buckets[i]
      const entry: Entry = state === undefined
        ? { policy: bucket.policy, early: undefined, late: undefined, untilMs: Infinity }
        : {
            policy: bucket.policy,
            early: { tokens: state.tokens, lastMs: state.lastMs + toEarly },
            late: { tokens: state.tokens, lastMs: state.lastMs + toLate },
            untilMs: sentMs + state.ttlMs
          }
      if (bucket.cost === 0) {
        const untilMs = zeroCostUntil(entry.early, bucket.policy, sentMs)
        if (untilMs < entry.untilMs) entry.untilMs = untilMs
      }
      this.entries.set(bucket.key, entry)
    })
  }

  /** Drops the states of `buckets`: Redis admitted them, or a request on them (or a refund or reset of them) goes to Redis. */
  forget (buckets: ReadonlyArray<Pick<BucketRequest, 'key'>>): void {
    if (this.entries.size === 0) return
    for (const bucket of buckets) this.entries.delete(bucket.key)
  }

  clear (): void {
    this.entries.clear()
  }
}
