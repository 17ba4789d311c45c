/**
 * The app layer: per user, after authentication. Attached to each route in
 * `onRoute`, after the route's own hooks of its kind, so that authentication
 * placed in a route-level hook has run. Takes the route's cost from the user's
 * bucket and, for a route with a quota, one token from the route's own bucket,
 * all or nothing.
 */
import type { FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import { runStep, type Done } from './step.js'
import { InvalidCostError } from '../output/errors.js'
import { HeaderLayout, type NamedPolicy } from '../output/headers.js'
import { bucketKey, clientAddress } from './keys.js'
import { ofClientAddress, memoize } from './key-cache.js'
import type { AppSettings, Identity, RouteSettings, Settings } from '../config/options.js'
import { routeConfigReader } from './route-config.js'
import type { RouteTable } from './routes.js'
import { capacityOf, type Quota, type TierLimit } from '../config/limits.js'
import type { IdentityQuota, IdentityQuotas } from './identity-quota.js'
import type { BucketRequest } from '../types/store.js'
import { isPromise } from './sync.js'
import { addPenaltyBuckets, stepPenalty } from './penalty.js'
import { describe } from '../config/check.js'
import type { Warnings } from '../output/warnings.js'

/** Who a request is from, as keys see it. */
interface Requester {
  kind: 'user' | 'ip'
  /** The user id (`''` for kind `ip`: the keys read the client address from the request). */
  id: string
  tier: string
  /** The identity's own quota, checked; `undefined`: the tier's. */
  quota: IdentityQuota | undefined
}

/** The app layer's bucket keys, shared by the routes of one registration. */
export interface AppKeys {
  /** `{user:<id>}:app` from a user id; cached. */
  user: (id: string) => string
  /** `{ip:<address>}:app` for the request's client address; cached. */
  address: (request: FastifyRequest) => string
  /** The key of a route's own bucket `bucket` (`route:POST /export`) for `who`, the requester of `request`. */
  route: (who: Requester, request: FastifyRequest, bucket: string) => string
}

/** `perConnection`: request.ip is the connection's address (trustProxy off), see `ofClientAddress`. */
export function appKeys (ipv6Subnet: number, perConnection: boolean): AppKeys {
  return {
    user: memoize((id) => bucketKey('user', id, 'app')),
    address: ofClientAddress(memoize((ip) => bucketKey('ip', clientAddress(ip, ipv6Subnet), 'app')), perConnection),
    // request.ip is undefined once the socket is gone (then `unknown`, like the other keys).
    route: (who, request, bucket) => bucketKey(who.kind, who.kind === 'ip' ? clientAddress(request.ip, ipv6Subnet) : who.id, bucket)
  }
}

/**
 * The default `identify`: the verified `request.user` of @fastify/jwt (`null` until
 * verified), with its quota from claim `quotaClaim` when set.
 */
function jwtIdentity (request: FastifyRequest, quotaClaim: string | undefined): Identity | undefined {
  const user: unknown = (request as { user?: unknown }).user
  if (typeof user !== 'object' || user === null) return undefined
  const { sub, tier } = user as { sub?: unknown, tier?: unknown }
  const identity: Identity = { id: sub as Identity['id'], tier: tier as string }
  if (quotaClaim !== undefined && Object.hasOwn(user, quotaClaim)) identity.quota = (user as Record<string, Quota>)[quotaClaim]
  return identity
}

/**
 * The requester: a user with a valid id, under their tier when it is an own name
 * of `app.tiers` (else `default`); otherwise anonymous, keyed by client IP under
 * the anonymous tier. Never a better tier than the claims prove.
 */
function requester (request: FastifyRequest, app: AppSettings, warnings: Warnings): Requester {
  let identity: Identity | undefined
  try {
    identity = app.identify === undefined ? jwtIdentity(request, app.quotaClaim) : app.identify(request)
  } catch (error) {
    request.log.error({ err: error }, 'fastify-tollgate: app.identify threw; treated as anonymous')
  }
  if (isPromise(identity)) {
    warnings.warn('TOLLGATE_ASYNC_IDENTIFY')
    identity = undefined
  }
  if (typeof identity === 'object' && identity !== null) {
    let id: unknown, tier: unknown, quota: unknown
    try {
      ({ id, tier, quota } = identity)
    } catch (error) {
      request.log.error({ err: error }, 'fastify-tollgate: reading the identity threw; treated as anonymous')
      return { kind: 'ip', id: '', tier: app.anonymousTier, quota: undefined }
    }
    const validId = (typeof id === 'string' && id !== '') || (typeof id === 'number' && Number.isFinite(id))
    if (validId) {
      const tierName = typeof tier === 'string' && Object.hasOwn(app.tiers, tier) ? tier : 'default'
      let own: IdentityQuota | string | undefined
      if (quota !== undefined && quota !== null) {
        if (app.identityQuotas === undefined) warnings.warn('TOLLGATE_IDENTITY_QUOTA_IGNORED')
        else own = app.identityQuotas.of(quota)
      }
      // Never a better quota than the claims prove: a bad one gets the tier's.
      if (typeof own === 'string') {
        (app.identityQuotas as IdentityQuotas).refused(request, String(id), own)
        own = undefined
      }
      return { kind: 'user', id: String(id), tier: tierName, quota: own }
    }
  }
  return { kind: 'ip', id: '', tier: app.anonymousTier, quota: undefined }
}

/** The route's cost for this request, or the error to fail it with. */
function costOf (request: FastifyRequest, route: RouteSettings, capacity: number, tier: string): number | Error {
  if (typeof route.cost === 'number') return route.cost
  let cost: unknown
  try {
    cost = route.cost(request)
  } catch (error) {
    return new InvalidCostError(route.route, 'the cost function threw', { cause: error })
  }
  if (isPromise(cost)) return new InvalidCostError(route.route, 'the cost function returned a promise; it must return a number synchronously')
  if (typeof cost !== 'number' || !Number.isFinite(cost) || cost < 0) {
    return new InvalidCostError(route.route, `the cost function returned ${describe(cost)}; expected a finite number ≥ 0`)
  }
  if (cost > capacity) {
    return new InvalidCostError(route.route, `the cost function returned ${cost}, above the capacity ${capacity} of tier \`${tier}\`: it could never pass`)
  }
  return cost
}

type Hook = (request: FastifyRequest, reply: FastifyReply, done: Done) => void

export function createAppHook (
  settings: Settings, app: AppSettings, route: RouteSettings, keys: AppKeys, warnings: Warnings,
  allowed: ((request: FastifyRequest) => boolean) | undefined
): Hook {
  const checkForwarded = settings.edge === undefined // else the edge hook checks
  const tiers = new Map<string, TierStep>()
  for (const tier of Object.keys(app.tiers)) {
    tiers.set(tier, tierStep(app.tiers[tier] as readonly TierLimit[], routeLimits(route, tier)))
  }
  // Identities' own quotas (kept by IdentityQuotas, so a WeakMap holds few), by tier: with the route quota of their tier,
  // or why such a quota cannot run here (a limit named like one of the route quota's).
  const ownSteps = new WeakMap<IdentityQuota, Map<string, TierStep | string>>()
  const newOwnStep = (quota: IdentityQuota, tier: string): TierStep | string => {
    const own = routeLimits(route, tier)
    const names = quota.limits.map((limit) => limit.named.name)
    const clash = own?.find((limit) => names.includes(limit.named.name))
    const step = clash === undefined ? tierStep(quota.limits, own) : `a limit is named \`${clash.named.name}\` like one of the quota of ${route.route}`
    let byTier = ownSteps.get(quota)
    if (byTier === undefined) ownSteps.set(quota, byTier = new Map<string, TierStep | string>())
    byTier.set(tier, step)
    return step
  }
  return function tollgateApp (request, reply, done) {
    if (checkForwarded) warnings.checkForwarded(request)
    if (allowed !== undefined && allowed(request)) {
      done()
      return
    }
    let who = requester(request, app, warnings)
    if (warnings.anonymousLeft > 0) warnings.sawRequester(who.kind === 'ip')
    let tier = tiers.get(who.tier) as TierStep
    if (who.quota !== undefined) {
      const own = ownSteps.get(who.quota)?.get(who.tier) ?? newOwnStep(who.quota, who.tier)
      if (typeof own === 'string') {
        (app.identityQuotas as IdentityQuotas).refused(request, who.id, own)
        who = { ...who, quota: undefined }
      } else {
        tier = own
      }
    }
    // A cost above an identity's own quota is no server bug: the store refuses it (it never passes).
    const cost = costOf(request, route, who.quota === undefined ? tier.capacity : Infinity, who.tier)
    if (cost instanceof Error) {
      done(cost)
      return
    }
    // Under a quota share, a cost above the share (checked against the whole quota) overdraws it.
    const key = who.kind === 'user' ? keys.user(who.id) : keys.address(request)
    const { layout, suffixes } = tier
    // The first limit's key has no suffix in the usual case of a tier of one policy.
    const buckets: BucketRequest[] = [{ key: suffixes[0] === '' ? key : key + (suffixes[0] as string), policy: (layout.buckets[0] as NamedPolicy).policy, cost, overdraft: app.overdraft }]
    // The others are limits of a list: each has its suffix.
    for (let i = 1; i < tier.main; i++) {
      buckets.push({ key: key + (suffixes[i] as string), policy: (layout.buckets[i] as NamedPolicy).policy, cost, overdraft: app.overdraft })
    }
    if (layout.buckets.length > tier.main) {
      const routeKey = keys.route(who, request, route.bucket)
      for (let i = tier.main; i < layout.buckets.length; i++) {
        const suffix = suffixes[i] as string
        buckets.push({ key: suffix === '' ? routeKey : routeKey + suffix, policy: (layout.buckets[i] as NamedPolicy).policy, cost: 1 })
      }
    }
    const penalty = app.penalty === undefined && route.penalty === undefined ? undefined : stepPenalty(app.penalty, route, key)
    if (penalty !== undefined) addPenaltyBuckets(buckets, penalty)
    runStep(settings, request, reply, { layer: 'app', buckets, layout, tier: who.tier, penalty }, done)
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
}

function tierStep (main: readonly TierLimit[], own: readonly TierLimit[] | undefined): TierStep {
  const limits = own === undefined ? main : [...main, ...own]
  return {
    layout: new HeaderLayout(limits.map((limit) => limit.named)),
    suffixes: limits.map((limit) => limit.keySuffix),
    main: main.length,
    capacity: capacityOf(main)
  }
}

/** `hook` in the signature of hooks of kind `name`: preParsing hooks take and pass on the payload stream. */
export function hookOfKind (name: AppSettings['hook'], hook: Hook): Hook | PreParsingHook {
  if (name !== 'preParsing') return hook
  return function tollgateAppPreParsing (request, reply, payload, done) {
    hook(request, reply, (error) => { done(error ?? null, payload) })
  }
}

type PreParsingHook = (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (error: Error | null, payload?: unknown) => void) => void

/** Appends `hook` to the route's own hooks of kind `app.hook`, so that it runs after them. */
export function attachAppHook (routeOptions: RouteOptions, app: AppSettings, hook: Hook): void {
  const name = app.hook
  const existing: unknown = routeOptions[name]
  const hooks: unknown[] = existing === undefined ? [] : Array.isArray(existing) ? existing as unknown[] : [existing]
  ;(routeOptions as unknown as Record<string, unknown>)[name] = [...hooks, hookOfKind(name, hook)]
}

/**
 * The app layer for routes the plugin never saw in `onRoute`: declared before it
 * was loaded (`register` not awaited, or a route or a plugin declared first).
 * Added as a global hook, which Fastify also gives to routes declared earlier,
 * in this context and in the child contexts created before (it builds a route's
 * hooks at `ready`); it runs before the route's own hooks of its kind. At the first request to such a
 * route it warns once (TOLLGATE_ROUTE_BEFORE_PLUGIN) and checks the route's
 * config; a bad config fails that route's requests with its coded 500. A route is
 * unseen when `onRoute` did not show it to this registration, whatever other registrations saw.
 */
export function createUnseenRouteHook (
  settings: Settings, app: AppSettings, keys: AppKeys, routes: RouteTable, warnings: Warnings,
  allowed: ((request: FastifyRequest) => boolean) | undefined
): Hook {
  const hooks = new WeakMap<RouteSettings, Hook>()
  const configOf = routeConfigReader()
  return function tollgateAppUnseen (request, reply, done) {
    const config = configOf(request)
    // A route onRoute showed this registration has the app layer as a hook of its own.
    const route = routes.seen(config) === undefined ? routes.of(request, config) : undefined
    if (route instanceof Error) {
      done(route)
      return
    }
    if (route === undefined || route === false || !route.app) {
      done()
      return
    }
    let hook = hooks.get(route)
    if (hook === undefined) hooks.set(route, hook = createAppHook(settings, app, route, keys, warnings, allowed))
    hook(request, reply, done)
  }
}
