/**
 * Response headers from a decision: `RateLimit-Policy` and `RateLimit`
 * (draft-ietf-httpapi-ratelimit-headers -10/-11), or the legacy `X-RateLimit-*`
 * trio, and `Retry-After` on a refusal.
 *
 * Each layer appends its own list members, so edge and app both appear:
 * `RateLimit: "edge";r=99;t=1, "app";r=10;t=2`.
 */
import type { FastifyReply } from 'fastify'
import { msUntilFull, type BucketPolicy } from './bucket.js'

/** `'draft'` (default): RateLimit and RateLimit-Policy; `'legacy'`: X-RateLimit-*; `false`: none. */
export type HeaderStyle = 'draft' | 'legacy' | false

/** A bucket as it appears in the headers: its list-member name and its policy, formatted once. */
export interface NamedPolicy {
  /** The policy name, e.g. `edge`, `app`, `route`. */
  readonly name: string
  readonly policy: BucketPolicy
  /** `"edge";q=100;w=2`, the `RateLimit-Policy` member (built once at startup). */
  readonly policyMember: string
}

/** Seconds, rounded up. */
const ceilSeconds = (ms: number): number => Math.ceil(ms / 1000)

export function namedPolicy (name: string, policy: BucketPolicy): NamedPolicy {
  // w: seconds to refill from empty; left out when the bucket never refills.
  const window = policy.refillPerSecond > 0 ? `;w=${Math.ceil(policy.capacity / policy.refillPerSecond)}` : ''
  return { name, policy, policyMember: `"${name}";q=${Math.floor(policy.capacity)}${window}` }
}

/** `"edge";r=99;t=1`: whole tokens left, and seconds until full (left out when it never refills). */
export function stateMember (bucket: NamedPolicy, tokens: number): string {
  const untilFull = bucket.policy.refillPerSecond > 0 ? `;t=${ceilSeconds(msUntilFull(tokens, bucket.policy))}` : ''
  return `"${bucket.name}";r=${Math.floor(tokens)}${untilFull}`
}

/**
 * `Retry-After` delay-seconds for a refusal: whole seconds, rounded up, at least 1.
 * `undefined` when the request can never pass (a bucket that never refills).
 */
export function retryAfterSeconds (retryAfterMs: number): number | undefined {
  if (!Number.isFinite(retryAfterMs)) return undefined
  return Math.max(1, ceilSeconds(retryAfterMs))
}

function append (reply: FastifyReply, name: string, member: string): void {
  const previous = reply.getHeader(name)
  reply.header(name, previous === undefined ? member : `${String(previous)}, ${member}`)
}

/** Writes the headers for the buckets of one layer's step; `tokens[i]` belongs to `buckets[i]`. */
export function writeHeaders (
  reply: FastifyReply,
  style: HeaderStyle,
  buckets: readonly NamedPolicy[],
  tokens: readonly number[]
): void {
  if (style === 'draft') {
    for (let i = 0; i < buckets.length; i++) {
      const bucket = buckets[i] as NamedPolicy
      append(reply, 'ratelimit-policy', bucket.policyMember)
      append(reply, 'ratelimit', stateMember(bucket, tokens[i] as number))
    }
  } else if (style === 'legacy') {
    // The legacy trio can show one bucket: the one with the fewest whole tokens left wins.
    for (let i = 0; i < buckets.length; i++) {
      const bucket = buckets[i] as NamedPolicy
      const remaining = Math.floor(tokens[i] as number)
      const shown = reply.getHeader('x-ratelimit-remaining')
      if (shown !== undefined && Number(shown) <= remaining) continue
      reply.header('x-ratelimit-limit', Math.floor(bucket.policy.capacity))
      reply.header('x-ratelimit-remaining', remaining)
      const untilFull = msUntilFull(tokens[i] as number, bucket.policy)
      if (Number.isFinite(untilFull)) reply.header('x-ratelimit-reset', ceilSeconds(untilFull))
      else reply.removeHeader('x-ratelimit-reset')
    }
  }
}
