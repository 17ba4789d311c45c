/** What a layer decided for one request: as `onLimit` gets it and `fastify.tollgate.consume` returns it. */

/** One bucket of a decision, as given to `onLimit` and returned by `tollgate.consume`. */
export interface BucketReport {
  /** The policy name in the headers: `edge`, `app`, `route`, `manual`, a limit's name, or a limiter's. */
  name: string
  /** The store key. */
  key: string
  capacity: number
  refillPerSecond: number
  /** Tokens left after the step (fractional). */
  tokens: number
}

/** What a layer decided for one request. */
export interface LimitDecision {
  /** Who decided: a layer, a `fastify.tollgate` call (`manual`), a limiter (`fastify.tollgate.limiter`), or capacity protection (`protect`, which sheds by priority). */
  layer: 'edge' | 'app' | 'manual' | 'limiter' | 'protect'
  /** The registration's `name`, when the plugin is registered under one; absent otherwise. */
  registration?: string
  allowed: boolean
  /** The tier applied (app layer). */
  tier?: string
  /**
   * With a penalty configured, on a refusal that starts one (`'started'`: the
   * `after`-th refusal in the window) or one during it (`'in force'`), and its
   * length in seconds. `retryAfterMs` then runs to its end.
   */
  penalty?: { state: 'started' | 'in force', seconds: number }
  /** Tokens taken from the main bucket. */
  cost: number
  /** When refused: ms until the same request would pass (`Infinity`: never). 0 when allowed. */
  retryAfterMs: number
  buckets: BucketReport[]
}

