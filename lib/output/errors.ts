/**
 * Every error this plugin raises, in one place. Each has a stable `code`
 * (documented in the error table of docs/errors.md) and an HTTP status.
 */
import createError from '@fastify/error'
import type { FastifyErrorConstructor } from '@fastify/error'
import { retryAfterSeconds } from './headers.js'
import type { LimitDecision } from '../types/decision.js'

/**
 * The type of an error class made here. Spelled out, so the emitted declarations
 * name `FastifyErrorConstructor` through a named type import: the inferred type
 * would name it through the default import (`createError.FastifyErrorConstructor`),
 * which is no namespace under `moduleResolution: bundler` (the default export of
 * `@fastify/error` is then its `default` property, a plain function).
 */
type TollgateError<C extends string, S extends number, A extends unknown[]> = FastifyErrorConstructor<{ code: C, statusCode: S }, A>

/** What tells one kind of refusal from another in its response: status, code, and the rule of its message. */
export interface RefusalKind {
  readonly statusCode: number
  readonly code: string
  /** The message of a refusal of this kind: `seconds`, its `Retry-After` (`undefined`: none is sent). */
  message (decision: LimitDecision, seconds: number | undefined): string
}

/** A bucket is empty: 429, `TOLLGATE_RATE_LIMITED` (RateLimitedError). */
export const RATE_LIMITED: RefusalKind = {
  statusCode: 429,
  code: 'TOLLGATE_RATE_LIMITED',
  message: (decision, seconds) => seconds !== undefined
    ? `Rate limit exceeded, retry in ${seconds} second${seconds === 1 ? '' : 's'}`
    : decision.buckets.some((bucket) => bucket.capacity < decision.cost)
      ? 'Rate limit exceeded: this request costs more than the quota holds'
      : 'Rate limit exceeded: this quota does not refill'
}

/** A penalty of status 403 is in force: 403, `TOLLGATE_PENALIZED` (PenalizedError). */
export const PENALIZED: RefusalKind = {
  statusCode: 403,
  code: 'TOLLGATE_PENALIZED',
  message: (_decision, seconds) => seconds === undefined
    ? 'Refused: too many requests after being limited'
    : `Refused for ${seconds} second${seconds === 1 ? '' : 's'}: too many requests after being limited`
}

// No `%s` in the message: @fastify/error would run util.format on every refusal.
const RateLimitedBase: TollgateError<'TOLLGATE_RATE_LIMITED', 429, []> = createError(
  'TOLLGATE_RATE_LIMITED', 'Rate limit exceeded', 429, Error, false)

/**
 * 429: a bucket is empty. Built without a stack trace: refusals are routine and
 * may come by the thousand per second. Carries the layer's decision, so that a
 * `setErrorHandler` can shape the body without reading the reply's headers back.
 */
export class RateLimitedError extends RateLimitedBase {
  /** What the layer decided: its buckets and tokens left, and `retryAfterMs` (`Infinity`: never). */
  readonly decision: LimitDecision
  /**
   * The `Retry-After` sent, in whole seconds (rounded up, at least 1); `undefined`
   * when a short bucket never refills, and no header is sent.
   */
  readonly retryAfterSeconds: number | undefined

  constructor (decision: LimitDecision) {
    super()
    const seconds = retryAfterSeconds(decision.retryAfterMs)
    this.message = RATE_LIMITED.message(decision, seconds)
    this.decision = decision
    this.retryAfterSeconds = seconds
  }
}

/**
 * 403: the client is in a penalty (`penalty.status: 403`), after too many refusals.
 * A `RateLimitedError` (so `instanceof RateLimitedError` handles both) with code
 * `TOLLGATE_PENALIZED`, status 403, `decision` and `retryAfterSeconds` (the
 * penalty's end, also sent as `Retry-After`).
 */
export class PenalizedError extends RateLimitedError {
  constructor (decision: LimitDecision) {
    super(decision)
    ;(this as { code: string }).code = PENALIZED.code
    ;(this as { statusCode: number }).statusCode = PENALIZED.statusCode
    this.message = PENALIZED.message(decision, this.retryAfterSeconds)
  }
}
// @fastify/error answers `instanceof` by the base's marker, which every RateLimitedError carries: tell them apart by code.
Object.defineProperty(PenalizedError, Symbol.hasInstance, {
  value: (instance: unknown): boolean => instance instanceof RateLimitedError && instance.code === ('TOLLGATE_PENALIZED' as string)
})

/** Capacity protection shed the request: 503 (or 429 by `protect.status`), `TOLLGATE_OVERLOADED` (OverloadedError). */
export const overloaded = (statusCode: 503 | 429): RefusalKind => ({
  statusCode,
  code: 'TOLLGATE_OVERLOADED',
  message: (_decision, seconds) => `Service overloaded, retry in ${String(seconds)} second${seconds === 1 ? '' : 's'}`
})

const OverloadedBase: TollgateError<'TOLLGATE_OVERLOADED', 503, []> = createError(
  'TOLLGATE_OVERLOADED', 'Service overloaded', 503, Error, false)

/**
 * 503 (or 429 under `protect.status: 429`): capacity protection shed the request,
 * its priority's share of the concurrency limit being in use. Built without a
 * stack trace. Carries `decision` (layer `protect`) and `retryAfterSeconds` (the
 * controller's estimate of its recovery, also sent as `Retry-After`). Not a
 * `RateLimitedError`: the client is within its quota.
 */
export class OverloadedError extends OverloadedBase {
  readonly decision: LimitDecision
  readonly retryAfterSeconds: number

  constructor (decision: LimitDecision, statusCode: 503 | 429) {
    super()
    const seconds = retryAfterSeconds(decision.retryAfterMs) ?? 1
    ;(this as { statusCode: number }).statusCode = statusCode
    this.message = overloaded(statusCode).message(decision, seconds)
    this.decision = decision
    this.retryAfterSeconds = seconds
  }
}

/** Startup: a plugin option is invalid. Argument: what was expected and what was given. */
export const InvalidOptionError: TollgateError<'TOLLGATE_INVALID_OPTION', 500, [string]> = createError(
  'TOLLGATE_INVALID_OPTION', 'Invalid fastify-tollgate option: %s', 500)

/** Startup: a route's `config.rateLimit` is invalid. Arguments: the route, then what was expected and given. */
export const InvalidRouteConfigError: TollgateError<'TOLLGATE_INVALID_ROUTE_CONFIG', 500, [string, string]> = createError(
  'TOLLGATE_INVALID_ROUTE_CONFIG', 'Invalid config.rateLimit on route %s: %s', 500)

/**
 * 500 for one request: a route's cost function threw or returned something other
 * than a finite number from 0 to the bucket's capacity. A server bug; never a free pass.
 */
export const InvalidCostError: TollgateError<'TOLLGATE_INVALID_COST', 500, [string, string, { cause: unknown }?]> = createError(
  'TOLLGATE_INVALID_COST', 'The rate-limit cost of route %s is invalid: %s', 500)

/**
 * 503 for one request: a route's cost function returned a promise that rejected or
 * did not settle within `asyncTimeoutMs`. Argument: the function (`rateLimit.cost`).
 */
export const LookupFailedError: TollgateError<'TOLLGATE_LOOKUP_FAILED', 503, [string]> = createError(
  'TOLLGATE_LOOKUP_FAILED', 'A rate-limit lookup (%s) failed or did not answer in time, retry later', 503)

/** 503 for one request: the store failed to answer, and the request was not admitted. */
export const StoreUnavailableError: TollgateError<'TOLLGATE_STORE_UNAVAILABLE', 503, []> = createError(
  'TOLLGATE_STORE_UNAVAILABLE', 'The rate-limit store is unavailable, retry later', 503, Error, false)

/**
 * A `fastify.tollgate` method the store does not implement (`peek`, `refund` or
 * `reset` of a custom store; see `Store`). Raised when the method is called, never
 * at startup. Argument: the method's name (the same on the store and on `fastify.tollgate`).
 */
export const StoreUnsupportedError: TollgateError<'TOLLGATE_STORE_UNSUPPORTED', 500, [string]> = createError(
  'TOLLGATE_STORE_UNSUPPORTED', 'The rate-limit store does not implement %s() (memoryStore() and redisStore() do)', 500)
