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

export class Lookups {
  private readonly logs: ThrottledLogs

  /** `timeoutMs`: the longest wait for one promise; `log`: the app's logger; `now`: a clock in ms. */
  constructor (readonly timeoutMs: number, private readonly log: FastifyBaseLogger, now: () => number) {
    this.logs = new ThrottledLogs(LOOKUP_LOG_INTERVAL_MS, now)
  }

  /** The promise's value, or LOOKUP_FAILED when it rejects or is not settled within `timeoutMs`. Never rejects. */
  async wait<T> (name: LookupName, promise: PromiseLike<T>): Promise<T | typeof LOOKUP_FAILED> {
    return new Promise((resolve) => {
      // A rejection after the timeout is caught and not logged again.
      let late = false
      const timer = setTimeout(() => {
        late = true
        this.failed(name, undefined)
        resolve(LOOKUP_FAILED)
      }, this.timeoutMs)
      promise.then((value) => {
        clearTimeout(timer)
        resolve(value)
      }, (error: unknown) => {
        clearTimeout(timer)
        if (!late) this.failed(name, error ?? new Error('rejected without a reason'))
        resolve(LOOKUP_FAILED)
      })
    })
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
