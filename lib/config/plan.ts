/**
 * What validation makes of the options: a plan of plain values (policies, names,
 * the user's functions), from which wire.ts builds the runtime. Nothing here holds
 * a timer, a client or a store of its own making.
 */
import type { FastifyRequest } from 'fastify'
import type { LimitDecision } from '../types/decision.js'
import type { AppHookName, EdgeMode, HeaderStyle, Identity, WarningCode } from '../types/options.js'
import type { RouteCost, RouteEdgeKey } from '../types/route.js'
import type { BucketPolicy } from '../types/engine.js'
import type { Store } from '../types/store.js'
import type { NamedPolicy } from '../output/headers.js'
import type { AllowListSettings } from './allow-list.js'
import type { TierLimit } from './limits.js'
import type { PenaltySettings } from './penalty.js'

export interface EdgePlan {
  /** The client's edge bucket for every request; `undefined` under `edge.global: false`. */
  bucket: NamedPolicy | undefined
  key: ((request: FastifyRequest) => unknown) | undefined
  /** Hides `key` values in store keys and logs (HMAC-SHA256); `undefined`: plain SHA-256. */
  keySecret: string | undefined
  ipv6Subnet: number
  mode: EdgeMode
  /** `edge.settleIntervalMs` (default 100), used under `'settle'`. */
  settleIntervalMs: number
  /**
   * The edge decides in this process, in front of the shared store: `'replica-share'`
   * or `'settle'` on a store the replicas share (on the memory store every mode is local already).
   */
  local: boolean
  penalty: PenaltySettings | undefined
}

export interface AppPlan {
  /** Tier name → its limits (one named `app` for a tier of one policy), each with this process's share (prototype-less). */
  tiers: Record<string, readonly TierLimit[]>
  /** The tier of requests with no verified identity: `anonymous` when configured, else `default`. */
  anonymousTier: string
  identify: ((request: FastifyRequest) => Identity | undefined | PromiseLike<Identity | undefined>) | undefined
  /** `app.maxQuota`: the largest quota an identity may carry; `undefined`: identities' quotas are ignored. */
  maxQuota: BucketPolicy | undefined
  /** The claim of `request.user` the default `identify` reads a quota from. */
  quotaClaim: string | undefined
  penalty: PenaltySettings | undefined
  hook: AppHookName
  /** Whether the app layer applies to routes whose config does not name it. */
  global: boolean
  /** `app.digestIds`: user ids go into store keys as digests (as `edge.key` values do). */
  digestIds: boolean
}

/** `protect`, checked (config/protect.ts). */
export interface ProtectPlan {
  /** The event loop's p99 delay target, in ms; `undefined`: not watched. */
  eventLoopDelayMs: number | undefined
  /** The handler's mean latency target per route, in ms (a route may set its own, `rateLimit.latencyMs`); `undefined`: not watched. */
  latencyMs: number | undefined
  /** A gauge of the user's and its target; `undefined`: none. */
  gauge: { read: () => unknown, target: number } | undefined
  /** Tier names, highest priority first: every tier once. */
  priorities: readonly string[]
  minConcurrency: number
  maxConcurrency: number
  /** Where the limit starts; `undefined`: the control law's own start (engine/concurrency-limit.ts), within the bounds. */
  initialConcurrency: number | undefined
  intervalMs: number
  /** The status of a shed request. */
  status: 503 | 429
}

/** What the checks of a route config need to know of the plugin's. */
export interface RouteCheckContext {
  /** `name`: this registration's among several; `undefined` for the one without a name. */
  name: string | undefined
  edge: EdgePlan | undefined
  app: AppPlan | undefined
  /** The store's quota share (1, or 1/N for N replicas each with a memory store): applied to route quotas too. */
  quotaShare: number
  /** Whether the store has `refund()`, which a penalty needs. */
  refunds: boolean
  /** `protect`, checked: capacity protection; `undefined`: none. */
  protect: ProtectPlan | undefined
}

export interface Plan extends RouteCheckContext {
  /** The user's store; `undefined`: the default memory store, which wire.ts makes. */
  store: Store | undefined
  headers: HeaderStyle
  shadow: boolean
  onLimit: ((request: FastifyRequest, decision: LimitDecision) => void) | undefined
  allowList: AllowListSettings | undefined
  /** The warnings switched on. */
  warnings: ReadonlySet<WarningCode>
  /** `shadowReport`, checked: what the shadow counter keeps (used in shadow mode). */
  shadowReport: { minutes: number, keys: number }
  /** `asyncTimeoutMs`: the longest wait for a promise a user function returned. */
  asyncTimeoutMs: number
  /** `decisions`: each layer's decision is kept on the request, for `fastify.tollgate.decision(request)`. */
  decisions: boolean
}

/** A route's `config.rateLimit`, checked. */
export interface RoutePlan {
  /** `POST /export`: names the route in logs and errors. */
  route: string
  /** `route:POST /export`: the name of the route's own bucket (see `routeBucket`). */
  bucket: string
  cost: RouteCost
  /** Tier name → the route's own limits (one named `route` for a quota of one policy); `undefined` without a route quota. */
  quota: Record<string, readonly TierLimit[]> | undefined
  /**
   * The edge's buckets for this route (the client's unless `replace`, then the
   * route's own), in header order; empty when the edge leaves it alone.
   */
  edgeBuckets: readonly NamedPolicy[]
  /** The route's own edge bucket, named `edge-route`; `undefined` without one. */
  edgeQuota: NamedPolicy | undefined
  /** Who the route's own edge bucket is kept for (`rateLimit.edge.key`, default `'edge'`). */
  edgeKey: RouteEdgeKey
  /** `rateLimit.replace`: the route's own buckets instead of the layers'. */
  replace: boolean
  /** Whether the app layer applies to this route. */
  app: boolean
  /** The route's own penalty (keyed per route); `false`: none here; `undefined`: each layer's own. */
  penalty: PenaltySettings | false | undefined
  /** `rateLimit.critical`: capacity protection sheds the route last. */
  critical: boolean
  /** `rateLimit.latencyMs`: the route's own latency target for capacity protection; `undefined`: the plugin's. */
  latencyMs: number | undefined
}

/** `fastify.tollgate.limiter(options)`, checked. */
export interface LimiterPlan {
  name: string
  /** Its member in the headers (named after the limiter) and this process's share of its policy. */
  named: NamedPolicy
  /** The policy as configured: a cost within its capacity may overdraw this process's share. */
  whole: BucketPolicy
  key: ((request: FastifyRequest) => unknown) | undefined
  /** A number from 0 to `whole.capacity`, or the user's function (its answers are checked at each request). */
  cost: number | ((request: FastifyRequest) => unknown)
  penalty: PenaltySettings | undefined
  /** Whether the plugin's allow-list exempts requests from this limiter. */
  allowList: boolean
}
