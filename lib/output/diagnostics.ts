/**
 * What the limiter does, on `node:diagnostics_channel`: one message per layer
 * decision (`DECISION_CHANNEL`) and one per change of a store's health
 * (`STORE_CHANNEL`). A decision's message is built only when someone subscribes
 * (one read of `hasSubscribers` per decision otherwise); a store's health is kept
 * for `storeHealth()` either way (a change is rare).
 *
 * ```ts
 * import { subscribe } from 'node:diagnostics_channel'
 * import { DECISION_CHANNEL, type DecisionMessage } from 'fastify-tollgate'
 * subscribe(DECISION_CHANNEL, (message) => { const decision = message as DecisionMessage })
 * ```
 */
import { channel } from 'node:diagnostics_channel'
import { requestRoute } from './route-names.js'
import type { FastifyRequest } from 'fastify'
import type { BucketReport, LimitDecision } from '../types/decision.js'

/** Channel name of the layers' decisions: one `DecisionMessage` per layer (or limiter hook) that decided a request. */
export const DECISION_CHANNEL = 'fastify-tollgate:decision'
/** Channel name of the stores' health: one `StoreMessage` per change. */
export const STORE_CHANNEL = 'fastify-tollgate:store'

/**
 * A decision's outcome, one of:
 * - `'allowed'`: passed, every bucket still holds more than `NEAR_LIMIT_LEFT` of its capacity;
 * - `'near-limit'`: passed, and a bucket holds `NEAR_LIMIT_LEFT` of its capacity or less;
 * - `'refused'`: refused (429, or 403 during a penalty of that status);
 * - `'would-refuse'`: refused in shadow mode, so passed;
 * - `'unavailable'`: the store could not decide (`failMode: 'closed'`, or a store that threw): a 503, or in shadow mode a pass.
 */
export type DecisionOutcome = 'allowed' | 'near-limit' | 'refused' | 'would-refuse' | 'unavailable'

/** The share of a bucket's capacity at or below which a pass is `'near-limit'`: 0.2 (80% used). */
export const NEAR_LIMIT_LEFT = 0.2

/** A layer's decision for one request, as `onLimit` gets it, with what a dashboard needs besides. */
export interface DecisionMessage {
  /** The layer that decided, `'limiter'` for a limiter's hook (`fastify.tollgate.limiter`; its bucket is named after it), or `'protect'` for capacity protection. */
  layer: 'edge' | 'app' | 'limiter' | 'protect'
  /** The registration's `name`, when the plugin is registered under one (several in one app); else `undefined`. */
  registration: string | undefined
  /** The limiter's answer, as `onLimit` gets it: `false` for `'would-refuse'` too, which shadow mode lets pass. */
  allowed: boolean
  outcome: DecisionOutcome
  /** The tier applied (app layer); `undefined` at the edge. */
  tier: string | undefined
  /** Tokens taken from the main bucket (asked for, when refused). */
  cost: number
  /** When refused: ms until the same request would pass (`Infinity`: never). 0 when allowed. */
  retryAfterMs: number
  /** The buckets decided, as `onLimit` gets them; none for `'unavailable'`. */
  buckets: BucketReport[]
  /** On a refusal that starts a penalty or comes during one, as `onLimit` gets it; else `undefined`. */
  penalty: LimitDecision['penalty']
  /** The request decided. */
  request: FastifyRequest
  /**
   * The route by its method and pattern (`'GET /users/:id'`, never the raw URL; a
   * HEAD request as GET); `undefined` for a request no route matched (a 404).
   */
  route: string | undefined
  /** Whether the plugin runs in shadow mode (a refusal is then `'would-refuse'` and passes). */
  shadow: boolean
  /**
   * How the store decided when it could not use its shared state: `'local'` (this
   * replica's share) or `'open'` (uncounted); `undefined` when it could, and for
   * `'unavailable'` decisions.
   */
  degraded: 'open' | 'local' | undefined
  /** Milliseconds from asking the store to its answer (for a store that answers at once, as the memory store does, the call's own time). */
  storeMs: number
}

/** A change in a store's health. */
export interface StoreMessage {
  /** `'redis'`: a `redisStore()`; `'settle'`: the edge of `edge.mode: 'settle'` in front of it. */
  store: 'redis' | 'settle'
  /** The store's key prefix (the Redis store's `prefix`). */
  prefix: string
  /** The store object: tells apart two stores of one prefix (on two Redis servers, say). */
  instance: object
  /**
   * - `'degraded'`: the shared state cannot be used (Redis's circuit breaker opened;
   *   a settlement failed): decisions follow `failMode` (the settle edge: this replica's share);
   * - `'restored'`: the shared state answers again;
   * - `'replicas'`: a heartbeat counted the live replicas (every `heartbeatIntervalMs`, changed or not);
   * - `'closed'`: the store closed (with its app): it decides no more.
   */
  event: 'degraded' | 'restored' | 'replicas' | 'closed'
  /** Whether the store is degraded now (after this event). */
  degraded: boolean
  /** The live replicas as last counted. */
  liveReplicas: number
}

export const decisionChannel = channel(DECISION_CHANNEL)
export const storeChannel = channel(STORE_CHANNEL)

/** Whether `limit` (a pass) left a bucket at `NEAR_LIMIT_LEFT` of its capacity or less. */
function nearLimit (limit: LimitDecision): boolean {
  for (const bucket of limit.buckets) {
    if (bucket.tokens <= bucket.capacity * NEAR_LIMIT_LEFT) return true
  }
  return false
}

/**
 * Publishes a decision: `limit` as `onLimit` gets it, `shadow` the plugin's mode,
 * `degraded` as the store answered, `storeMs` the store's time to answer.
 */
export function publishDecision (request: FastifyRequest, limit: LimitDecision, shadow: boolean, degraded: 'open' | 'local' | undefined, storeMs: number): void {
  const outcome: DecisionOutcome = !limit.allowed ? (shadow ? 'would-refuse' : 'refused') : nearLimit(limit) ? 'near-limit' : 'allowed'
  // Every field written, in one order: an object spread here cost about 2 µs per message.
  const message: DecisionMessage = {
    layer: limit.layer as DecisionMessage['layer'],
    registration: limit.registration,
    allowed: limit.allowed,
    outcome,
    tier: limit.tier,
    cost: limit.cost,
    retryAfterMs: limit.retryAfterMs,
    buckets: limit.buckets,
    penalty: limit.penalty,
    request,
    route: requestRoute(request),
    shadow,
    degraded,
    storeMs
  }
  decisionChannel.publish(message)
}

/** Publishes a store that could not decide (the request got a 503, or passed in shadow mode). */
export function publishUnavailable (request: FastifyRequest, step: Pick<DecisionMessage, 'layer' | 'registration' | 'tier' | 'cost'>, storeMs: number, shadow: boolean): void {
  const message: DecisionMessage = {
    layer: step.layer,
    registration: step.registration,
    allowed: false,
    outcome: 'unavailable',
    tier: step.tier,
    cost: step.cost,
    retryAfterMs: 1000,
    buckets: [],
    penalty: undefined,
    request,
    route: requestRoute(request),
    shadow,
    degraded: undefined,
    storeMs
  }
  decisionChannel.publish(message)
}

/** Each open shared store's last health message, by store object: what a subscriber that came later reads (`storeHealth`). */
const lastHealth = new Map<object, StoreMessage>()
/** Stores that published `'closed'`: what they send after (a call that failed late) is dropped. */
const closedStores = new WeakSet<object>()

/** Records a store health change (a closed store is forgotten) and publishes it when someone subscribes; nothing after `'closed'`. */
export function publishStore (instance: object, store: StoreMessage['store'], prefix: string, event: StoreMessage['event'], degraded: boolean, liveReplicas: number): void {
  if (closedStores.has(instance)) return
  const message: StoreMessage = { store, prefix, instance, event, degraded, liveReplicas }
  if (event === 'closed') {
    closedStores.add(instance)
    lastHealth.delete(instance)
  } else {
    lastHealth.set(instance, message)
  }
  if (storeChannel.hasSubscribers) storeChannel.publish(message)
}

/** The last health message of each open shared store of this process (its state now). */
export function storeHealth (): IterableIterator<StoreMessage> {
  return lastHealth.values()
}
