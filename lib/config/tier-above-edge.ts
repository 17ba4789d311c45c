/**
 * Whether a tier admits more on a route than the edge lets one client send there
 * (TOLLGATE_TIER_ABOVE_EDGE): the edge's buckets on the route cap every tier from
 * one client, so a tier sized above them is silently capped. Compared as requests:
 * a tier's burst is its smallest capacity over the route's cost, its rate its
 * smallest refill over the cost (a route quota's buckets take one token each).
 */
import type { BucketPolicy } from '../types/engine.js'
import type { TierLimit } from './limits.js'
import type { AppPlan, RoutePlan } from './plan.js'

/** A tier that admits more than the edge on a route: what each admits at once and per second. */
export interface TierAboveEdge {
  tier: string
  route: string
  tierBurst: number
  edgeBurst: number
  tierPerSecond: number
  edgePerSecond: number
}

/**
 * The first tier of `app` that admits more requests on `route` than the edge's
 * buckets there, at once or per second; `undefined` when none does, or when the
 * route's cost is a function or 0 (its requests are not counted by the tier).
 */
export function tierAboveEdge (route: RoutePlan, app: AppPlan): TierAboveEdge | undefined {
  const { edgeBuckets, cost } = route
  if (!route.app || edgeBuckets.length === 0 || typeof cost !== 'number' || cost === 0) return undefined
  const edge = admits(edgeBuckets.map((bucket) => bucket.policy), 1)
  for (const tier of Object.keys(app.tiers)) {
    const own = route.quota === undefined ? [] : (route.quota[tier] ?? route.quota.default) as readonly TierLimit[]
    const main = route.replace ? own : app.tiers[tier] as readonly TierLimit[]
    const charged = admits(main.map((limit) => limit.named.policy), cost)
    const once = route.replace ? charged : min(charged, admits(own.map((limit) => limit.named.policy), 1))
    if (once.burst > edge.burst || once.perSecond > edge.perSecond) {
      return { tier, route: route.route, tierBurst: once.burst, edgeBurst: edge.burst, tierPerSecond: once.perSecond, edgePerSecond: edge.perSecond }
    }
  }
  return undefined
}

/** Requests of `cost` tokens that `policies`, all taken together, admit at once and per second. */
function admits (policies: readonly BucketPolicy[], cost: number): { burst: number, perSecond: number } {
  let burst = Infinity
  let perSecond = Infinity
  for (const policy of policies) {
    burst = Math.min(burst, Math.floor(policy.capacity / cost))
    perSecond = Math.min(perSecond, policy.refillPerSecond / cost)
  }
  return { burst, perSecond }
}

function min (a: { burst: number, perSecond: number }, b: { burst: number, perSecond: number }): { burst: number, perSecond: number } {
  return { burst: Math.min(a.burst, b.burst), perSecond: Math.min(a.perSecond, b.perSecond) }
}
