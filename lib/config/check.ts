/**
 * Small checks for options and route configs. Each returns the checked value or
 * calls `fail` with a message that names the option, the value given and what
 * was expected: ``Expected `edge.capacity` to be a finite number ≥ 1, got `-1` (number)``.
 */
import { InvalidOptionError } from '../output/errors.js'
import type { BucketPolicy } from '../types/engine.js'

/** Throws the coded error of the context being checked. */
export type Fail = (problem: string) => never

export const failOption: Fail = (problem) => { throw new InvalidOptionError(problem) }

/**
 * Property names whose values `describe` never prints, at any depth: names that
 * contain `secret`, `token`, `passw`, `pwd`, `credential`, `auth`, `cookie` or
 * `session`, or end in `key` or `keys` (`keySecret`, `apiKey`, `api_key`,
 * `privateKey`, `accessToken`, `password`, `authorization`), in any case. Such a
 * value shows as `"[hidden]"`: an option object printed whole in a startup error
 * (an `edge` config that is a class instance) must not put a secret in the logs.
 */
const SECRET_NAME = /secret|token|passw|pwd|credential|auth|cookie|session|keys?$/i
/** Counts named like keys (`maxKeys`) are no secrets. */
const COUNT_NAME = /^(max|min)/i

const isSecretName = (name: string): boolean => SECRET_NAME.test(name) && !COUNT_NAME.test(name)

const hideSecrets = (name: string, value: unknown): unknown => isSecretName(name) ? '[hidden]' : value

/**
 * `value` as a reader would recognise it: `-1` (number), `"vip"` (string), `{"a":1}`
 * (object), with the values of properties named like secrets hidden (see `SECRET_NAME`).
 */
export function describe (value: unknown): string {
  let shown: string
  if (typeof value === 'string') shown = JSON.stringify(value)
  else if (typeof value === 'function') shown = `function ${value.name || '(anonymous)'}`
  else if (typeof value === 'object' && value !== null) {
    try { shown = JSON.stringify(value, hideSecrets) ?? Object.prototype.toString.call(value) } catch { shown = Object.prototype.toString.call(value) }
  } else shown = String(value)
  if (shown.length > 80) shown = shown.slice(0, 77) + '...'
  const type = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value
  return `\`${shown}\` (${type})`
}

export function expected (fail: Fail, path: string, what: string, value: unknown): never {
  return fail(`Expected \`${path}\` to be ${what}, got ${describe(value)}`)
}

export function isPlainObject (value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false
  const proto: unknown = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

export function checkObject (fail: Fail, path: string, value: unknown): Record<string, unknown> {
  if (!isPlainObject(value)) expected(fail, path, 'an object', value)
  return value
}

/** Rejects keys other than `known`: a misspelt option must not be silently ignored. */
/** Fails on a key of `value` not in `known`; `hint` is appended to the message. */
export function checkKnownKeys (fail: Fail, path: string, value: Record<string, unknown>, known: readonly string[], hint = ''): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      fail(`Unknown option \`${path}.${key}\`; known options are ${known.map((k) => `\`${k}\``).join(', ')}${hint}`)
    }
  }
}

export function checkNumber (fail: Fail, path: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min) {
    expected(fail, path, `a finite number ≥ ${min}`, value)
  }
  return value
}

/** An integer from `min` to `max` (default: no bound but `Number.MAX_SAFE_INTEGER`). */
export function checkInteger (fail: Fail, path: string, value: unknown, min: number, max?: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || (max !== undefined && value > max)) {
    expected(fail, path, max === undefined ? `an integer ≥ ${min}` : `an integer from ${min} to ${max}`, value)
  }
  return value
}

/**
 * The longest delay Node's timers keep, in ms: 2^31 − 1, about 24.8 days. Node
 * takes a longer `setTimeout` or `setInterval` delay as 1 ms (with a warning), so a
 * sweep or a heartbeat meant for once a month would run a thousand times a second.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1

/** A delay for a timer, in ms: a number (an integer when `integer`) from `min` to `MAX_TIMER_MS`. */
export function checkTimer (fail: Fail, path: string, value: unknown, min: number, integer = false): number {
  if (typeof value !== 'number' || !(integer ? Number.isSafeInteger(value) : Number.isFinite(value)) || value < min || value > MAX_TIMER_MS) {
    expected(fail, path, `${integer ? 'an integer' : 'a number'} of ms from ${min} to ${MAX_TIMER_MS} (the longest delay of a Node timer)`, value)
  }
  return value
}

export function checkFunction<F> (fail: Fail, path: string, value: unknown): F {
  if (typeof value !== 'function') expected(fail, path, 'a function', value)
  return value as F
}

/**
 * The largest policy the plugin accepts, so that every number a policy leads to
 * stays exact in a double, fits a Redis `PX` expiry, and prints as an RFC 9651
 * Integer (at most 15 digits) in `RateLimit` and `RateLimit-Policy`:
 * - `capacity` ≤ 1e12 tokens. Tokens are fractional: at 1e12 a double still
 *   resolves 1/8192 of a token (at 2^53 it resolves none). No real quota comes
 *   near it; a tier meant to be unlimited can use 1e12, or exempt its routes.
 *   `q` and `r` stay ≤ 1e12 (13 digits).
 * - `refillPerSecond` ≤ 1e12 tokens per second, the same bound for the rate.
 * - for a bucket that refills, `capacity / refillPerSecond` ≤ 1e10 seconds (about
 *   317 years) from empty to full. `w`, `t` and `Retry-After` then stay ≤ 1e10 s
 *   (11 digits), and a store's expiry (ms until full) ≤ 1e13 ms. A slower refill
 *   is a bucket that never refills in practice: write `refillPerSecond: 0`.
 * A quota share (1/N replicas) scales capacity and rate alike, so the time to
 * fill is unchanged; output/headers.ts clamps whatever a store still returns beyond these.
 */
export const POLICY_BOUNDS = Object.freeze({ capacity: 1e12, refillPerSecond: 1e12, secondsToFill: 1e10 })

/** `1e12`, as people write it in code. */
const scientific = (value: number): string => value.toExponential().replace('e+', 'e')

/**
 * A bucket policy: capacity from 1 (a bucket must admit one request) to 1e12,
 * refill from 0 (never) to 1e12 tokens per second, full again within 1e10 s
 * (see `POLICY_BOUNDS`).
 */
export function checkPolicy (fail: Fail, path: string, value: unknown, extraKeys: readonly string[] = []): BucketPolicy {
  const policy = checkObject(fail, path, value)
  checkKnownKeys(fail, path, policy, ['capacity', 'refillPerSecond', ...extraKeys])
  const capacity = checkNumber(fail, `${path}.capacity`, policy.capacity, 1)
  if (capacity > POLICY_BOUNDS.capacity) {
    const most = scientific(POLICY_BOUNDS.capacity)
    expected(fail, `${path}.capacity`, `at most ${most} tokens (no client reaches ${most}: use it for a tier meant to be unlimited)`, capacity)
  }
  const refillPerSecond = checkNumber(fail, `${path}.refillPerSecond`, policy.refillPerSecond, 0)
  if (refillPerSecond > POLICY_BOUNDS.refillPerSecond) {
    expected(fail, `${path}.refillPerSecond`, `at most ${scientific(POLICY_BOUNDS.refillPerSecond)} tokens per second`, refillPerSecond)
  }
  const secondsToFill = capacity / refillPerSecond
  if (refillPerSecond > 0 && secondsToFill > POLICY_BOUNDS.secondsToFill) {
    fail(`Expected \`${path}.refillPerSecond\` to fill the bucket of ${capacity} tokens within ${scientific(POLICY_BOUNDS.secondsToFill)} seconds (about 317 years), ` +
      `got ${describe(refillPerSecond)}, which takes ${+secondsToFill.toPrecision(6)} s; for a bucket that never refills, write \`refillPerSecond: 0\``)
  }
  return Object.freeze({ capacity, refillPerSecond })
}

/**
 * Checks a map of tier name → quota (each checked by `check`); `default` is
 * required. Returns a prototype-less copy so that only own, exact names ever match.
 */
export function checkTiers<T> (fail: Fail, path: string, value: unknown, check: (path: string, value: unknown) => T): Record<string, T> {
  const tiers = checkObject(fail, path, value)
  if (!Object.hasOwn(tiers, 'default')) {
    fail(`Expected \`${path}\` to contain a \`default\` tier, got tiers ${describe(Object.keys(tiers))}`)
  }
  const checked = Object.create(null) as Record<string, T>
  for (const name of Object.keys(tiers)) checked[name] = check(`${path}.${name}`, tiers[name])
  return checked
}
