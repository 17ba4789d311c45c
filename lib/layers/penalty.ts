/**
 * A penalty for clients that keep pushing: after `after` refusals within
 * `withinSeconds`, a client is refused for `seconds`, on every replica.
 *
 * The penalty lives in the store as one more bucket of the layer's step, keyed
 * like the client's (same hash tag): capacity 1, refilled at 1 a second, asked
 * for nothing (cost 0). A cost of 0 passes while the bucket holds 0 tokens or
 * more; starting a penalty puts it at −`seconds`, so every step of the client is
 * refused until it has refilled to 0, `seconds` later, with that wait as
 * `Retry-After`. On a route with a penalty of its own, the layer's bucket is
 * checked too (a client shut out by the layer stays out of the route). The
 * Redis store's deny cache then answers the client's requests without a round
 * trip, like any refusal; a refusal it kept from before the penalty (the penalty
 * bucket read out of debt) it answers at most 0.1 s past the penalty's start
 * (deny-cache.ts).
 * Refusals are counted in this process (a local bucket of
 * `after` tokens refilled over `withinSeconds`), so that counting costs the store
 * nothing; with N replicas a client spread over them is counted on each.
 */
import type { FastifyBaseLogger } from 'fastify'
import { MemoryStore } from '../stores/memory.js'
import type { BucketRequest, Store, StoreDecision } from '../types/store.js'
import type { PenaltySettings } from '../config/penalty.js'
import { penaltyKey } from '../output/key-format.js'

/** A step's penalty: its settings, and the key of its bucket (the client's key, `~penalty`, and the route's bucket name for a route's own). */
export interface StepPenalty {
  readonly settings: PenaltySettings
  readonly key: string
  /** On a route with its own penalty, the layer's penalty bucket, checked too (its bucket comes before the route's). */
  readonly layer?: StepPenalty | undefined
}

/**
 * The penalty of a step of a layer whose own penalty is `layer`, on `route`
 * (`undefined` for a 404), for the client keyed `key`: the route's own when it has
 * one (its bucket keyed per route), none when its config says `penalty: false`.
 */
export function stepPenalty (layer: PenaltySettings | undefined, route: { bucket: string, penalty: PenaltySettings | false | undefined } | undefined, key: string): StepPenalty | undefined {
  const own = route?.penalty
  if (own === false) return undefined
  const layers = layer === undefined ? undefined : { settings: layer, key: penaltyKey(key) }
  if (own !== undefined) return { settings: own, key: penaltyKey(key, (route as { bucket: string }).bucket), layer: layers }
  return layers
}

/** Adds the penalty buckets of a step to `buckets` (the layer's, then the route's): asked for nothing, each passes unless a penalty put it in debt. */
export function addPenaltyBuckets (buckets: BucketRequest[], penalty: StepPenalty): void {
  if (penalty.layer !== undefined) buckets.push({ key: penalty.layer.key, policy: penalty.layer.settings.policy, cost: 0 })
  buckets.push({ key: penalty.key, policy: penalty.settings.policy, cost: 0 })
}

/** What a refusal meant for a step's penalty. */
export type PenaltyState = 'none' | 'started' | 'in force'

/** Counts refusals per penalty key in this process, and starts penalties in the store. */
export class Penalties {
  private readonly strikes: MemoryStore

  /** `maxKeys`: the most clients counted at once (the least recently refused are forgotten first). */
  constructor (private readonly store: Store, private readonly log: () => FastifyBaseLogger, clock?: () => number, maxKeys = 100_000) {
    this.strikes = new MemoryStore({ clock, maxKeys })
  }

  /**
   * After a refusal of a step with `penalty` (its bucket last in the step): whether
   * the client is in a penalty, or this refusal starts one (it is the `after`-th in
   * the window). Starting one writes the penalty bucket in the store (unless
   * `record` is false: shadow mode), without waiting for it; a failure there is logged.
   */
  onRefusal (penalty: StepPenalty, decision: StoreDecision, record: boolean): PenaltyState {
    const count = decision.tokens.length
    if ((decision.tokens[count - 1] as number) < 0) return 'in force'
    if (penalty.layer !== undefined && (decision.tokens[count - 2] as number) < 0) return 'in force'
    const { settings } = penalty
    const strike = this.strikes.consume([{ key: penalty.key, policy: settings.strikePolicy, cost: 1 }])
    // The `after`-th refusal is the one that finds no strike left to take.
    if (strike.allowed && (strike.tokens[0] as number) >= 1) return 'none'
    this.strikes.reset(penalty.key)
    if (record) {
      this.start(penalty).then(undefined, (error: unknown) => { this.log().warn({ err: error }, 'fastify-tollgate: a penalty could not be recorded in the store') })
    }
    return 'started'
  }

  /** Puts the penalty bucket at −`seconds` tokens (at most: a negative refund is a debt, set once however many replicas start it). */
  private async start (penalty: StepPenalty): Promise<void> {
    await (this.store.refund as NonNullable<Store['refund']>)({ key: penalty.key, policy: penalty.settings.policy, cost: -penalty.settings.seconds })
  }

  close (): void {
    this.strikes.close()
  }
}
