/**
 * A user function that answers later: a promise from `edge.key`, the allow-list,
 * `app.identify`, a route's cost or a route's own edge key (keys looked up in a
 * database are common). It is awaited at most `asyncTimeoutMs`; a rejection or a
 * late answer is logged (at most once a minute per function, code
 * `TOLLGATE_LOOKUP_FAILED`) and comes back as `LOOKUP_FAILED`, which each caller
 * turns into its documented fallback (the client IP, not allowed, anonymous, a 503).
 * A function that answers synchronously never reaches this file.
 */
import type { FastifyBaseLogger } from 'fastify'
import { ThrottledLogs } from '../output/throttled-log.js'
import { isThenable, thenSafely } from './promises.js'

/** A lookup that rejected or did not answer in time. */
export const LOOKUP_FAILED: unique symbol = Symbol('fastify-tollgate: lookup failed')

/** The functions whose promises are awaited, as the docs and the log name them. */
export type LookupName = 'edge.key' | 'allowList' | 'app.identify' | 'rateLimit.cost' | 'rateLimit.edge.key' | 'limiter.key' | 'limiter.cost'

/** How often a failing function is logged, at most: once per minute (ms). */
export const LOOKUP_LOG_INTERVAL_MS = 60_000

/** What each function's failure comes to, for the log line. */
const FALLBACK: Record<LookupName, string> = {
  'edge.key': 'the request is keyed by client IP',
  allowList: 'the request is limited as usual',
  'app.identify': 'the request is limited as anonymous',
  'rateLimit.cost': 'the request is refused with 503 TOLLGATE_LOOKUP_FAILED',
  'rateLimit.edge.key': 'the route\'s bucket is keyed by client IP',
  'limiter.key': 'the request is keyed by client IP',
  'limiter.cost': 'the request is refused with 503 TOLLGATE_LOOKUP_FAILED'
}

/** What a waiter hears: the promise's value, or that it failed. */
type Outcome = { value: unknown } | typeof LOOKUP_FAILED

export class Lookups {
  private readonly logs: ThrottledLogs
  /**
   * The waiters of each promise still pending. A promise is watched once, however
   * many requests wait on it (a cached lookup that hangs is shared by all): a waiter
   * that times out leaves the set, so that nothing piles up on a promise that never settles.
   */
  private readonly waiting = new WeakMap<object, Set<(outcome: Outcome) => void>>()

  /** `timeoutMs`: the longest wait for one promise; `log`: the app's logger; `now`: a clock in ms. */
  constructor (readonly timeoutMs: number, private readonly log: FastifyBaseLogger, now: () => number) {
    this.logs = new ThrottledLogs(LOOKUP_LOG_INTERVAL_MS, now)
  }

  /**
   * The promise's value, or LOOKUP_FAILED when it rejects, is not settled within
   * `timeoutMs`, or is no real promise (a `then` that throws, a value that is itself
   * a promise). Never rejects.
   */
  async wait<T> (name: LookupName, promise: PromiseLike<T>): Promise<T | typeof LOOKUP_FAILED> {
    const outcome = await new Promise<Outcome>((resolve) => {
      let waiters = this.waiting.get(promise)
      const first = waiters === undefined
      if (waiters === undefined) this.waiting.set(promise, waiters = new Set())
      const pending = waiters
      const timer = setTimeout(() => {
        pending.delete(waiter)
        this.failed(name, undefined)
        resolve(LOOKUP_FAILED)
      }, this.timeoutMs)
      const waiter = (settled: Outcome): void => {
        clearTimeout(timer)
        resolve(settled)
      }
      pending.add(waiter)
      // Watched after the first waiter is in: a `then` may call back at once.
      if (first) this.watch(name, promise, pending)
    })
    return outcome === LOOKUP_FAILED ? LOOKUP_FAILED : outcome.value as T
  }

  /** Tells `waiters` how `promise` settles, once. */
  private watch (name: LookupName, promise: PromiseLike<unknown>, waiters: Set<(outcome: Outcome) => void>): void {
    const settle = (outcome: Outcome): void => {
      if (this.waiting.get(promise) !== waiters) return // settled already (a thenable calling back twice)
      this.waiting.delete(promise)
      for (const waiter of waiters) waiter(outcome)
      waiters.clear()
    }
    const reject = (error: unknown): void => {
      // Only waiters still there hear it: one that timed out was logged already.
      if (waiters.size > 0 && this.waiting.get(promise) === waiters) this.failed(name, error ?? new Error('rejected without a reason'))
      settle(LOOKUP_FAILED)
    }
    try {
      thenSafely(promise, (value) => {
        if (isThenable(value)) reject(new Error('a promise resolved with another promise-like value'))
        else settle({ value })
      }, reject)
    } catch (error) {
      reject(error)
    }
  }

  /** Logs a failed lookup of `name`: `error` its rejection, `undefined` a timeout. */
  private failed (name: LookupName, error: unknown): void {
    this.logs.log(name, (since) => {
      const what = error === undefined ? `did not answer within ${this.timeoutMs} ms (asyncTimeoutMs)` : 'rejected'
      this.log.error({ code: 'TOLLGATE_LOOKUP_FAILED', function: name, err: error, since },
        `fastify-tollgate: the promise of ${name} ${what}; ${FALLBACK[name]} (logged once a minute; \`since\`: failures not logged since the last line)`)
    })
  }
}
