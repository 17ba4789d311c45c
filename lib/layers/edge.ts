/**
 * The edge layer: an `onRequest` hook with one bucket per client IP (or key),
 * and the route's own edge bucket when it has one, run before authentication
 * and body parsing. Every request costs 1 from each.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Done } from './outcome.js'
import { runStep } from './step.js'
import { HeaderLayout, type NamedPolicy } from '../output/headers.js'
import { edgeRouteKey } from '../output/key-format.js'
import { ofClientAddress } from './key-cache.js'
import { routeConfigReader } from './route-config.js'
import { returnedPromise } from './promises.js'
import type { EdgeSettings, HookContext } from './context.js'
import type { RouteSettings } from './routes.js'
import type { BucketRequest } from '../types/store.js'
import { addPenaltyBuckets, stepPenalty } from './penalty.js'

/**
 * `{key:<digest of the value>}:edge` from `edge.key(request)`, else `{ip:<address>}:edge`
 * from `addressKeyOf`. An `edge.key` that returns a promise is keyed by IP (its
 * rejection handled), and `onAsync` is called.
 */
export function edgeKey (request: FastifyRequest, edge: EdgeSettings, addressKeyOf: (request: FastifyRequest) => string, onAsync: () => void): string {
  if (edge.key !== undefined) {
    let key: unknown
    try {
      key = edge.key(request)
    } catch (error) {
      request.log.error({ err: error }, 'fastify-tollgate: edge.key threw; keyed by client IP')
    }
    if (returnedPromise(key)) {
      onAsync()
      key = undefined
    }
    if (typeof key === 'number' && Number.isFinite(key)) key = String(key)
    if (typeof key === 'string' && key !== '') return edge.keyOfValue(key)
  }
  return addressKeyOf(request)
}

/** The edge hook (`onRequest`), for `context.settings.edge`. */
export function createEdgeHook (context: HookContext, edge: EdgeSettings) {
  const { settings, routes, warnings, allowed } = context
  const addressKeyOf = ofClientAddress(edge.keyOfAddress, context.perConnection)
  const configOf = routeConfigReader()
  // For a 404, which has no route: the client's bucket alone (none under edge.global: false).
  const onAsyncKey = (): void => { warnings.warn('TOLLGATE_ASYNC_EDGE_KEY') }
  const notFound = edge.bucket === undefined ? undefined : new HeaderLayout([edge.bucket])
  return function tollgateEdge (request: FastifyRequest, reply: FastifyReply, done: Done): void {
    warnings.checkForwarded(request)
    if (allowed !== undefined && allowed(request)) {
      done()
      return
    }
    const route = routes.of(request, configOf(request))
    if (route instanceof Error) {
      done(route)
      return
    }
    const layout = route === undefined ? notFound : route === false ? undefined : route.edgeLayout
    if (layout === undefined) {
      done()
      return
    }
    const key = edgeKey(request, edge, addressKeyOf, onAsyncKey)
    const buckets: BucketRequest[] = []
    if (edge.bucket !== undefined) buckets.push({ key, policy: edge.bucket.policy, cost: 1 })
    // The route's own bucket (it follows the client's in the layout): the same hash tag as the client's.
    if (layout.buckets.length > buckets.length) {
      buckets.push({ key: edgeRouteKey(key, (route as { bucket: string }).bucket), policy: (layout.buckets[buckets.length] as NamedPolicy).policy, cost: 1 })
    }
    const routed = route as RouteSettings | undefined // not false here: such a route has no layout
    const penalty = edge.penalty === undefined && routed?.penalty === undefined ? undefined : stepPenalty(edge.penalty, routed, key)
    if (penalty !== undefined) addPenaltyBuckets(buckets, penalty)
    runStep(settings, { layer: 'edge', buckets, layout, tier: undefined, penalty, request, reply, done })
  }
}
