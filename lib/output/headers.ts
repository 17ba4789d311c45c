/**
 * Response headers from a decision: `RateLimit-Policy` and `RateLimit`
 * (draft-ietf-httpapi-ratelimit-headers -10/-11), or a trio of one bucket (the
 * legacy `X-RateLimit-*`, or draft -03's `RateLimit-Limit`, `-Remaining` and
 * `-Reset`), and `Retry-After` on a refusal.
 *
 * Each layer appends its own list members, so edge and app both appear:
 * `RateLimit: "edge";r=99;t=1, "app";r=10;t=2`.
 */
import type { HeaderStyle } from '../types/options.js'
import type { FastifyReply } from 'fastify'
import { msUntilFull, wholeTokens } from '../engine/bucket.js'
import type { BucketPolicy } from '../types/engine.js'
import { inRegistration } from './key-format.js'

/** A bucket as it appears in the headers: its list-member name and its policy, formatted once. */
export interface NamedPolicy {
  /** The policy name, e.g. `edge`, `app`, `route`. */
  readonly name: string
  readonly policy: BucketPolicy
  /** `"edge";q=100;w=2`, the `RateLimit-Policy` member (built once at startup). */
  readonly policyMember: string
}

/**
 * The largest Integer an RFC 9651 structured field may carry (15 digits); a
 * strict parser drops a whole field with a longer one (or `1e+21`). Every number
 * these headers print is a whole number from 0 to this one. The policy bounds of
 * config/check.ts keep `q` and `r` ≤ 1e12 and `w`, `t` and `Retry-After` ≤ 1e10 s;
 * the clamp covers what a store may still hand back: a custom store's odd tokens
 * (negative, NaN, huge) or waits, and the Redis store's local share, whose floor
 * of one token can stretch the time to fill by the number of live replicas.
 */
export const MAX_FIELD_INTEGER = 999_999_999_999_999

/** A whole number (already rounded) as the headers may print it: 0 to MAX_FIELD_INTEGER; NaN is 0. */
const fieldInteger = (whole: number): number => whole > 0 ? Math.min(whole, MAX_FIELD_INTEGER) : 0

/**
 * Seconds, rounded up. The engine's waits are in whole nanoseconds where that is
 * exact (bucket.ts `msUntil`, `retryWait`): a wait of 2 s is 2000 ms, so 2, not 3.
 */
const ceilSeconds = (ms: number): number => Math.ceil(ms / 1000)

/** Tokens as a bucket can hold them: 0 to capacity (NaN is 0). */
const held = (tokens: number, policy: BucketPolicy): number => tokens > 0 ? Math.min(tokens, policy.capacity) : 0

/** `named` in registration `registration`: its member `"hourly.edge"`; as it is without a name. */
export function inRegistrationNamed (named: NamedPolicy, registration: string | undefined): NamedPolicy {
  return registration === undefined ? named : namedPolicy(inRegistration(registration, named.name), named.policy)
}

export function namedPolicy (name: string, policy: BucketPolicy): NamedPolicy {
  // w: seconds to refill from empty (to 12 digits first: per(11, 'minute') is 60 s, not 60.00000000000001);
  // left out when the bucket never refills.
  const window = policy.refillPerSecond > 0 ? `;w=${fieldInteger(Math.ceil(+(policy.capacity / policy.refillPerSecond).toPrecision(12)))}` : ''
  return { name, policy, policyMember: `"${name}";q=${fieldInteger(Math.floor(policy.capacity))}${window}` }
}

/**
 * Whole tokens left (0 for a bucket in debt; as the engine's `enough` counts them,
 * so 0.9999999999999999 is 1), and whole seconds until full (`undefined`: never),
 * the debt of an overdrawn share included.
 */
function bucketState (tokens: number, policy: BucketPolicy): { remaining: number, untilFull: number | undefined } {
  const now = held(tokens, policy)
  const untilFullMs = msUntilFull(tokens < 0 ? tokens : now, policy)
  return {
    remaining: fieldInteger(Math.min(wholeTokens(now), Math.floor(policy.capacity))),
    untilFull: Number.isFinite(untilFullMs) ? fieldInteger(ceilSeconds(untilFullMs)) : undefined
  }
}

/** `"edge";r=99;t=1`: whole tokens left, and seconds until full (left out when it never refills). */
export function stateMember (bucket: NamedPolicy, tokens: number): string {
  const { remaining, untilFull } = bucketState(tokens, bucket.policy)
  const refills = bucket.policy.refillPerSecond > 0 && untilFull !== undefined
  return `"${bucket.name}";r=${remaining}${refills ? `;t=${untilFull}` : ''}`
}

/**
 * `Retry-After` delay-seconds for a refusal: whole seconds, rounded up, from 1 to
 * MAX_FIELD_INTEGER. `undefined` when the request can never pass (a bucket that never refills).
 */
export function retryAfterSeconds (retryAfterMs: number): number | undefined {
  if (!Number.isFinite(retryAfterMs)) return undefined
  return Math.max(1, fieldInteger(ceilSeconds(retryAfterMs)))
}

/**
 * The buckets of one layer's step as the headers show them, in order, with their
 * `RateLimit-Policy` members joined once (a step's policies are constant per tier and route).
 */
export class HeaderLayout {
  /** `"app";q=100;w=10, "route";q=5;w=60`: this step's members of `RateLimit-Policy`. */
  readonly policyValue: string
  private lastBefore: string | undefined
  private lastCombined = ''

  constructor (readonly buckets: readonly NamedPolicy[]) {
    this.policyValue = buckets.map((bucket) => bucket.policyMember).join(', ')
  }

  /** `RateLimit-Policy` with this step's members after `before` (another layer's); the last result is kept. */
  policyAfter (before: string): string {
    if (before !== this.lastBefore) {
      this.lastBefore = before
      this.lastCombined = `${before}, ${this.policyValue}`
    }
    return this.lastCombined
  }
}

/** The styles that show one bucket in three fields. */
type TrioStyle = Exclude<HeaderStyle, 'draft' | false>

/** The three fields of a trio style, lowercase as written. */
interface TrioNames {
  /** The capacity, whole. */
  readonly limit: string
  /** Whole tokens now. */
  readonly remaining: string
  /** Whole seconds until full; left out when the bucket never refills. */
  readonly reset: string
}

/** Each trio style's names: one writer, the names as data. */
const TRIO_NAMES: Readonly<Record<TrioStyle, TrioNames>> = {
  legacy: { limit: 'x-ratelimit-limit', remaining: 'x-ratelimit-remaining', reset: 'x-ratelimit-reset' },
  'draft-03': { limit: 'ratelimit-limit', remaining: 'ratelimit-remaining', reset: 'ratelimit-reset' }
}

/** `RateLimit-Policy` with this step's members appended. */
function appendPolicy (reply: FastifyReply, layout: HeaderLayout): void {
  const policy = reply.getHeader('ratelimit-policy')
  reply.header('ratelimit-policy', policy === undefined
    ? layout.policyValue
    : typeof policy === 'string' ? layout.policyAfter(policy) : `${String(policy)}, ${layout.policyValue}`)
}

/** `value` appended to what header `name` holds (an earlier layer's members, or another limiter's). */
function append (reply: FastifyReply, name: string, value: string): void {
  const previous = reply.getHeader(name)
  reply.header(name, previous === undefined ? value : `${String(previous)}, ${value}`)
}

/** Writes the headers for the buckets of one layer's step; `tokens[i]` belongs to `layout.buckets[i]`. */
export function writeHeaders (
  reply: FastifyReply,
  style: HeaderStyle,
  layout: HeaderLayout,
  tokens: readonly number[]
): void {
  const buckets = layout.buckets
  if (style === 'draft') {
    appendPolicy(reply, layout)
    let state = stateMember(buckets[0] as NamedPolicy, tokens[0] as number)
    for (let i = 1; i < buckets.length; i++) state += `, ${stateMember(buckets[i] as NamedPolicy, tokens[i] as number)}`
    append(reply, 'ratelimit', state)
  } else if (style !== false) {
    writeTrio(reply, TRIO_NAMES[style], layout, tokens)
  }
}

/** A trio can show one bucket: the one with the fewest whole tokens left wins, across layers too. */
function writeTrio (reply: FastifyReply, names: TrioNames, layout: HeaderLayout, tokens: readonly number[]): void {
  const buckets = layout.buckets
  for (let i = 0; i < buckets.length; i++) {
    const bucket = buckets[i] as NamedPolicy
    const { remaining, untilFull } = bucketState(tokens[i] as number, bucket.policy)
    const shown = reply.getHeader(names.remaining)
    if (shown !== undefined && Number(shown) <= remaining) continue
    reply.header(names.limit, fieldInteger(Math.floor(bucket.policy.capacity)))
    reply.header(names.remaining, remaining)
    if (untilFull !== undefined) reply.header(names.reset, untilFull)
    else reply.removeHeader(names.reset)
  }
}

/**
 * The policies alone, for a step the store let through uncounted (`failMode: 'open'`):
 * what is left and when it is full are unknown. A trio shows the smallest capacity,
 * unless a counted bucket's trio is already shown (it stays whole).
 */
export function writePolicies (reply: FastifyReply, style: HeaderStyle, layout: HeaderLayout): void {
  if (style === 'draft') {
    appendPolicy(reply, layout)
  } else if (style !== false) {
    const names = TRIO_NAMES[style]
    if (reply.getHeader(names.remaining) !== undefined) return
    let limit = MAX_FIELD_INTEGER
    for (const bucket of layout.buckets) limit = Math.min(limit, fieldInteger(Math.floor(bucket.policy.capacity)))
    const shown = reply.getHeader(names.limit)
    if (shown === undefined || Number(shown) > limit) reply.header(names.limit, limit)
  }
}
