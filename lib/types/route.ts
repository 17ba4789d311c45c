/** A route's `config.rateLimit`, and the declaration that types it on Fastify's route config. */
import type { FastifyRequest } from 'fastify'
import type { BucketPolicy } from './engine.js'
import type { PenaltyOptions, TierPolicies } from './options.js'

/**
 * A route's cost: a number, or a function of the request returning a finite number
 * ≥ 0, or a promise of one (awaited at most `asyncTimeoutMs`; a rejection or a late
 * answer refuses the request with 503 `TOLLGATE_LOOKUP_FAILED`).
 */
export type RouteCost = number | ((request: FastifyRequest) => number | PromiseLike<number>)

/**
 * Who a route's own edge bucket is kept for: `'edge'` (default) like the client's
 * edge bucket (`edge.key`, else the client IP); `'ip'` the client IP, whatever
 * `edge.key` says (a login guard that no header can get around); or a function of
 * the request returning a non-empty string or a finite number (or a promise of
 * one), digested like `edge.key` values; anything else, a throw, a rejection or a
 * late answer: the client IP.
 */
export type RouteEdgeKey = 'edge' | 'ip' | ((request: FastifyRequest) => unknown)

/** A route's own edge bucket: a policy, and who it is kept for. */
export interface RouteEdgeBucket extends BucketPolicy {
  key?: RouteEdgeKey | undefined
}

/** `config.rateLimit` of a route. */
export interface RouteRateLimit {
  /** Tokens taken from the user's main bucket (app layer). Default 1. */
  cost?: RouteCost | undefined
  /** The route's own bucket per user (one token per request), by tier; `default` is required. */
  quota?: TierPolicies | undefined
  /**
   * `false`: the edge layer leaves this route alone. A policy: the route's own
   * bucket at the edge (`edge-route` in the headers), per client like the edge's,
   * taken together with the client's edge bucket in `onRequest`, all or nothing:
   * `POST /login` at 5 a minute per IP, before authentication and body parsing.
   */
  edge?: RouteEdgeBucket | false | undefined
  /** `false`: the app layer leaves this route alone. `true`: it applies (needed under `app.global: false`). */
  app?: boolean | undefined
  /**
   * A penalty of this route's own, for each layer that limits it, counted and kept
   * per route (`{ after, withinSeconds, seconds, status? }`), instead of the
   * layers' `penalty`; `false`: no penalty on this route.
   */
  penalty?: PenaltyOptions | false | undefined
  /**
   * `true`: the route is limited by its own buckets instead of the layers' (as a
   * route limit of `@fastify/rate-limit` replaces the global one): at the edge its
   * `edge` bucket alone (without one, the edge leaves the route alone), in the app
   * layer its `quota` alone, charged the route's `cost` (without one, the app layer
   * leaves the route alone). A route limit looser than the layer's then works.
   * Needs `edge` or `quota`. Default `false`.
   */
  replace?: boolean | undefined
  /** Capacity protection (`protect`) sheds this route last, after every tier. Default `false`. */
  critical?: boolean | undefined
  /** This route's own latency target for capacity protection, in ms (its handler is slower or faster than most). Default: `protect.latencyMs`. */
  latencyMs?: number | undefined
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * fastify-tollgate: the route's cost, quotas and layers for the registration
     * without a `name`, or `false` to leave it out of both layers of every registration.
     */
    rateLimit?: RouteRateLimit | false | undefined
    /** fastify-tollgate: the route's settings for each named registration, by `name` (`false`: out of that one). */
    rateLimits?: Record<string, RouteRateLimit | false | undefined> | undefined
  }
}

