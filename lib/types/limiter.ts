/** `fastify.tollgate.limiter(options)`: a limiter as a hook. The types alone; the checks are config/limiter.ts, the runtime layers/limiter.ts. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { LimitDecision } from './decision.js'
import type { BucketPolicy } from './engine.js'
import type { PenaltyOptions } from './options.js'

/** What a limiter's `key` function may return: a non-empty string or a finite number keys the bucket; anything else falls back to the client address. */
export type LimiterKey = string | number | undefined | null

export interface LimiterOptions extends BucketPolicy {
  /**
   * The limiter's name: 1 to 32 letters, digits, `_` or `-`, starting with a
   * letter; not one of the plugin's own bucket names (`edge`, `edge-route`,
   * `app`, `route`, `manual`); unique among the limiters of one registration.
   * Its member name in the rate-limit headers, and the name of its key space.
   */
  name: string
  /**
   * Who a request counts for. Default: the client address, as the edge keys it
   * (IPv4-mapped IPv6 as IPv4, IPv6 grouped by `edge.ipv6Subnet`). A non-empty
   * string or a finite number keys the bucket (stored as a digest, like `edge.key`
   * values); anything else, a throw or a rejection falls back to the client
   * address (a throw or a rejection is logged, at most once a minute). May return
   * a promise: it is awaited.
   */
  key?: ((request: FastifyRequest) => LimiterKey | PromiseLike<LimiterKey>) | undefined
  /**
   * Tokens a request takes: a number from 0 to `capacity`, or a function of the
   * request returning one (or a promise of one). A function that throws, rejects
   * or returns anything else fails the request with `TOLLGATE_INVALID_COST` (500).
   * Default 1.
   */
  cost?: number | ((request: FastifyRequest) => number | PromiseLike<number>) | undefined
  /** Refuse a client for a while after too many refusals by this limiter, kept per limiter (see `PenaltyOptions`). Default: none. */
  penalty?: PenaltyOptions | undefined
  /** `true` (default): the plugin's `allowList` exempts requests from this limiter too (no bucket, no header); `false`: it does not. */
  allowList?: boolean | undefined
}

/**
 * A limiter's decision: `LimitDecision` with `layer: 'limiter'`, its one bucket
 * (the policy named after the limiter) and, with a penalty, the penalty's state.
 */
export interface LimiterDecision extends LimitDecision {
  layer: 'limiter'
  /**
   * `true`: the plugin's allow-list exempts the request; nothing was counted:
   * `allowed: true`, `cost` 0, `retryAfterMs` 0, `buckets` empty. `false` otherwise.
   */
  allowListed: boolean
}

/**
 * A limiter: a Fastify hook `(request, reply, done)` for `onRequest`,
 * `preValidation` or `preHandler` (not `preParsing`), in route options, in
 * `setNotFoundHandler`'s options, or added with `addHook` to a context. Every
 * route that carries one limiter shares its buckets, one per key. A request is
 * counted once per limiter, however many of its hooks carry it.
 */
export interface Limiter {
  (request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void): void
  /**
   * Counts `request` as the hook does (key, cost, allow-list, penalty) and
   * resolves to the decision: no header is set, `onLimit` is not called, nothing
   * is published, and a refusal is reported (`allowed: false`), never thrown,
   * in shadow mode too. Rejects with `TOLLGATE_INVALID_COST` for a cost function's
   * mistake, and with the store's error when it cannot decide. Each call counts.
   */
  check (request: FastifyRequest): Promise<LimiterDecision>
}
