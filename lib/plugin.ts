/**
 * The plugin: options → hooks. The edge layer is a global `onRequest` hook; the
 * app layer is attached to each route in `onRoute` (and, for routes declared
 * before the plugin loaded, run by a global hook); the store closes with the app.
 */
import type { FastifyInstance, FastifyPluginAsync, preHandlerHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { performance } from 'node:perf_hooks'
import { allowTest } from './layers/allow-list.js'
import { appKeys, attachAppHook, createAppHook, createUnseenRouteHook, hookOfKind } from './layers/app.js'
import { report, type Step } from './layers/step.js'
import { createEdgeHook } from './layers/edge.js'
import { HeaderLayout } from './output/headers.js'
import { ofClientAddress, memoize } from './layers/key-cache.js'
import { overdraftOf, peek, refund, reset, resolve, storeOf, type BucketLevel, type LayerBucket, type PeekDecision, type RouteQuotas } from './layers/manual.js'
import { RouteTable } from './layers/routes.js'
import { checkOptions, type LimitDecision, type Settings, type TollgateOptions } from './config/options.js'
import { checkInteger, checkKnownKeys, checkNumber, checkObject, failOption } from './config/check.js'
import type { ShadowReport } from './output/shadow-report.js'
import { MemoryStore } from './stores/memory.js'
import { SettlingEdge } from './stores/settling.js'
import { Penalties } from './layers/penalty.js'
import { claimStore, trustProxyOption, Warnings } from './output/warnings.js'
import type { BucketPolicy } from './engine/bucket.js'

/**
 * `fastify.tollgate`: a bucket by hand, for work that is not an HTTP route, or
 * from a handler. Each method names a bucket of its own by `key` and `policy`
 * (`policy` scaled by the store's quota share, like every other policy; its keys
 * live apart from the layers'), or a bucket a layer uses by who it belongs to
 * (`LayerBucket`: `{ layer: 'app', user: '42' }`), with that layer's key and policy.
 * Invalid arguments reject with `TOLLGATE_INVALID_OPTION` naming them; `peek`,
 * `refund` and `reset` on a store without them, with `TOLLGATE_STORE_UNSUPPORTED`.
 */
export interface TollgateDecorator {
  /**
   * Takes `cost` tokens (default 1) from the bucket, all or nothing (a cost above
   * this process's share but within the whole quota passes on a full share and
   * overdraws it, see `BucketRequest.overdraft`). Never throws for a refusal: read
   * `allowed` and `retryAfterMs`.
   */
  consume (key: string, policy: BucketPolicy, cost?: number): Promise<LimitDecision>
  consume (bucket: LayerBucket, cost?: number): Promise<LimitDecision>
  /**
   * Reads the bucket without taking: the decision `consume` would make now for
   * `cost` (default 1), with the tokens held now and `fullInMs`. Changes nothing.
   */
  peek (key: string, policy: BucketPolicy, cost?: number): Promise<PeekDecision>
  peek (bucket: LayerBucket, cost?: number): Promise<PeekDecision>
  /**
   * Gives `tokens` (default 1) back, never above capacity; a bucket that is full
   * (absent) stays so. Resolves with the bucket as it is then.
   */
  refund (key: string, policy: BucketPolicy, tokens?: number): Promise<BucketLevel>
  refund (bucket: LayerBucket, tokens?: number): Promise<BucketLevel>
  /** Deletes the bucket: it is full again. */
  reset (key: string | LayerBucket): Promise<void>
  /**
   * With `edge.mode: 'settle'`: settles now what the edge spent and reserved
   * (as the timer does every `edge.settleIntervalMs`), after the settlement on
   * its way if there is one; resolves when the store answered, failed, or the
   * settlement was given up on. Otherwise resolves at once.
   */
  settle (): Promise<void>
  /**
   * In shadow mode: the clients and tiers that would have been refused most in the
   * last `shadowReport.minutes`, the `top` clients (default 20) most first. Outside
   * shadow mode: `shadow: false` and empty lists. Throws `TOLLGATE_INVALID_OPTION`
   * for a `top` that is not an integer ≥ 1.
   */
  shadowReport (options?: { top?: number | undefined }): ShadowReport
}

declare module 'fastify' {
  interface FastifyInstance {
    tollgate: TollgateDecorator
  }
}

/** `[policy, amount]` of a call on `target`: a key of its own takes a policy first, a layer's bucket does not. */
function argumentsOf (target: unknown, rest: readonly unknown[]): [unknown, unknown] {
  const [policy, amount] = typeof target === 'string' ? rest : [undefined, rest[0]]
  return [policy, amount === undefined ? 1 : amount]
}

function decorator (settings: Settings, routes: RouteQuotas): TollgateDecorator {
  const m = { settings, quotaShare: settings.store.quotaShare ?? 1, routes, edgeStore: settings.edge?.store ?? settings.store }
  return {
    async consume (target: string | LayerBucket, ...rest: unknown[]) {
      const [policy, cost] = argumentsOf(target, rest)
      const resolved = resolve(m, target, policy)
      const amount = checkNumber(failOption, 'cost', cost, 0)
      const step: Step = {
        layer: resolved.layer,
        buckets: resolved.buckets.map((bucket) => ({ key: bucket.key, policy: bucket.named.policy, cost: amount, overdraft: overdraftOf(m, bucket, amount) })),
        layout: new HeaderLayout(resolved.buckets.map((bucket) => bucket.named)),
        tier: resolved.tier
      }
      return report(step, await storeOf(m, resolved.layer).consume(step.buckets))
    },
    async peek (target: string | LayerBucket, ...rest: unknown[]) {
      const [policy, cost] = argumentsOf(target, rest)
      return peek(m, target, policy, cost)
    },
    async refund (target: string | LayerBucket, ...rest: unknown[]) {
      const [policy, tokens] = argumentsOf(target, rest)
      return refund(m, target, policy, tokens)
    },
    async reset (target) {
      return reset(m, target)
    },
    async settle () {
      if (m.edgeStore instanceof SettlingEdge) await m.edgeStore.settleNow()
    },
    shadowReport (options) {
      const given = checkObject(failOption, 'shadowReport', options ?? {})
      checkKnownKeys(failOption, 'shadowReport', given, ['top'])
      const top = checkInteger(failOption, 'top', given.top ?? 20, 1)
      return settings.shadowCounter?.read(top, true) ?? { shadow: false, minutes: 0, wouldRefuse: 0, clients: [], tiers: [] }
    }
  }
}

// async: a validation error rejects register() instead of escaping avvio.
const tollgate: FastifyPluginAsync<TollgateOptions> = async (fastify: FastifyInstance, options) => {
  const settings = checkOptions(options)
  const { edge, app } = settings
  const routeErrors: Error[] = []

  settings.store.useLogger?.(fastify.log)
  settings.penalties = new Penalties(settings.store, () => fastify.log, settings.store.localClock)
  if (edge !== undefined && edge.store !== settings.store) edge.store.useLogger?.(fastify.log)
  const trustProxy = trustProxyOption(fastify)
  const warnings = new Warnings(fastify.log, settings.warnings, trustProxy)
  // Without trustProxy, request.ip is the connection's address: its keys are kept per connection.
  const perConnection = trustProxy === undefined || trustProxy === false
  const keyspace = settings.store.keyspace ?? { owner: settings.store, prefix: '' }
  const claim = claimStore(keyspace.owner, keyspace.prefix)
  if (claim.shared) warnings.warn('TOLLGATE_SHARED_STORE', { prefix: keyspace.prefix })
  if (edge !== undefined && edge.mode !== 'exact' && settings.store instanceof MemoryStore) warnings.warn('TOLLGATE_EDGE_MODE_LOCAL', { mode: edge.mode })
  const keys = appKeys(edge?.ipv6Subnet ?? 64, perConnection)
  // A route's own quota by bucket name, for `fastify.tollgate` calls that name it.
  const routeQuotas: RouteQuotas = new Map()
  fastify.decorate('tollgate', decorator(settings, routeQuotas))
  const routes = new RouteTable(settings, warnings)
  const allowed = settings.allowList === undefined
    ? undefined
    : allowTest(settings.allowList, settings.allowList.address === undefined ? undefined : ofClientAddress(memoize(settings.allowList.address), perConnection), fastify.log, () => performance.now())
  if (edge !== undefined) fastify.addHook('onRequest', createEdgeHook({ ...settings, store: edge.store }, edge, routes, warnings, perConnection, allowed))
  // Routes already in the router were declared before the plugin loaded, unseen by onRoute:
  // a global hook runs the app layer for them. Fastify prints an empty router as
  // `(empty tree)`; any other text (another version's) adds the hook, the safe side.
  if (app !== undefined && fastify.printRoutes() !== '(empty tree)') {
    fastify.addHook(app.hook as 'preHandler', hookOfKind(app.hook, createUnseenRouteHook(settings, app, keys, routes, warnings, allowed)) as preHandlerHookHandler)
  }
  fastify.addHook('onRoute', (routeOptions) => {
    try {
      const route = routes.add(routeOptions)
      if (route !== false && route.quota !== undefined) routeQuotas.set(route.bucket, route.quota)
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
    settings.penalties?.close()
    // The edge's own store first: it settles what it spent with the shared one.
    if (edge !== undefined && edge.store !== settings.store) await edge.store.close()
    await settings.store.close()
  })
}

export default fp(tollgate, { fastify: '5.x', name: 'fastify-tollgate' })
