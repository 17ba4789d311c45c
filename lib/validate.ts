/**
 * Small checks for options and route configs. Each returns the checked value or
 * calls `fail` with a message that names the option, the value given and what
 * was expected: ``Expected `edge.capacity` to be a finite number ≥ 1, got `-1` (number)``.
 */
import { InvalidOptionError } from './errors.js'
import type { BucketPolicy } from './bucket.js'

/** Throws the coded error of the context being checked. */
export type Fail = (problem: string) => never

export const failOption: Fail = (problem) => { throw new InvalidOptionError(problem) }

/** `value` as a reader would recognise it: `-1` (number), `"vip"` (string), `{"a":1}` (object). */
export function describe (value: unknown): string {
  let shown: string
  if (typeof value === 'string') shown = JSON.stringify(value)
  else if (typeof value === 'function') shown = `function ${value.name || '(anonymous)'}`
  else if (typeof value === 'object' && value !== null) {
    try { shown = JSON.stringify(value) ?? Object.prototype.toString.call(value) } catch { shown = Object.prototype.toString.call(value) }
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
export function checkKnownKeys (fail: Fail, path: string, value: Record<string, unknown>, known: readonly string[]): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      fail(`Unknown option \`${path}.${key}\`; known options are ${known.map((k) => `\`${k}\``).join(', ')}`)
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

/** A bucket policy: capacity ≥ 1 (a bucket must admit one request), refill ≥ 0 tokens per second. */
export function checkPolicy (fail: Fail, path: string, value: unknown, extraKeys: readonly string[] = []): BucketPolicy {
  const policy = checkObject(fail, path, value)
  checkKnownKeys(fail, path, policy, ['capacity', 'refillPerSecond', ...extraKeys])
  return Object.freeze({
    capacity: checkNumber(fail, `${path}.capacity`, policy.capacity, 1),
    refillPerSecond: checkNumber(fail, `${path}.refillPerSecond`, policy.refillPerSecond, 0)
  })
}

/**
 * Checks a map of tier name → policy; `default` is required. Returns a
 * prototype-less copy so that only own, exact names ever match.
 */
export function checkTiers (fail: Fail, path: string, value: unknown): Record<string, BucketPolicy> {
  const tiers = checkObject(fail, path, value)
  if (!Object.hasOwn(tiers, 'default')) {
    fail(`Expected \`${path}\` to contain a \`default\` tier, got tiers ${describe(Object.keys(tiers))}`)
  }
  const checked = Object.create(null) as Record<string, BucketPolicy>
  for (const name of Object.keys(tiers)) checked[name] = checkPolicy(fail, `${path}.${name}`, tiers[name])
  return checked
}
