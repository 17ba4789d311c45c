/**
 * A route's `config.rateLimit`, checked at `onRoute` into a `RoutePlan` (its
 * names are in output/route-names.ts).
 */
import type { RouteOptions } from 'fastify'
import type { RouteCost, RouteEdgeKey } from '../types/route.js'
import { InvalidRouteConfigError } from '../output/errors.js'
import { namedPolicy, type NamedPolicy } from '../output/headers.js'
import { checkKnownKeys, checkNumber, checkObject, checkPolicy, describe, expected, type Fail } from './check.js'
import { checkTierLimits, namesOf, share, tiersIn, type TierLimit } from './limits.js'
import { checkPenalty } from './penalty.js'
import { keysOf, ROUTE_OPTIONS } from './rows.js'
import type { EdgePlan, RouteCheckContext, RoutePlan } from './plan.js'
import { PENALTY_NEEDS_REFUND } from './store.js'
import { routeBucket, routeName } from '../output/route-names.js'
import { inRegistration } from '../output/key-format.js'

/** `rateLimit.edge`'s options besides its policy (`capacity`, `refillPerSecond`), which `checkPolicy` knows. */
const ROUTE_EDGE_KEYS = keysOf(ROUTE_OPTIONS, 'edge')

/** Fails with `TOLLGATE_INVALID_ROUTE_CONFIG`, naming the route. */
type RouteFail = Fail

/**
 * Validates a route's `config.rateLimit` (throws `TOLLGATE_INVALID_ROUTE_CONFIG`).
 * Returns `false` for a route left out of both layers. A numeric cost is checked
 * against the capacity of every tier it can run under (the whole quota, not this
 * process's share), since a cost above it could never pass.
 */
export function checkRouteConfig (routeOptions: Pick<RouteOptions, 'method' | 'url'> & { constraints?: unknown }, value: unknown, plan: RouteCheckContext): RoutePlan | false {
  const { edge, app } = plan
  const route = routeName(routeOptions)
  const bucket = routeBucket(routeOptions)
  const fail: RouteFail = (problem) => { throw new InvalidRouteConfigError(route, problem) }
  if (value === false) return false
  const config = value === undefined ? {} : checkObject(fail, 'rateLimit', value)
  checkKnownKeys(fail, 'rateLimit', config, keysOf(ROUTE_OPTIONS))
  if (config.app !== undefined && typeof config.app !== 'boolean') expected(fail, 'rateLimit.app', 'a boolean', config.app)
  const namesApp = config.app === true || config.cost !== undefined || config.quota !== undefined
  if (config.app === false && namesApp) {
    fail('`rateLimit.cost` and `rateLimit.quota` belong to the app layer, which `rateLimit.app: false` leaves out')
  }
  if (app === undefined && namesApp) {
    fail('`rateLimit.app`, `rateLimit.cost` and `rateLimit.quota` need the app layer, which is disabled (set the `app` option)')
  }
  if (config.replace !== undefined && typeof config.replace !== 'boolean') expected(fail, 'rateLimit.replace', 'a boolean', config.replace)
  const replace = config.replace === true
  if (replace && (config.edge === undefined || config.edge === false) && config.quota === undefined) {
    fail('`rateLimit.replace` replaces the layers\' buckets with the route\'s own: give the route `rateLimit.edge` (a policy) or `rateLimit.quota`')
  }
  const edgeQuota = checkRouteEdge(fail, config.edge, edge, plan)
  const edgeKey = edgeQuota === undefined ? 'edge' : checkRouteEdgeKey(fail, (config.edge as Record<string, unknown>).key)
  const edgeBuckets = config.edge === false || edge === undefined ? [] : [replace ? undefined : edge.bucket, edgeQuota].filter((b) => b !== undefined)
  const penalty = config.penalty === undefined ? undefined : config.penalty === false ? false as const : checkPenalty(fail, 'rateLimit.penalty', config.penalty)
  if (penalty !== undefined && penalty !== false) {
    if (!plan.refunds) fail(PENALTY_NEEDS_REFUND)
    if (edgeBuckets.length > 0 && edge !== undefined && edge.local) {
      fail(`Expected \`rateLimit.penalty\` on a route the edge limits with \`edge.mode: 'exact'\` (the penalty is kept in the shared store), got \`edge.mode: '${edge.mode}'\` (or give the route \`edge: false\`)`)
    }
  }
  // Under `replace`, a layer without a bucket of the route's own leaves the route alone.
  const appHere = app !== undefined && config.app !== false && (replace ? config.quota !== undefined : app.global || namesApp)
  if (config.critical !== undefined && typeof config.critical !== 'boolean') expected(fail, 'rateLimit.critical', 'a boolean', config.critical)
  const latencyMs = config.latencyMs === undefined ? undefined : checkLatencyTarget(fail, config.latencyMs)
  const protectKeys = [config.critical === true ? '`rateLimit.critical`' : '', latencyMs === undefined ? '' : '`rateLimit.latencyMs`'].filter(Boolean)
  if (protectKeys.length > 0 && (plan.protect === undefined || !appHere)) {
    fail(`${protectKeys.join(' and ')} ${protectKeys.length > 1 ? 'belong' : 'belongs'} to capacity protection, which runs in the app layer: ` +
      (plan.protect === undefined ? 'set the `protect` option' : 'the app layer leaves this route out (`rateLimit.app: false`, or `app.global: false` without `rateLimit.app: true`)'))
  }
  const settled = { route, bucket, edgeBuckets, edgeQuota, edgeKey, replace, app: appHere, penalty, critical: config.critical === true, latencyMs }
  if (app === undefined) return { ...settled, cost: 1, quota: undefined }
  const quota = checkRouteQuota(fail, config.quota, app.tiers, plan)
  // Under `replace`, the cost is charged to the route's quota, which must hold it.
  return { ...settled, cost: checkRouteCost(fail, config.cost ?? 1, replace && quota !== undefined ? quota : app.tiers), quota }
}

/** `rateLimit.latencyMs`: the route's own latency target for capacity protection, in ms. */
function checkLatencyTarget (fail: RouteFail, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > 3_600_000) expected(fail, 'rateLimit.latencyMs', 'a number of ms > 0 and ≤ 3600000', value)
  return value
}

/** `rateLimit.cost`: a function, or a number within the capacity of every tier (as configured). */
function checkRouteCost (fail: RouteFail, cost: unknown, tiers: Record<string, readonly TierLimit[]>): RouteCost {
  if (typeof cost === 'function') return cost as RouteCost
  if (typeof cost !== 'number') expected(fail, 'rateLimit.cost', 'a finite number ≥ 0 or a function of the request', cost)
  checkNumber(fail, 'rateLimit.cost', cost, 0)
  for (const tier of Object.keys(tiers)) {
    const limits = tiers[tier] as readonly TierLimit[]
    for (const limit of limits) {
      const capacity = limit.whole.capacity
      if (cost > capacity) {
        const above = limits.length > 1
          ? `the capacity ${capacity} of tier \`${tier}\`'s limit \`${limit.named.name}\``
          : `tier \`${tier}\`'s capacity ${capacity}`
        fail(`Expected \`rateLimit.cost\` to be at most the capacity of every tier, got \`${cost}\` above ${above}: it could never pass`)
      }
    }
  }
  return cost
}

/** `rateLimit.quota`: tiers of `app.tiers` only, whose limits are named apart from the tiers' own. */
function checkRouteQuota (fail: RouteFail, value: unknown, tiers: Record<string, readonly TierLimit[]>, plan: RouteCheckContext): Record<string, readonly TierLimit[]> | undefined {
  if (value === undefined) return undefined
  // In the registration's names, as the tiers' are.
  const quota = tiersIn(checkTierLimits(fail, 'rateLimit.quota', value, 'route', plan.quotaShare, '#'), plan.name)
  for (const tier of Object.keys(quota)) {
    if (!(tier in tiers)) {
      fail(`Expected \`rateLimit.quota\` to name only tiers of \`app.tiers\` (${Object.keys(tiers).join(', ')}), got ${describe(tier)}`)
    }
  }
  // One step shows a tier's limits and the route's: a name must say which bucket it is.
  for (const tier of Object.keys(tiers)) {
    const tierNames = namesOf(tiers[tier] as readonly TierLimit[])
    const clash = namesOf((quota[tier] ?? quota.default) as readonly TierLimit[]).find((name) => tierNames.includes(name))
    if (clash !== undefined) {
      fail(`Expected the limits of \`rateLimit.quota\` to be named apart from tier \`${tier}\`'s limits (${tierNames.join(', ')}), got ${describe(clash)} in both` +
        ' (a tier of one policy is named `app`, a route quota of one policy `route`)')
    }
  }
  return quota
}

/** A route's own edge bucket (`rateLimit.edge` as a policy), named `edge-route`; `undefined` for none or `false`. */
function checkRouteEdge (fail: Fail, value: unknown, edge: EdgePlan | undefined, plan: RouteCheckContext): NamedPolicy | undefined {
  if (value === undefined || value === false) return undefined
  if (edge === undefined) {
    fail('`rateLimit.edge` needs the edge layer, which is disabled (set the `edge` option; `edge: { global: false }` runs it only for routes with their own `rateLimit.edge`)')
  }
  if (value === true) expected(fail, 'rateLimit.edge', 'false or a policy { capacity, refillPerSecond }', value)
  return namedPolicy(inRegistration(plan.name, 'edge-route'), share(fail, 'rateLimit.edge', checkPolicy(fail, 'rateLimit.edge', value, ROUTE_EDGE_KEYS), plan.quotaShare))
}

/** `rateLimit.edge.key`: `'edge'` (default), `'ip'` or a function of the request. */
function checkRouteEdgeKey (fail: Fail, value: unknown): RouteEdgeKey {
  if (value === undefined || value === 'edge' || value === 'ip' || typeof value === 'function') return (value ?? 'edge') as RouteEdgeKey
  return expected(fail, 'rateLimit.edge.key', "'edge', 'ip' or a function of the request", value)
}
