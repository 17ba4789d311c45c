/**
 * A request's route config (`request.routeOptions.config`) without building
 * `routeOptions`: Fastify's getter makes an object of a dozen fields on every call
 * (about 600 instructions, near 1% of a request). The route's context holds the same
 * config object under a symbol of Fastify's; it is found at the first request and
 * checked against the public getter. If it is not there or not the same object
 * (another Fastify version), the public getter is used from then on.
 */
import type { FastifyRequest } from 'fastify'

type RouteConfig = FastifyRequest['routeOptions']['config']

/** Where Fastify 5 keeps a request's route context (`Symbol('fastify.context')`). */
const CONTEXT_DESCRIPTION = 'fastify.context'

/** The symbol under which `request` holds its route context, if that context's config is the public one. */
function findContextKey (request: FastifyRequest): symbol | null {
  const key = Object.getOwnPropertySymbols(request).find((symbol) => symbol.description === CONTEXT_DESCRIPTION)
  if (key === undefined) return null
  const context = (request as unknown as Record<symbol, { config?: unknown } | null | undefined>)[key]
  return typeof context === 'object' && context !== null && context.config === request.routeOptions.config ? key : null
}

/** A reader of route configs for one registration. */
export function routeConfigReader (): (request: FastifyRequest) => RouteConfig {
  // undefined: not looked for yet; null: not found (the public getter is used).
  let contextKey: symbol | null | undefined
  return (request) => {
    if (contextKey === undefined) contextKey = findContextKey(request)
    if (contextKey === null) return request.routeOptions.config
    return (request as unknown as { [key: symbol]: { config: RouteConfig } })[contextKey]!.config
  }
}
