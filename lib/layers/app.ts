/**
 * The app layer: per user, after authentication. Attached to each route in
 * `onRoute`, after the route's own hooks of its kind, so that authentication
 * placed in a route-level hook has run. Takes the route's cost from the user's
 * bucket and, for a route with a quota, one token from the route's own bucket,
 * all or nothing (under `rateLimit.replace`, the cost from the route's own alone).
 * The allow-list, `identify` and the cost may answer with a promise, awaited
 * (lookup.ts); when they answer at once, nothing is awaited.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { BucketRequest } from '../types/store.js'
import { overdraws } from '../engine/share.js'
import { InvalidCostError, LookupFailedError } from '../output/errors.js'
import type { Warnings } from '../output/warnings.js'
import { HeaderLayout, type NamedPolicy } from '../output/headers.js'
import { describe } from '../config/check.js'
import { capacityOf, type TierLimit } from '../config/limits.js'
import type { AppSettings, HookContext, Settings } from './context.js'
import type { IdentityQuota, IdentityQuotas } from './identity-quota.js'
import type { AppKeys } from './keys.js'
import { addPenaltyBuckets, stepPenalty } from './penalty.js'
import { identityOf, requester, type Requester } from './requester.js'
import type { RouteSettings } from './routes.js'
import type { Done } from './outcome.js'
import { failStep, runStep, type RequestStep } from './step.js'
import { continueAfter, isThenable } from './promises.js'
import { LOOKUP_FAILED } from './lookup.js'
import { unlessAllowed } from './allow-list.js'
import { admit, type ProtectedRoute } from './protect.js'

export type Hook = (request: FastifyRequest, reply: FastifyReply, done: Done) => void

/** A step's buckets before they are known. */
const NO_BUCKETS: BucketRequest[] = []

/** What the app layer's hooks are made with. */
export interface AppHookContext extends HookContext {
  app: AppSettings
  keys: AppKeys
}

/** The route's cost for this request, or the error to fail it with; a promise of either when the cost function answers later. */
function costOf (at: AppRoute, request: FastifyRequest, capacity: number, tier: string): number | Error | Promise<number | Error> {
  const { route } = at
  if (typeof route.cost === 'number') return route.cost
  let cost: unknown
  try {
    cost = route.cost(request)
  } catch (error) {
    return new InvalidCostError(route.route, 'the cost function threw', { cause: error })
  }
  if (isThenable(cost)) {
    return at.settings.lookups.wait('rateLimit.cost', cost).then((settled) => settled === LOOKUP_FAILED
      ? new LookupFailedError('rateLimit.cost')
      : checkedCost(route, settled, capacity, tier))
  }
  return checkedCost(route, cost, capacity, tier)
}

/** A cost function's answer `cost`, or the error to fail the request with. */
function checkedCost (route: RouteSettings, cost: unknown, capacity: number, tier: string): number | Error {
  if (typeof cost !== 'number' || !Number.isFinite(cost) || cost < 0) {
    return new InvalidCostError(route.route, `the cost function returned ${describe(cost)}; expected a finite number ≥ 0`)
  }
  if (cost > capacity) {
    return new InvalidCostError(route.route, `the cost function returned ${cost}, above the capacity ${capacity} of tier \`${tier}\`: it could never pass`)
  }
  return cost
}

/** What the app hook of one route runs with. */
interface AppRoute {
  settings: Settings
  app: AppSettings
  keys: AppKeys
  warnings: Warnings
  route: RouteSettings
  /** Under a quota share, a cost above the share but within the whole quota overdraws it (engine/share.ts). */
  shared: boolean
  tiers: Map<string, TierStep>
  ownStep: (quota: IdentityQuota, tier: string) => TierStep | string
  /** Capacity protection on this route; `undefined` without `protect`. */
  protect: ProtectedRoute | undefined
}

/** The app hook of `route`. */
export function createAppHook (context: AppHookContext, route: RouteSettings): Hook {
  const { settings, app, keys, warnings, allowed } = context
  const checkForwarded = settings.edge === undefined // else the edge hook checks
  const tiers = new Map<string, TierStep>()
  for (const tier of Object.keys(app.tiers)) {
    // Under `replace`, the route's quota is the main bucket, charged the route's cost.
    tiers.set(tier, route.replace ? tierStep(routeLimits(route, tier) as readonly TierLimit[], undefined) : tierStep(app.tiers[tier] as readonly TierLimit[], routeLimits(route, tier)))
  }
  const { protection } = settings
  const protect = protection === undefined ? undefined : { protection, critical: route.critical, latency: protection.signals.route(route.latencyMs) }
  const at: AppRoute = { settings, app, keys, warnings, route, shared: settings.quotaShare < 1, tiers, ownStep: ownSteps(route), protect }
  const identify = (request: FastifyRequest, reply: FastifyReply, done: Done): void => {
    const identity = identityOf(request, app)
    if (isThenable(identity)) {
      const end = { request, reply, done }
      continueAfter(end, settings.lookups.wait('app.identify', identity), (settled) => { decide(at, requester(request, settled, app, warnings), request, reply, end.done) })
    } else {
      decide(at, requester(request, identity, app, warnings), request, reply, done)
    }
  }
  const guarded = unlessAllowed(allowed, identify)
  return function tollgateApp (request, reply, done) {
    if (checkForwarded) warnings.checkForwarded(request)
    guarded(request, reply, done)
  }
}

/** The requester's tier (or own quota) on the route, its cost, then the step. */
function decide (at: AppRoute, requesterOf: Requester, request: FastifyRequest, reply: FastifyReply, done: Done): void {
  const { app, route, warnings } = at
  let who = requesterOf
  if (warnings.anonymousLeft > 0) warnings.sawRequester(who.kind === 'ip')
  if (at.protect !== undefined && !admit(at.settings, at.protect, { request, reply, done, tier: who.tier, key: () => requesterKey(at.keys, who, request) })) return
  let tier = at.tiers.get(who.tier) as TierStep
  if (who.quota !== undefined && !route.replace) {
    const own = at.ownStep(who.quota, who.tier)
    if (typeof own === 'string') {
      (app.identityQuotas as IdentityQuotas).refused(request, who.id, own)
      who = { ...who, quota: undefined }
    } else {
      tier = own
    }
  }
  // Its buckets once the cost is known (none is ever added to NO_BUCKETS).
  const step: RequestStep = { layer: 'app', buckets: NO_BUCKETS, layout: tier.layout, tier: who.tier, penalty: undefined, decision: undefined, request, reply, done }
  // A cost above an identity's own quota is no server bug: the store refuses it (it never passes).
  const cost = costOf(at, request, who.quota === undefined || route.replace ? tier.capacity : Infinity, who.tier)
  if (isThenable(cost)) continueAfter(step, cost, (known) => { charge(at, who, tier, step, known) })
  else charge(at, who, tier, step, cost)
}

/** The step's buckets for `who` under `tier`, each charged `cost`, and its penalty; then the step. A cost that is an error ends it. */
function charge (at: AppRoute, who: Requester, tier: TierStep, step: RequestStep, cost: number | Error): void {
  const { settings, keys, route } = at
  if (cost instanceof Error) {
    failStep(settings, step, cost)
    return
  }
  const { request } = step
  const key = requesterKey(keys, who, request)
  // Under `replace`, the route's quota is the main bucket: its key is the route's.
  step.buckets = stepBuckets(tier, route.replace ? keys.route(who, request, route.bucket) : key, cost, at.shared)
  if (tier.layout.buckets.length > tier.main) addRouteBuckets(step.buckets, tier, keys.route(who, request, route.bucket))
  if (at.app.penalty !== undefined || route.penalty !== undefined) {
    step.penalty = stepPenalty(at.app.penalty, route, key)
    if (step.penalty !== undefined) addPenaltyBuckets(step.buckets, step.penalty)
  }
  runStep(settings, step)
}

/** The requester's key in the app layer: its user's, else its address's. */
function requesterKey (keys: AppKeys, who: Requester, request: FastifyRequest): string {
  return who.kind === 'user' ? keys.user(who.id) : keys.address(request)
}

/**
 * Identities' own quotas on `route`, by tier: with the route quota of their tier,
 * or why such a quota cannot run here (a limit named like one of the route
 * quota's). Kept per quota (IdentityQuotas keeps few, so a WeakMap holds few).
 */
function ownSteps (route: RouteSettings): (quota: IdentityQuota, tier: string) => TierStep | string {
  const steps = new WeakMap<IdentityQuota, Map<string, TierStep | string>>()
  return (quota, tier) => {
    let byTier = steps.get(quota)
    if (byTier === undefined) steps.set(quota, byTier = new Map<string, TierStep | string>())
    let step = byTier.get(tier)
    if (step === undefined) {
      const own = routeLimits(route, tier)
      const names = quota.limits.map((limit) => limit.named.name)
      const clash = own?.find((limit) => names.includes(limit.named.name))
      step = clash === undefined ? tierStep(quota.limits, own) : `a limit is named \`${clash.named.name}\` like one of the quota of ${route.route}`
      byTier.set(tier, step)
    }
    return step
  }
}

/** The tier's buckets for the requester keyed `key`, each charged `cost`; `shared`: the policies are a share of the quota. */
function stepBuckets (tier: TierStep, key: string, cost: number, shared: boolean): BucketRequest[] {
  const { layout, suffixes, wholeCapacities } = tier
  // The first limit's key has no suffix in the usual case of a tier of one policy.
  const buckets: BucketRequest[] = [{
    key: suffixes[0] === '' ? key : key + (suffixes[0] as string),
    policy: (layout.buckets[0] as NamedPolicy).policy,
    cost,
    overdraft: shared && overdraws(cost, wholeCapacities[0] as number)
  }]
  // The others are limits of a list: each has its suffix.
  for (let i = 1; i < tier.main; i++) {
    buckets.push({ key: key + (suffixes[i] as string), policy: (layout.buckets[i] as NamedPolicy).policy, cost, overdraft: shared && overdraws(cost, wholeCapacities[i] as number) })
  }
  return buckets
}

/** The route quota's buckets (one token each), after the tier's, keyed from `routeKey`. */
function addRouteBuckets (buckets: BucketRequest[], tier: TierStep, routeKey: string): void {
  const { layout, suffixes } = tier
  for (let i = tier.main; i < layout.buckets.length; i++) {
    const suffix = suffixes[i] as string
    buckets.push({ key: suffix === '' ? routeKey : routeKey + suffix, policy: (layout.buckets[i] as NamedPolicy).policy, cost: 1 })
  }
}

/** The route quota's limits for `tier` (its own entry, else `default`); `undefined` without a route quota. */
function routeLimits (route: RouteSettings, tier: string): readonly TierLimit[] | undefined {
  return route.quota === undefined ? undefined : (route.quota[tier] ?? route.quota.default)
}

/** One tier's step on one route: the tier's limits, then the route's own, all or nothing. */
interface TierStep {
  layout: HeaderLayout
  /** Key suffixes, by bucket of `layout`. */
  suffixes: readonly string[]
  /** How many of the buckets are the tier's (charged the route's cost); the rest are the route's own (one token each). */
  main: number
  /** The smallest capacity of the tier's limits, as configured: a cost above it could never pass. */
  capacity: number
  /** The capacity of each of the tier's limits, as configured: a cost within it may overdraw this process's share. */
  wholeCapacities: readonly number[]
}

function tierStep (main: readonly TierLimit[], own: readonly TierLimit[] | undefined): TierStep {
  const limits = own === undefined ? main : [...main, ...own]
  return {
    layout: new HeaderLayout(limits.map((limit) => limit.named)),
    suffixes: limits.map((limit) => limit.keySuffix),
    main: main.length,
    capacity: capacityOf(main),
    wholeCapacities: main.map((limit) => limit.whole.capacity)
  }
}
