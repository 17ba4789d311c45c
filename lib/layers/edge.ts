/**
 * The edge layer: an `onRequest` hook with one bucket per client IP (or key),
 * and the route's own edge bucket when it has one, run before authentication
 * and body parsing. Every request costs 1 from each.
 *
 * A route's own bucket kept for the client (the default) is taken in one step with
 * the client's, all or nothing. One kept for another identity (`rateLimit.edge.key`,
 * e.g. the client IP under an API-key edge) is taken in a step of its own, first;
 * when the client's step then refuses, its token is given back. Under
 * `rateLimit.replace` the route's bucket is the only one.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Done } from './outcome.js'
import { runStep, type RequestStep } from './step.js'
import { HeaderLayout, type NamedPolicy } from '../output/headers.js'
import { edgeRouteKey } from '../output/key-format.js'
import { ofClientAddress } from './key-cache.js'
import { routeConfigReader } from './route-config.js'
import { unlessAllowed } from './allow-list.js'
import { keyOf, type KeySource } from './client-key.js'
import { storeOf, type EdgeSettings, type HookContext, type Settings } from './context.js'
import type { RouteSettings } from './routes.js'
import type { BucketRequest } from '../types/store.js'
import { addPenaltyBuckets, stepPenalty } from './penalty.js'
import { continueAfter, isThenable } from './promises.js'
import { giveBack } from './registrations.js'

/** What the edge's steps run with. */
interface EdgeContext {
  settings: Settings
  edge: EdgeSettings
  /** The client's key: `edge.key`, else the address. */
  client: KeySource
  /** The route's own key sources, by route (routes with `rateLimit.edge.key` other than `'edge'`). */
  own: WeakMap<RouteSettings, KeySource>
}

/** The edge hook (`onRequest`), for `context.settings.edge`. */
export function createEdgeHook (context: HookContext, edge: EdgeSettings) {
  const { settings, routes, warnings, allowed } = context
  const addressKeyOf = ofClientAddress(edge.keyOfAddress, context.perConnection)
  const client: KeySource = { fn: edge.key, name: 'edge.key', keyOfValue: edge.keyOfValue, addressKeyOf, lookups: settings.lookups }
  const at: EdgeContext = { settings, edge, client, own: new WeakMap() }
  const configOf = routeConfigReader()
  // For a 404, which has no route: the client's bucket alone (none under edge.global: false).
  const notFound = edge.bucket === undefined ? undefined : new HeaderLayout([edge.bucket])
  const limit = (request: FastifyRequest, reply: FastifyReply, done: Done): void => {
    const route = routes.of(request, configOf(request))
    if (route instanceof Error) {
      done(route)
      return
    }
    if (route !== undefined && route !== false && route.edgeOwn !== undefined) {
      takeOwn(at, route, { layer: 'edge', buckets: [], layout: route.edgeOwn.layout, tier: undefined, penalty: undefined, decision: undefined, request, reply, done })
      return
    }
    const layout = route === undefined ? notFound : route === false ? undefined : route.edgeLayout
    if (layout === undefined) {
      done()
      return
    }
    // Not false here: such a route has no layout.
    takeClient(at, route as RouteSettings | undefined, { layer: 'edge', buckets: [], layout, tier: undefined, penalty: undefined, decision: undefined, request, reply, done })
  }
  const guarded = unlessAllowed(allowed, limit)
  return function tollgateEdge (request: FastifyRequest, reply: FastifyReply, done: Done): void {
    warnings.checkForwarded(request)
    guarded(request, reply, done)
  }
}

/** The client's step (`route.edgeLayout`, or a 404's): its key, when it is known, then `fill`. */
function takeClient (at: EdgeContext, route: RouteSettings | undefined, step: RequestStep): void {
  const key = keyOf(step.request, at.client)
  if (isThenable(key)) continueAfter(step, key, (known) => { fill(at, route, step, known) })
  else fill(at, route, step, key)
}

/**
 * The client's buckets under `key` (its own, then the route's when it is kept for
 * the client too), the penalty's, then the step.
 */
function fill (at: EdgeContext, route: RouteSettings | undefined, step: RequestStep, key: string): void {
  const { edge } = at
  const buckets = step.buckets
  if (edge.bucket !== undefined) buckets.push({ key, policy: edge.bucket.policy, cost: 1 })
  // The route's own bucket (it follows the client's in the layout): the same hash tag as the client's.
  if (step.layout.buckets.length > buckets.length) {
    buckets.push({ key: edgeRouteKey(key, (route as RouteSettings).bucket), policy: (step.layout.buckets[buckets.length] as NamedPolicy).policy, cost: 1 })
  }
  // After a step of the route's own, the route's own penalty was that step's.
  const penaltyRoute = route?.edgeOwn === undefined ? route : { bucket: route.bucket, penalty: route.penalty === false ? false as const : undefined }
  if (edge.penalty !== undefined || penaltyRoute?.penalty !== undefined) {
    step.penalty = stepPenalty(edge.penalty, penaltyRoute, key)
    if (step.penalty !== undefined) addPenaltyBuckets(buckets, step.penalty)
  }
  runStep(at.settings, step)
}

/** The route's own step (`route.edgeOwn`), under its own key; then the client's, if the route has one. */
function takeOwn (at: EdgeContext, route: RouteSettings, step: RequestStep): void {
  const own = route.edgeOwn as NonNullable<RouteSettings['edgeOwn']>
  const key = keyOf(step.request, ownSource(at, route, own.key))
  if (isThenable(key)) continueAfter(step, key, (known) => { fillOwn(at, route, step, known) })
  else fillOwn(at, route, step, key)
}

function ownSource (at: EdgeContext, route: RouteSettings, key: NonNullable<RouteSettings['edgeOwn']>['key']): KeySource {
  if (key === 'edge') return at.client
  let source = at.own.get(route)
  if (source === undefined) {
    source = { ...at.client, fn: key === 'ip' ? undefined : key, name: 'rateLimit.edge.key' }
    at.own.set(route, source)
  }
  return source
}

/** The route's bucket under `key` and its penalty, then the step; the client's step after it, if any. */
function fillOwn (at: EdgeContext, route: RouteSettings, step: RequestStep, key: string): void {
  const bucket: BucketRequest = { key: edgeRouteKey(key, route.bucket), policy: (step.layout.buckets[0] as NamedPolicy).policy, cost: 1 }
  step.buckets.push(bucket)
  // Alone (replacing the client's), the layer's penalty too; else the route's own only.
  const penalty = stepPenalty(route.edgeLayout === undefined ? at.edge.penalty : undefined, route, key)
  if (penalty !== undefined) {
    step.penalty = penalty
    addPenaltyBuckets(step.buckets, penalty)
  }
  const { edgeLayout } = route
  if (edgeLayout !== undefined) {
    const { request, reply, done } = step
    const first = { request, done }
    step.done = (error) => {
      if (error !== undefined) {
        done(error)
        return
      }
      takeClient(at, route, { layer: 'edge', buckets: [], layout: edgeLayout, tier: undefined, penalty: undefined, decision: undefined, request, reply, done: giveBackOnRefusal(at, first, bucket) })
    }
  }
  runStep(at.settings, step)
}

/**
 * The request's `done`, after giving `bucket`'s token back when the client's step
 * ends in a refusal (or a store failure): a request refused at the edge spends
 * nothing there. A store without `refund` keeps it spent.
 */
function giveBackOnRefusal (at: EdgeContext, { request, done }: Pick<RequestStep, 'request' | 'done'>, bucket: BucketRequest): Done {
  return (error) => {
    if (error !== undefined) giveBack(storeOf(at.settings, 'edge'), bucket, request.log)
    done(error)
  }
}
