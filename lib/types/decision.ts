/** What a layer decided for one request: as `onLimit` gets it and `fastify.tollgate.consume` returns it. */

/** One bucket of a decision, as given to `onLimit` and returned by `tollgate.consume`. */
export interface BucketReport {
  /** The policy name in the headers: `edge`, `app`, `route`, or `manual`. */
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
  layer: 'edge' | 'app' | 'manual'
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

