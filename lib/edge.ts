/**
 * The edge layer: an `onRequest` hook with one bucket per client IP (or key),
 * run before authentication and body parsing. Every request costs 1.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { runStep, type Done } from './decide.js'
import { bucketKey, clientAddress } from './keys.js'
import type { EdgeSettings, Settings } from './options.js'
import type { Warnings } from './warnings.js'

/** `{key:<digest of the value>}:edge` from `edge.key(request)`, else `{ip:<address>}:edge`. */
export function edgeKey (request: FastifyRequest, edge: EdgeSettings): string {
  if (edge.key !== undefined) {
    let key: unknown
    try {
      key = edge.key(request)
    } catch (error) {
      request.log.error({ err: error }, 'fastify-tollgate: edge.key threw; keyed by client IP')
    }
    if (typeof key === 'number' && Number.isFinite(key)) key = String(key)
    if (typeof key === 'string' && key !== '') return bucketKey('key', edge.keyDigest(key), 'edge')
  }
  return bucketKey('ip', clientAddress(request.ip, edge.ipv6Subnet), 'edge')
}

export function createEdgeHook (settings: Settings, edge: EdgeSettings, warnings: Warnings) {
  const named = [edge.bucket]
  const policy = edge.bucket.policy
  return function tollgateEdge (request: FastifyRequest, reply: FastifyReply, done: Done): void {
    warnings.checkForwarded(request)
    if (request.routeOptions.config?.rateLimit === false) {
      done()
      return
    }
    const buckets = [{ key: edgeKey(request, edge), policy, cost: 1 }]
    runStep(settings, request, reply, { layer: 'edge', buckets, named, tier: undefined }, done)
  }
}
