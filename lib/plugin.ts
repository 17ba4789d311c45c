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
import { isLocalStore } from './config/store.js'
import { tierAboveEdge } from './config/tier-above-edge.js'
import { claimStore, trustProxyOption, Warnings } from './output/warnings.js'
import { allowTest } from './layers/allow-list.js'
import { createAppHook, type AppHookContext } from './layers/app.js'
import { attachAppHook, createUnseenRouteHook, hookOfKind } from './layers/app-hooks.js'
import { decorator } from './layers/decorator.js'
import { createEdgeHook } from './layers/edge.js'
import { appKeys } from './layers/keys.js'
import type { RouteQuotas } from './layers/manual.js'
import { RouteTable } from './layers/routes.js'
import { wire } from './wire.js'

// async: a validation error rejects register() instead of escaping avvio.
const tollgate: FastifyPluginAsync<TollgateOptions> = async (fastify: FastifyInstance, options) => {
  const plan = checkOptions(options)
  const { settings, close } = wire(plan, fastify.log)
  const { edge, app } = settings
  const routeErrors: Error[] = []
  const trustProxy = trustProxyOption(fastify)
  const warnings = new Warnings(fastify.log, settings.warnings, trustProxy)
  // Without trustProxy, request.ip is the connection's address: its keys are kept per connection.
  const perConnection = trustProxy === undefined || trustProxy === false
  const keyspace = settings.store.keyspace ?? { owner: settings.store, prefix: '' }
  const claim = claimStore(keyspace.owner, keyspace.prefix)
  if (claim.shared) warnings.warn('TOLLGATE_SHARED_STORE', { prefix: keyspace.prefix })
  if (edge !== undefined && edge.mode !== 'exact' && isLocalStore(plan.store)) warnings.warn('TOLLGATE_EDGE_MODE_LOCAL', { mode: edge.mode })
  // A route's own quota by bucket name, for `fastify.tollgate` calls that name it.
  const routeQuotas: RouteQuotas = new Map()
  const routes = new RouteTable(settings, warnings)
  const allowed = settings.allowList === undefined
    ? undefined
    : allowTest(settings.allowList, { perConnection, log: fastify.log, now: () => performance.now(), lookups: settings.lookups })
  const context = { settings, routes, warnings, perConnection, allowed }
  fastify.decorate('tollgate', decorator(context, routeQuotas))
  if (edge !== undefined) fastify.addHook('onRequest', createEdgeHook(context, edge))
  const appContext: AppHookContext | undefined = app === undefined ? undefined : { ...context, app, keys: appKeys(edge?.ipv6Subnet ?? 64, perConnection) }
  // Routes already in the router were declared before the plugin loaded, unseen by onRoute:
  // a global hook runs the app layer for them. Fastify prints an empty router as
  // `(empty tree)`; any other text (another version's) adds the hook, the safe side.
  if (appContext !== undefined && fastify.printRoutes() !== '(empty tree)') {
    fastify.addHook(appContext.app.hook as 'preHandler', hookOfKind(appContext.app.hook, createUnseenRouteHook(appContext)) as preHandlerHookHandler)
  }
  fastify.addHook('onRoute', (routeOptions) => {
    try {
      const route = routes.add(routeOptions)
      if (route !== false && route.quota !== undefined) routeQuotas.set(route.bucket, route.quota)
      if (route !== false && route.app && appContext !== undefined) {
        attachAppHook(routeOptions, appContext.app.hook, createAppHook(appContext, route))
        const above = warnings.armed('TOLLGATE_TIER_ABOVE_EDGE') ? tierAboveEdge(route, appContext.app) : undefined
        if (above !== undefined) warnings.warn('TOLLGATE_TIER_ABOVE_EDGE', { ...above })
      }
    } catch (error) {
      // Reported by ready(), wherever the route was declared.
      routeErrors.push(error as Error)
    }
  })
  fastify.addHook('onReady', async () => {
    const [first] = routeErrors
    if (first !== undefined) throw first
    await settings.store.ready?.()
  })
  fastify.addHook('onClose', async () => {
    claim.release()
    await close()
  })
}

export default fp(tollgate, { fastify: '5.x', name: 'fastify-tollgate' })
