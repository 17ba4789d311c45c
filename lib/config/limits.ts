/**
 * A tier's quota (and a route's): one policy, or several named limits consumed
 * together, all or nothing, as pricing pages write them: "10 a second, 1 000 an
 * hour, 20 000 a day".
 */
import type { BucketPolicy } from '../types/engine.js'
import type { Period } from '../types/options.js'
import { inRegistrationNamed, namedPolicy, type NamedPolicy } from '../output/headers.js'
import { limitSuffix } from '../output/key-format.js'
import { sharePolicy } from '../engine/share.js'
import { checkInteger, checkNumber, checkObject, checkPolicy, checkTiers, describe, expected, failOption, type Fail } from './check.js'

/** One limit of a quota, as the layers use it. */
export interface TierLimit {
  /** Its header name and this process's share of its policy. */
  readonly named: NamedPolicy
  /** The policy as configured: costs are checked against its capacity. */
  readonly whole: BucketPolicy
  /** Appended to the layer's bucket key: `''` for a quota of one policy, `:<name>` for a limit of a list. */
  readonly keySuffix: string
}

/** The most limits one quota may list: each is a bucket every request of the tier consumes. */
export const MAX_LIMITS = 8
const LIMIT_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,31}$/
/** The edge's names: both layers' members share the headers. */
const EDGE_NAMES = new Set(['edge', 'edge-route'])

const PERIODS: Readonly<Record<Period, number>> = { second: 1, minute: 60, hour: 3600, day: 86_400, week: 604_800 }

/**
 * `count` requests per `period` as a token bucket: a burst of up to `count`, refilled
 * at `count` per period. `per(1000, 'hour')` is `{ capacity: 1000, refillPerSecond: 1000 / 3600 }`.
 * `period`: `'second'`, `'minute'`, `'hour'`, `'day'`, `'week'`, or a number of seconds > 0.
 * Throws `TOLLGATE_INVALID_OPTION` for a count below 1 or an unknown period.
 */
export function per (count: number, period: Period | number): BucketPolicy {
  checkNumber(failOption, 'per(count)', count, 1)
  let seconds: number
  if (typeof period === 'number') {
    if (!Number.isFinite(period) || period <= 0) expected(failOption, 'per(…, period)', 'a number of seconds > 0', period)
    seconds = period
  } else {
    if (typeof period !== 'string' || !Object.hasOwn(PERIODS, period)) {
      expected(failOption, 'per(…, period)', `${Object.keys(PERIODS).map((p) => `'${p}'`).join(', ')} or a number of seconds > 0`, period)
    }
    seconds = PERIODS[period]
  }
  return Object.freeze({ capacity: count, refillPerSecond: count / seconds })
}

/**
 * A checked quota: a policy (the one limit named `single`), or a list of 1 to
 * MAX_LIMITS named limits. `share` scales a policy to this process's share;
 * `separator` comes before a limit's name in its key suffix (`:hour`; a route's
 * `#hour`, which no route's name holds).
 */
export function checkQuota (
  fail: Fail, path: string, value: unknown, single: string, share: (path: string, policy: BucketPolicy) => BucketPolicy, separator: ':' | '#' = ':'
): readonly TierLimit[] {
  if (!Array.isArray(value)) {
    const whole = checkPolicy(fail, path, value)
    return Object.freeze([{ named: namedPolicy(single, share(path, whole)), whole, keySuffix: '' }])
  }
  // Read once, item by item: a value from a request (an identity's quota) may be hostile.
  const length: unknown = value.length
  checkInteger(fail, `${path}.length`, length, 1, MAX_LIMITS)
  const items: unknown[] = []
  for (let i = 0; i < (length as number); i++) items.push((value as unknown[])[i])
  const seen = new Set<string>()
  return Object.freeze(items.map((item, i): TierLimit => {
    const at = `${path}[${i}]`
    const name = checkName(fail, `${at}.name`, checkObject(fail, at, item).name)
    if (EDGE_NAMES.has(name)) fail(`Expected \`${at}.name\` to differ from the edge's names (edge, edge-route), got ${describe(name)}`)
    if (seen.has(name)) fail(`Expected the names in \`${path}\` to be unique, got ${describe(name)} twice`)
    seen.add(name)
    const whole = checkPolicy(fail, at, item, ['name'])
    return { named: namedPolicy(name, share(at, whole)), whole, keySuffix: limitSuffix(separator, name) }
  }))
}

/** A limit's name (or a limiter's): 1 to 32 letters, digits, `_` or `-`, starting with a letter (a header member's name). */
export function checkName (fail: Fail, path: string, value: unknown): string {
  if (typeof value !== 'string' || !LIMIT_NAME.test(value)) {
    expected(fail, path, 'a name of 1 to 32 letters, digits, `_` or `-`, starting with a letter', value)
  }
  return value
}

/** `limits` in registration `registration` (their header members `"hourly.app"`); as they are without a name. */
export function limitsIn (limits: readonly TierLimit[], registration: string | undefined): readonly TierLimit[] {
  if (registration === undefined) return limits
  return Object.freeze(limits.map((limit) => ({ ...limit, named: inRegistrationNamed(limit.named, registration) })))
}

/** Each tier's `limits` in registration `registration` (prototype-less, as `checkTiers` makes them). */
export function tiersIn (tiers: Record<string, readonly TierLimit[]>, registration: string | undefined): Record<string, readonly TierLimit[]> {
  if (registration === undefined) return tiers
  const renamed = Object.create(null) as Record<string, readonly TierLimit[]>
  for (const tier of Object.keys(tiers)) renamed[tier] = limitsIn(tiers[tier] as readonly TierLimit[], registration)
  return renamed
}

/** The smallest capacity of `limits` as configured: a cost above it could never pass. */
export function capacityOf (limits: readonly TierLimit[]): number {
  let capacity = Infinity
  for (const limit of limits) capacity = Math.min(capacity, limit.whole.capacity)
  return capacity
}

/** The limits' header names. */
export const namesOf = (limits: readonly TierLimit[]): string[] => limits.map((limit) => limit.named.name)

/** This process's share of a policy; capacity must still admit one request. */
export function share (fail: Fail, path: string, policy: BucketPolicy, quotaShare: number): BucketPolicy {
  if (quotaShare === 1) return policy
  const capacity = policy.capacity * quotaShare
  if (capacity < 1) {
    fail(`Expected \`${path}.capacity\` × the store's quota share (${+quotaShare.toPrecision(4)}) to be ≥ 1, got ${+capacity.toPrecision(4)} from \`${policy.capacity}\``)
  }
  return Object.freeze(sharePolicy(policy, quotaShare))
}

/** Checked tiers (see `checkTiers`), each a list of limits; a tier of one policy is one limit named `single`. */
export function checkTierLimits (fail: Fail, path: string, value: unknown, single: string, quotaShare: number, separator?: ':' | '#'): Record<string, readonly TierLimit[]> {
  return checkTiers(fail, path, value, (at, quota) => checkQuota(fail, at, quota, single, (of, policy) => share(fail, of, policy, quotaShare), separator))
}
