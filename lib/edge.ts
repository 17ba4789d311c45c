/**
 * The edge layer: an `onRequest` hook with one bucket per client IP (or key),
 * run before authentication and body parsing. Every request costs 1.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { runStep, type Done } from './decide.js'
import { HeaderLayout } from './headers.js'
import { addressKey } from './key-cache.js'
import { routeConfigReader } from './route-config.js'
import type { EdgeSettings, Settings } from './options.js'
import type { Warnings } from './warnings.js'

/** `{key:<digest of the value>}:edge` from `edge.key(request)`, else `{ip:<address>}:edge` from `addressKeyOf`. */
function edgeKey (request: FastifyRequest, edge: EdgeSettings, addressKeyOf: (request: FastifyRequest) => string): string {
  if (edge.key !== undefined) {
    let key: unknown
    try {
      key = edge.key(request)
    } catch (error) {
      request.log.error({ err: error }, 'fastify-tollgate: edge.key threw; keyed by client IP')
    }
    if (typeof key === 'number' && Number.isFinite(key)) key = String(key)
    if (typeof key === 'string' && key !== '') return edge.keyOfValue(key)
  }
  return addressKeyOf(request)
}

/** The edge hook; `perConnection`: request.ip is the connection's address (trustProxy off). */
export function createEdgeHook (settings: Settings, edge: EdgeSettings, warnings: Warnings, perConnection: boolean) {
  const addressKeyOf = addressKey(edge.keyOfAddress, perConnection)
  const configOf = routeConfigReader()
  const layout = new HeaderLayout([edge.bucket])
  const policy = edge.bucket.policy
  return function tollgateEdge (request: FastifyRequest, reply: FastifyReply, done: Done): void {
    warnings.checkForwarded(request)
    if (configOf(request)?.rateLimit === false) {
      done()
      return
    }
    const buckets = [{ key: edgeKey(request, edge, addressKeyOf), policy, cost: 1 }]
    runStep(settings, request, reply, { layer: 'edge', buckets, layout, tier: undefined }, done)
  }
}
