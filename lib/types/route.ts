/** A route's `config.rateLimit`, and the declaration that types it on Fastify's route config. */
import type { FastifyRequest } from 'fastify'
import type { BucketPolicy } from './engine.js'
import type { PenaltyOptions, TierPolicies } from './options.js'

/** A route's cost: a number, or a function of the request returning a finite number ≥ 0. */
export type RouteCost = number | ((request: FastifyRequest) => number)

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
  edge?: BucketPolicy | false | undefined
  /** `false`: the app layer leaves this route alone. `true`: it applies (needed under `app.global: false`). */
  app?: boolean | undefined
  /**
   * A penalty of this route's own, for each layer that limits it, counted and kept
   * per route (`{ after, withinSeconds, seconds, status? }`), instead of the
   * layers' `penalty`; `false`: no penalty on this route.
   */
  penalty?: PenaltyOptions | false | undefined
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** fastify-tollgate: the route's cost, quotas and layers, or `false` to leave it out of both layers. */
    rateLimit?: RouteRateLimit | false | undefined
  }
}

