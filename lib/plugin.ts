/**
 * The plugin: options → plan (config/) → runtime (wire.ts) → hooks (layers/).
 * The edge layer is a global `onRequest` hook; the app layer is attached to each
 * route in `onRoute` (and, for routes declared before the plugin loaded, run by a
 * global hook); the stores close with the app.
 */
import type { FastifyInstance, FastifyPluginAsync, preHandlerHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { performance } from 'node:perf_hooks'
import type { TollgateOptions } from './types/options.js'
import { checkOptions } from './config/options.js'
import type { Plan } from './config/plan.js'
import { isLocalStore } from './config/store.js'
import { tierAboveEdge } from './config/tier-above-edge.js'
import { claimStore, trustProxyOption, Warnings } from './output/warnings.js'
import { allowTest } from './layers/allow-list.js'
import { createAppHook, type AppHookContext } from './layers/app.js'
import { attachAppHook, createUnseenRouteHook, hookOfKind } from './layers/app-hooks.js'
import type { HookContext, Settings } from './layers/context.js'
import { decorator } from './layers/decorator.js'
import { createEdgeHook } from './layers/edge.js'
import { appKeys } from './layers/keys.js'
import type { RouteQuotas } from './layers/manual.js'
import { refusalAnswerer } from './layers/prepared.js'
import { join } from './layers/registrations.js'
import { RouteTable } from './layers/routes.js'
import { wire } from './wire.js'

// async: a validation error rejects register() instead of escaping avvio.
const tollgate: FastifyPluginAsync<TollgateOptions> = async (fastify: FastifyInstance, options) => {
  const plan = checkOptions(options)
  const { group, publish } = join(fastify, plan.name)
  const { settings, close } = wire(plan, { log: fastify.log, group, refusals: refusalAnswerer(fastify) })
  const { edge, app } = settings
  const context = hookContext(fastify, settings)
  const release = startupWarnings(plan, context)
  // A route's own quota by bucket name, for `fastify.tollgate` calls that name it.
  const routeQuotas: RouteQuotas = new Map()
  publish(decorator(context, routeQuotas))
  if (edge !== undefined) fastify.addHook('onRequest', createEdgeHook(context, edge))
  // Capacity protection counts a request in flight until its reply is sent.
  if (settings.protection !== undefined) fastify.addHook('onSend', settings.protection.onSend)
  const appContext: AppHookContext | undefined = app === undefined ? undefined : { ...context, app, keys: appKeys(edge?.ipv6Subnet ?? 64, context.perConnection, app.userId, settings.name) }
  // Routes already in the router were declared before the plugin loaded, unseen by onRoute:
  // a global hook runs the app layer for them. Fastify prints an empty router as
  // `(empty tree)`; any other text (another version's) adds the hook, the safe side.
  const routesBefore = fastify.printRoutes() !== '(empty tree)'
  if (appContext !== undefined && routesBefore) {
    fastify.addHook(appContext.app.hook as 'preHandler', hookOfKind(appContext.app.hook, createUnseenRouteHook(appContext)) as preHandlerHookHandler)
  }
  const routeErrors: Error[] = []
  let routesSeen = 0
  fastify.addHook('onRoute', (routeOptions) => {
    routesSeen++
    try {
      const route = context.routes.add(routeOptions)
      if (route !== false && route.quota !== undefined) routeQuotas.set(route.bucket, route.quota)
      if (route !== false && route.app && appContext !== undefined) {
        attachAppHook(routeOptions, appContext.app.hook, createAppHook(appContext, route))
        if (settings.protection !== undefined) routeOptions.handler = settings.protection.watchHandler(routeOptions.handler)
        const above = context.warnings.armed('TOLLGATE_TIER_ABOVE_EDGE') ? tierAboveEdge(route, appContext.app) : undefined
        if (above !== undefined) context.warnings.warn('TOLLGATE_TIER_ABOVE_EDGE', { ...above })
      }
    } catch (error) {
      // Reported by ready(), wherever the route was declared.
      routeErrors.push(error as Error)
    }
  })
  fastify.addHook('onReady', async () => {
    const [first] = routeErrors
    if (first !== undefined) throw first
    // At the root, the edge still limits 404s; in a context without routes, nothing reaches the hooks.
    const limitsNotFound = edge !== undefined && Object.getPrototypeOf(fastify) === Object.prototype
    if (routesSeen === 0 && !routesBefore && !limitsNotFound) context.warnings.warn('TOLLGATE_NO_ROUTES', { name: plan.name })
    await settings.store.ready?.()
  })
  fastify.addHook('onClose', async () => {
    release()
    await close()
  })
}

/** What the hooks are made with: the settings, the route table, the warnings, the allow-list's test. */
function hookContext (fastify: FastifyInstance, settings: Settings): HookContext {
  const trustProxy = trustProxyOption(fastify)
  const warnings = new Warnings(fastify.log, settings.warnings, trustProxy)
  // Without trustProxy, request.ip is the connection's address: its keys are kept per connection.
  const perConnection = trustProxy === undefined || trustProxy === false
  const allowed = settings.allowList === undefined
    ? undefined
    : allowTest(settings.allowList, { perConnection, log: fastify.log, now: () => performance.now(), lookups: settings.lookups })
  return { settings, routes: new RouteTable(settings, warnings), warnings, perConnection, allowed }
}

/** The warnings due at startup; returns the release of this registration's claim on its store's keys. */
function startupWarnings (plan: Plan, { settings, warnings }: HookContext): () => void {
  const keyspace = settings.store.keyspace ?? { owner: settings.store, prefix: '' }
  // Registrations of other names write other keys: they share a store without sharing buckets.
  const claim = claimStore(keyspace.owner, `${keyspace.prefix}\n${plan.name ?? ''}`)
  if (claim.shared) warnings.warn('TOLLGATE_SHARED_STORE', { prefix: keyspace.prefix })
  if (settings.edge !== undefined && settings.edge.mode !== 'exact' && isLocalStore(plan.store)) warnings.warn('TOLLGATE_EDGE_MODE_LOCAL', { mode: settings.edge.mode })
  return claim.release
}

export default fp(tollgate, { fastify: '5.x', name: 'fastify-tollgate' })
