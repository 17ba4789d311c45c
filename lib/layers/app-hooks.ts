/**
 * How the app layer's hook is attached: to each route in `onRoute`, after the
 * route's own hooks of its kind, and for routes declared before the plugin, in a
 * global hook.
 */
import type { FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import type { AppHookName } from '../types/options.js'
import { createAppHook, type AppHookContext, type Hook } from './app.js'
import { routeConfigReader } from './route-config.js'
import type { RouteSettings } from './routes.js'

/** `hook` in the signature of hooks of kind `name`: preParsing hooks take and pass on the payload stream. */
export function hookOfKind (name: AppHookName, hook: Hook): Hook | PreParsingHook {
  if (name !== 'preParsing') return hook
  return function tollgateAppPreParsing (request, reply, payload, done) {
    hook(request, reply, (error) => { done(error ?? null, payload) })
  }
}

type PreParsingHook = (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (error: Error | null, payload?: unknown) => void) => void

/** Appends `hook` to the route's own hooks of kind `app.hook`, so that it runs after them. */
export function attachAppHook (routeOptions: RouteOptions, name: AppHookName, hook: Hook): void {
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
export function createUnseenRouteHook (context: AppHookContext): Hook {
  const { routes } = context
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
    if (hook === undefined) hooks.set(route, hook = createAppHook(context, route))
    hook(request, reply, done)
  }
}
