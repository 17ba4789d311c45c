/**
 * The plugin: options → hooks. The edge layer is a global `onRequest` hook; the
 * app layer is attached to each route in `onRoute` (and, for routes declared
 * before the plugin loaded, run by a global hook); the store closes with the app.
 */
import type { FastifyInstance, FastifyPluginAsync, preHandlerHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { performance } from 'node:perf_hooks'
import { allowTest } from './allow-list.js'
import { appKeys, attachAppHook, createAppHook, createUnseenRouteHook, hookOfKind } from './app.js'
import { report, type Step } from './decide.js'
import { createEdgeHook } from './edge.js'
import { HeaderLayout, namedPolicy } from './headers.js'
import { bucketKey } from './keys.js'
import { ofClientAddress, memoize } from './key-cache.js'
import { RouteTable } from './routes.js'
import { checkOptions, share, type LimitDecision, type Settings, type TollgateOptions } from './options.js'
import { checkNumber, checkPolicy, expected, failOption } from './validate.js'
import { claimStore, trustProxyOption, Warnings } from './warnings.js'
import type { BucketPolicy } from './bucket.js'

/** `fastify.tollgate`: consume from a bucket by hand, for work that is not an HTTP route. */
export interface TollgateDecorator {
  /**
   * Takes `cost` tokens (default 1) from the bucket named `key` with `policy`
   * (scaled by the store's quota share, like every other policy; a cost above the
   * share but within `policy` passes on a full share and overdraws it, see
   * `BucketRequest.overdraft`). Never throws for a refusal: read `allowed` and `retryAfterMs`.
   */
  consume (key: string, policy: BucketPolicy, cost?: number): Promise<LimitDecision>
}

declare module 'fastify' {
  interface FastifyInstance {
    tollgate: TollgateDecorator
  }
}

function decorator (settings: Settings): TollgateDecorator {
  const quotaShare = settings.store.quotaShare ?? 1
  return {
    async consume (key, policy, cost = 1) {
      if (typeof key !== 'string' || key === '') expected(failOption, 'key', 'a non-empty string', key)
      const whole = checkPolicy(failOption, 'policy', policy)
      const scaled = share(failOption, 'policy', whole, quotaShare)
      checkNumber(failOption, 'cost', cost, 0)
      const step: Step = {
        layer: 'manual',
        buckets: [{ key: bucketKey('manual', key, 'manual'), policy: scaled, cost, overdraft: quotaShare < 1 && cost <= whole.capacity }],
        layout: new HeaderLayout([namedPolicy('manual', scaled)]),
        tier: undefined
      }
      return report(step, await settings.store.consume(step.buckets))
    }
  }
}

// async: a validation error rejects register() instead of escaping avvio.
const tollgate: FastifyPluginAsync<TollgateOptions> = async (fastify: FastifyInstance, options) => {
  const settings = checkOptions(options)
  const { edge, app } = settings
  const routeErrors: Error[] = []

  settings.store.useLogger?.(fastify.log)
  const trustProxy = trustProxyOption(fastify)
  const warnings = new Warnings(fastify.log, settings.warnings, trustProxy)
  // Without trustProxy, request.ip is the connection's address: its keys are kept per connection.
  const perConnection = trustProxy === undefined || trustProxy === false
  const keyspace = settings.store.keyspace ?? { owner: settings.store, prefix: '' }
  const claim = claimStore(keyspace.owner, keyspace.prefix)
  if (claim.shared) warnings.warn('TOLLGATE_SHARED_STORE', { prefix: keyspace.prefix })
  const keys = appKeys(edge?.ipv6Subnet ?? 64, perConnection)
  fastify.decorate('tollgate', decorator(settings))
  const routes = new RouteTable(settings, warnings)
  const allowed = settings.allowList === undefined
    ? undefined
    : allowTest(settings.allowList, settings.allowList.address === undefined ? undefined : ofClientAddress(memoize(settings.allowList.address), perConnection), fastify.log, () => performance.now())
  if (edge !== undefined) fastify.addHook('onRequest', createEdgeHook(settings, edge, routes, warnings, perConnection, allowed))
  // Routes already in the router were declared before the plugin loaded, unseen by onRoute:
  // a global hook runs the app layer for them. Fastify prints an empty router as
  // `(empty tree)`; any other text (another version's) adds the hook, the safe side.
  if (app !== undefined && fastify.printRoutes() !== '(empty tree)') {
    fastify.addHook(app.hook as 'preHandler', hookOfKind(app.hook, createUnseenRouteHook(settings, app, keys, routes, warnings, allowed)) as preHandlerHookHandler)
  }
  fastify.addHook('onRoute', (routeOptions) => {
    try {
      const route = routes.add(routeOptions)
      if (route !== false && route.app && app !== undefined) {
        attachAppHook(routeOptions, app, createAppHook(settings, app, route, keys, warnings, allowed))
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
    await settings.store.close()
  })
}

export default fp(tollgate, { fastify: '5.x', name: 'fastify-tollgate' })
