/**
 * The token-bucket engine: pure functions, no I/O, no clock. Time is passed in
 * as milliseconds; every store (memory, Redis) decides through these rules.
 *
 * Rules (after golang.org/x/time/rate):
 * - a bucket holds up to `capacity` fractional tokens and gains `refillPerSecond`
 *   tokens per second; an absent bucket is a full one;
 * - a bucket holds enough for `needed` tokens when it holds at least `needed`
 *   less a rounding tolerance of 1e-12 × max(1, needed), at most 0.1 token
 *   (`enough`): a rate of max / seconds (2/3 a second) leaves a bucket an ulp
 *   short at the exact time a token is due (0.9999999999999999), and that
 *   request passes;
 * - elapsed time is `max(0, now - last)`, so a clock going backwards adds nothing;
 * - several buckets are consumed all or nothing; a denied request changes nothing;
 * - an allowed request records `last = now`, even when `now` is before `last`;
 * - a refusal's retry time is never early: at it, the same request passes. It is
 *   snapped to whole nanoseconds when the snapped time passes too, so a wait that
 *   is exactly 2 s is 2000 ms, not 2000.0000000000002 (a `Retry-After` of 3);
 * - a cost above capacity (by more than the tolerance) never passes, except on a
 *   bucket with overdraft (one process's share of a larger quota; see `tokensNeeded`).
 */
import type { BucketDecision, BucketPolicy, BucketReading, BucketState } from '../types/engine.js'

/** Tokens a bucket holds at `nowMs`, refilled since its last recorded step and capped at capacity. */
export function tokensAt (state: BucketState | undefined, policy: BucketPolicy, nowMs: number): number {
  if (state === undefined) return policy.capacity
  const elapsedMs = nowMs - state.lastMs
  if (!(elapsedMs > 0) || policy.refillPerSecond === 0) return state.tokens
  const tokens = state.tokens + elapsedMs * (policy.refillPerSecond / 1000)
  return tokens < policy.capacity ? tokens : policy.capacity
}

/**
 * The rounding tolerance for `needed` tokens: 1e-12 × max(1, needed), the
 * rounding a refill at a fractional rate leaves, and at most 0.1 token (reached
 * at 1e11 tokens), so that even at the largest capacity (1e12) it is never a token.
 */
function slack (needed: number): number {
  const relative = 1e-12 * (needed > 1 ? needed : 1)
  return relative < 0.1 ? relative : 0.1
}

/**
 * Whether a bucket holding `available` tokens holds enough for `needed`: at least
 * `needed` less the tolerance (`slack`). Every decision of the engine (and the
 * Redis scripts' `enough`, in the same arithmetic) compares so.
 */
export function enough (available: number, needed: number): boolean {
  return available >= needed - slack(needed)
}

/** The whole tokens a bucket holding `tokens` holds enough for (by `enough`): the largest whole cost that passes now. */
export function wholeTokens (tokens: number): number {
  return Math.floor(tokens + slack(tokens))
}

/** `ms` rounded to whole nanoseconds (the Redis scripts' `toNs`, in the same arithmetic). */
const toNs = (ms: number): number => Math.floor(ms * 1e6 + 0.5) / 1e6

/**
 * Milliseconds until a bucket holding `tokens` holds `wanted` (0 if it already
 * does, by `enough`; `Infinity` if it never will), in whole nanoseconds when the
 * bucket holds enough by then.
 */
export function msUntil (tokens: number, wanted: number, policy: BucketPolicy): number {
  // `enough` three times, its tolerance computed once (a header asks this per bucket per request).
  const least = wanted - slack(wanted)
  if (tokens >= least) return 0
  const rate = policy.refillPerSecond
  if (rate === 0 || policy.capacity < least) return Infinity
  const wait = (wanted - tokens) * 1000 / rate
  const snapped = toNs(wait)
  return tokens + snapped * (rate / 1000) >= least ? snapped : wait
}

/**
 * Tokens a bucket must hold for a request of `cost` to pass: the cost itself, or,
 * with `overdraft`, at most the capacity. Overdraft is for a bucket that is one
 * process's share of a larger quota (`memoryStore({ replicas })`, the Redis
 * store's local fallback), which a cost the whole quota admits may exceed: such a
 * cost passes when the share is full, and the whole cost is debited, leaving the
 * bucket in debt (negative tokens) that refills like any shortfall. The long-run
 * rate is then still the policy's: over any `t` seconds a bucket spends at most
 * `capacity + refillPerSecond × t` plus one request's excess (`cost − capacity`).
 */
export function tokensNeeded (cost: number, policy: BucketPolicy, overdraft: boolean): number {
  return overdraft && cost > policy.capacity ? policy.capacity : cost
}

/**
 * Milliseconds from `nowMs` until a bucket in `state`, holding `available` now,
 * holds enough for `cost` (0 if it does; `Infinity` if it never will), counting
 * the time a clock that went backwards needs to catch up. A retry at the time it
 * gives passes: `enough(tokensAt(state, policy, nowMs + wait), cost)`. That time
 * is in whole nanoseconds when it passes so; else the quotient is nudged later
 * past floating-point rounding until it passes.
 */
export function retryWait (state: BucketState | undefined, policy: BucketPolicy, nowMs: number, available: number, cost: number): number {
  let wait = msUntil(available, cost, policy)
  if (wait === 0 || wait === Infinity) return wait
  // A clock that went back behind the last step refills nothing until it passes it again.
  if (state !== undefined && state.lastMs > nowMs) wait += state.lastMs - nowMs
  const snapped = toNs(wait)
  if (enough(tokensAt(state, policy, nowMs + snapped), cost)) return snapped
  let step = Number.EPSILON * Math.abs(nowMs + wait) || Number.MIN_VALUE
  for (let i = 0; i < 64 && !enough(tokensAt(state, policy, nowMs + wait), cost); i++) {
    wait += step
    step *= 2
  }
  return wait
}

/**
 * Consumes `costs[i]` from bucket `i` for every `i`, all or nothing, at `nowMs`.
 * `states[i]` is the bucket's stored state (`undefined` = absent = full).
 * `overdrafts[i]` (default `false`) lets bucket `i` go into debt (see `tokensNeeded`):
 * its tokens after an allowed step may then be negative.
 * The caller stores `{ tokens: decision.tokens[i], lastMs: nowMs }` for every
 * bucket when the decision is allowed, and nothing when it is denied.
 */
export function consume (
  states: ReadonlyArray<BucketState | undefined>,
  policies: readonly BucketPolicy[],
  costs: readonly number[],
  nowMs: number,
  overdrafts?: readonly boolean[]
): BucketDecision {
  const count = policies.length
  const tokens = new Array<number>(count)
  let allowed = true
  let retryAfterMs = 0
  for (let i = 0; i < count; i++) {
    const policy = policies[i] as BucketPolicy
    const needed = tokensNeeded(costs[i] as number, policy, overdrafts?.[i] === true)
    const available = tokensAt(states[i], policy, nowMs)
    tokens[i] = available
    if (enough(available, needed)) continue
    allowed = false
    const wait = retryWait(states[i], policy, nowMs, available, needed)
    if (wait > retryAfterMs) retryAfterMs = wait
  }
  if (!allowed) return { allowed, tokens, retryAfterMs }
  for (let i = 0; i < count; i++) tokens[i] = (tokens[i] as number) - (costs[i] as number)
  return { allowed, tokens, retryAfterMs: 0 }
}

/** `consume` for a single bucket, without the arrays. */
export function consumeOne (state: BucketState | undefined, policy: BucketPolicy, cost: number, nowMs: number, overdraft = false): BucketDecision {
  const needed = tokensNeeded(cost, policy, overdraft)
  const available = tokensAt(state, policy, nowMs)
  if (enough(available, needed)) return { allowed: true, tokens: [available - cost], retryAfterMs: 0 }
  return { allowed: false, tokens: [available], retryAfterMs: retryWait(state, policy, nowMs, available, needed) }
}

/** Milliseconds until a bucket holding `tokens` is full again (`Infinity` if it never refills and is not full). */
export function msUntilFull (tokens: number, policy: BucketPolicy): number {
  return msUntil(tokens, policy.capacity, policy)
}

/**
 * Reads a bucket at `nowMs` without taking: its tokens, how long until a request
 * of `cost` passes (the `retryAfterMs` that `consume` gives when it refuses, 0 when
 * it would allow; `overdraft` as there) and how long until it is full. Both waits
 * count the time a clock that went backwards needs to catch up, and neither is early.
 */
export function read (state: BucketState | undefined, policy: BucketPolicy, cost: number, nowMs: number, overdraft = false): BucketReading {
  const tokens = tokensAt(state, policy, nowMs)
  return {
    tokens,
    retryAfterMs: retryWait(state, policy, nowMs, tokens, tokensNeeded(cost, policy, overdraft)),
    fullInMs: retryWait(state, policy, nowMs, tokens, policy.capacity)
  }
}

/**
 * Gives `amount` tokens (finite) back to a bucket at `nowMs`: the state it then
 * holds, to store in place of `state`. Never above capacity: a bucket that would
 * be full returns `undefined` (absent, i.e. full; the store deletes it), and an
 * absent bucket stays absent. A bucket in debt gains `amount` and may stay in
 * debt. A negative `amount` is a debt to put the bucket in, from a full (absent)
 * bucket too: it then holds `min(tokens, amount)`, so the same debt set twice is
 * set once (a penalty starts so, see layers/penalty.ts). Like an allowed step, it
 * records `lastMs = nowMs`, even when `nowMs` is before the last step (a clock
 * that went backwards).
 */
export function refund (state: BucketState | undefined, policy: BucketPolicy, amount: number, nowMs: number): BucketState | undefined {
  if (state === undefined && amount >= 0) return undefined
  const held = tokensAt(state, policy, nowMs)
  const tokens = amount < 0 ? Math.min(held, amount) : held + amount
  return tokens < policy.capacity ? { tokens, lastMs: nowMs } : undefined
}
