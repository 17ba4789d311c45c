/**
 * The names of a route, each for one use:
 * - `routeName`: the route as declared, `POST /export` (`GET,HEAD /items` for
 *   several methods), in logs and errors;
 * - `routeBucket`: its own buckets' name, `route:POST /export` (HEAD as GET, no
 *   trailing slash, constraints appended), in keys and `fastify.tollgate` calls;
 * - `requestRoute`: the route a request matched, `GET /users/:id` (HEAD as GET),
 *   in decision messages and metrics.
 */
import type { FastifyRequest, RouteOptions } from 'fastify'

/** What every route bucket's name starts with. */
const ROUTE_BUCKET = 'route:'

/** `POST /export` from `route:POST /export`: the route a bucket name names, as a user writes it. */
export const routeOfBucket = (bucket: string): string => bucket.slice(ROUTE_BUCKET.length)

/** A HEAD request is a GET without the body: it counts as GET. */
const asGet = (method: string): string => method === 'HEAD' ? 'GET' : method

/** `POST /export`, or `GET,HEAD /items` for a route with several methods. */
export function routeName (routeOptions: Pick<RouteOptions, 'method' | 'url'>): string {
  const method = Array.isArray(routeOptions.method) ? routeOptions.method.join(',') : routeOptions.method
  return `${method} ${routeOptions.url}`
}

/**
 * `route:GET /report`, the name of a route's own bucket: one per route, and the
 * same for every way Fastify serves that route.
 * - HEAD counts as GET, and a route that serves GET is named after GET alone,
 *   whatever its other methods: Fastify answers HEAD with the GET route's handler
 *   (its automatic HEAD route, declared with the GET route's url, config and
 *   constraints), so `HEAD /report` spends the quota of the route serving
 *   `GET /report`, be it `GET` or `['GET', 'POST']`. An explicit HEAD route with a
 *   handler of its own spends that quota too, under its own `rateLimit` config: a
 *   HEAD is a GET without the body, and must not be a way around GET's quota
 *   (give both routes the same quota, or exempt the HEAD route). Other routes are
 *   named by their methods: `route:POST,PUT /items`.
 * - Trailing slashes are dropped (`/api/` is `/api`): a route `/` in a plugin with
 *   a prefix is served at both `/api` and `/api/`, and Fastify gives the second
 *   HEAD route an `onRoute` of its own.
 * - The route's constraints (`version`, `host`, custom ones), when it has any,
 *   are appended as `[host=api.example.com version=2.0.0]` (names sorted, values
 *   as `String()` gives them), so that routes at one URL keep their own quotas.
 *   A route declared before the plugin is named at its first request, where
 *   Fastify does not tell its constraints: such routes at one URL share one bucket.
 */
export function routeBucket (routeOptions: Pick<RouteOptions, 'method' | 'url'> & { constraints?: unknown }): string {
  const methods = (Array.isArray(routeOptions.method) ? routeOptions.method : [routeOptions.method]).map(asGet)
  const named = methods.includes('GET') ? 'GET' : [...new Set(methods)].join(',')
  const url = routeOptions.url.replace(/\/+$/, '') || '/'
  return `${ROUTE_BUCKET}${named} ${url}${constraintsSuffix(routeOptions.constraints)}`
}

/** ` [host=api.example.com version=2.0.0]`, or `''` for a route without constraints. */
function constraintsSuffix (constraints: unknown): string {
  if (typeof constraints !== 'object' || constraints === null) return ''
  const entries = Object.entries(constraints).filter(([, value]) => value !== undefined)
  if (entries.length === 0) return ''
  return ` [${entries.map(([name, value]) => `${name}=${String(value)}`).sort().join(' ')}]`
}

/** `POST /export` → `route:POST /export`, named as `routeBucket` names a route (HEAD as GET, no trailing slash). */
export function routeBucketOf (route: string): string {
  const match = /^(\S+) (\S+)(.*)$/.exec(route)
  if (match === null) return `${ROUTE_BUCKET}${route}`
  const [, methods, url, constraints] = match as unknown as [string, string, string, string]
  return routeBucket({ method: methods.split(','), url }) + constraints
}

/** The request's route as `DecisionMessage.route` names it; HEAD as GET, the route that answers it unless one of its own is declared. */
export function requestRoute (request: FastifyRequest): string | undefined {
  if (request.is404) return undefined
  return `${asGet(request.method)} ${request.routeOptions.url as string}`
}
