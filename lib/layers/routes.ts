/**
 * One registration's checked settings of each route. `onRoute` checks a route's
 * `config.rateLimit` and keeps the result in the route's config, under a symbol
 * of this registration (on a copy: one config object may serve several routes;
 * Fastify copies it, symbols included, into the route's context), so that each
 * request finds its route's settings with one property read. A route declared
 * before the plugin was loaded (never shown to `onRoute`) is checked at its first
 * request, warned about once, and remembered by its config.
 */
import type { FastifyRequest, RouteOptions } from 'fastify'
import type { EdgePlan, RouteCheckContext, RoutePlan } from '../config/plan.js'
import type { RouteEdgeKey } from '../types/route.js'
import { checkRouteConfig } from '../config/route.js'
import { routeName } from '../output/route-names.js'
import { HeaderLayout } from '../output/headers.js'
import type { Warnings } from '../output/warnings.js'

/** A route's plan, with its edge buckets laid out for the headers. */
export interface RouteSettings extends RoutePlan {
  /**
   * The edge's step kept for the client (`edge.key`, else its address): the client's
   * bucket, and the route's own after it when that one is kept for the client too;
   * `undefined` when the edge takes no such step on the route.
   */
  edgeLayout: HeaderLayout | undefined
  /**
   * The route's own edge bucket as a step of its own, taken first: when it is kept
   * for another identity than the client's bucket (`rateLimit.edge.key`), or replaces it.
   */
  edgeOwn: { layout: HeaderLayout, key: RouteEdgeKey } | undefined
}

/** A route's settings; `false`: left out of both layers; an Error: a bad config, which fails the route's requests. */
export type RouteEntry = RouteSettings | false | Error

type RouteConfig = FastifyRequest['routeOptions']['config']

export class RouteTable {
  private readonly own = Symbol('fastify-tollgate: route settings of this registration')
  private readonly unseen = new WeakMap<object, RouteEntry>()

  constructor (private readonly settings: RouteCheckContext, private readonly warnings: Warnings) {}

  /** In `onRoute`: checks the route's config (throws its coded error) and keeps the result in it. */
  add (routeOptions: RouteOptions): RouteSettings | false {
    const entry = this.check(routeOptions, this.configOf(routeOptions.config))
    routeOptions.config = Object.assign({}, routeOptions.config, { [this.own]: entry })
    if (entry instanceof Error) throw entry
    return entry
  }

  /** The entry `onRoute` kept in a route's config, or `undefined` for a route it never saw (and a 404). */
  seen (config: RouteConfig): RouteEntry | undefined {
    return (config as unknown as { [key: symbol]: RouteEntry | undefined })[this.own]
  }

  /**
   * The entry of the request's route, `config` being its config: the one kept by
   * `onRoute`; `undefined` for a 404; for a route declared before the plugin,
   * checked at its first request (with TOLLGATE_ROUTE_BEFORE_PLUGIN) and remembered.
   */
  of (request: FastifyRequest, config: RouteConfig): RouteEntry | undefined {
    const seen = this.seen(config)
    if (seen !== undefined) return seen
    if (request.is404) return undefined
    let entry = this.unseen.get(config)
    if (entry === undefined) {
      const { method, url } = request.routeOptions
      const route = { method, url } as Pick<RouteOptions, 'method' | 'url'>
      this.warnings.warn('TOLLGATE_ROUTE_BEFORE_PLUGIN', { route: routeName(route) })
      entry = this.check(route, this.configOf(config))
      this.unseen.set(config, entry)
    }
    return entry
  }

  /**
   * This registration's part of a route's config: `config.rateLimit` for the one
   * without a name, `config.rateLimits[name]` for a named one; `rateLimit: false`
   * leaves the route out of every registration.
   */
  private configOf (config: Pick<RouteConfig, 'rateLimit'> | undefined): unknown {
    const shared = config?.rateLimit
    const { name } = this.settings
    if (name === undefined || shared === false) return shared
    const named = (config as { rateLimits?: unknown } | undefined)?.rateLimits
    return typeof named === 'object' && named !== null && Object.hasOwn(named, name) ? (named as Record<string, unknown>)[name] : undefined
  }

  /** The route's settings, or the coded error its config fails with. */
  private check (route: Pick<RouteOptions, 'method' | 'url'> & { constraints?: unknown }, config: unknown): RouteEntry {
    try {
      return settled(checkRouteConfig(route, config, this.settings), this.settings.edge)
    } catch (error) {
      return error as Error
    }
  }
}

/** A route's plan with its edge steps laid out for the headers. */
function settled (plan: RoutePlan | false, edge: EdgePlan | undefined): RouteSettings | false {
  if (plan === false) return false
  const { edgeBuckets, edgeQuota } = plan
  const together = { ...plan, edgeLayout: edgeBuckets.length > 0 ? new HeaderLayout(edgeBuckets) : undefined, edgeOwn: undefined }
  if (edgeQuota === undefined || edgeBuckets.length === 0) return together
  // 'ip' is the client's own key when the edge has no `edge.key` (a route's edge bucket needs the edge layer).
  const ownKey = plan.edgeKey === 'ip' && (edge as EdgePlan).key === undefined ? 'edge' : plan.edgeKey
  if (ownKey === 'edge' && !plan.replace) return together
  const client = edgeBuckets.filter((bucket) => bucket !== edgeQuota)
  return {
    ...plan,
    edgeLayout: client.length > 0 ? new HeaderLayout(client) : undefined,
    edgeOwn: { layout: new HeaderLayout([edgeQuota]), key: ownKey }
  }
}
