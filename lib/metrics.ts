/**
 * `fastify-tollgate/metrics`: Prometheus metrics of the limiter, with `prom-client`
 * (an optional peer dependency: install it to use this entry point).
 *
 * ```ts
 * import { register } from 'prom-client'
 * import { tollgateMetrics } from 'fastify-tollgate/metrics'
 * tollgateMetrics()            // on prom-client's global registry
 * app.get('/metrics', { config: { rateLimit: false } }, async (_, reply) => reply.type(register.contentType).send(await register.metrics()))
 * ```
 *
 * It subscribes to the plugin's diagnostics channels (diagnostics.ts), so every
 * registration of the plugin in the process is counted, whenever it was made.
 * Label values are bounded: layers, outcomes and the configured tiers, routes by
 * their pattern (at most `maxRoutes`, then `other`), stores by their prefix.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { Counter, Gauge, Histogram, register, type Registry } from 'prom-client'
import { DECISION_CHANNEL, STORE_CHANNEL, type DecisionMessage, type StoreMessage } from './diagnostics.js'
import { checkFunction, checkInteger, checkKnownKeys, checkObject, expected, failOption } from './validate.js'

export interface TollgateMetricsOptions {
  /** Where the metrics are registered. Default: prom-client's global `register`. */
  registry?: Registry | undefined
  /** Prepended to every metric name. Default `'tollgate_'`. */
  prefix?: string | undefined
  /** Most distinct `route` label values; the routes past it count as `other`. Default 100. */
  maxRoutes?: number | undefined
  /** Upper bounds of the store latency histogram's buckets, in seconds, ascending. Default 0.0001 s to 0.5 s. */
  latencyBuckets?: number[] | undefined
}

export interface TollgateMetrics {
  /** Stops counting and removes the metrics from the registry. */
  close (): void
}

/** The `route` label of requests no route matched (404s). */
export const UNMATCHED_ROUTE = 'unmatched'
/** The `route` label of the routes past `maxRoutes`. */
export const OTHER_ROUTE = 'other'

const DEFAULT_LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5]
const OPTION_KEYS = ['registry', 'prefix', 'maxRoutes', 'latencyBuckets']

function checkBuckets (value: unknown): number[] {
  const path = 'latencyBuckets'
  if (!Array.isArray(value) || value.length === 0 || value.length > 50) expected(failOption, path, 'an array of 1 to 50 numbers', value)
  const buckets = [...value as unknown[]]
  buckets.forEach((bound, i) => {
    if (typeof bound !== 'number' || !Number.isFinite(bound) || bound <= 0 || (i > 0 && bound <= (buckets[i - 1] as number))) {
      expected(failOption, `${path}[${i}]`, 'a finite number > 0, above the one before', bound)
    }
  })
  return buckets as number[]
}

/**
 * Registers the limiter's metrics and counts every decision and store change from
 * now on: `<prefix>decisions_total{layer,tier,route,outcome}`,
 * `<prefix>penalties_started_total{layer}`, `<prefix>store_duration_seconds{layer}`,
 * `<prefix>store_degraded{store,prefix}` and `<prefix>live_replicas{store,prefix}`.
 * Throws `TOLLGATE_INVALID_OPTION` for a bad option, and prom-client's error when
 * the registry already holds a metric of one of those names.
 */
export function tollgateMetrics (options: TollgateMetricsOptions = {}): TollgateMetrics {
  const given = checkObject(failOption, 'tollgateMetrics', options)
  checkKnownKeys(failOption, 'tollgateMetrics', given, OPTION_KEYS)
  const registry = (given.registry ?? register) as Registry
  if (typeof registry !== 'object' || registry === null) expected(failOption, 'registry', 'a prom-client Registry', registry)
  checkFunction(failOption, 'registry.registerMetric', (registry as { registerMetric?: unknown }).registerMetric)
  const prefix = given.prefix ?? 'tollgate_'
  if (typeof prefix !== 'string' || !/^[a-zA-Z_:][a-zA-Z0-9_:]*$|^$/.test(prefix)) expected(failOption, 'prefix', 'a Prometheus metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)', prefix)
  const maxRoutes = checkInteger(failOption, 'maxRoutes', given.maxRoutes ?? 100, 1, 10_000)
  const latencyBuckets = given.latencyBuckets === undefined ? DEFAULT_LATENCY_BUCKETS : checkBuckets(given.latencyBuckets)

  const registers = [registry]
  const decisions = new Counter({
    name: `${prefix}decisions_total`,
    help: 'Rate-limit decisions, by layer, tier, route pattern and outcome (allowed, near-limit, refused, would-refuse, unavailable)',
    labelNames: ['layer', 'tier', 'route', 'outcome'] as const,
    registers
  })
  const penalties = new Counter({
    name: `${prefix}penalties_started_total`,
    help: 'Penalties started (a client refused `after` times within the window), by layer',
    labelNames: ['layer'] as const,
    registers
  })
  const latency = new Histogram({
    name: `${prefix}store_duration_seconds`,
    help: 'Time a layer waited for its store to decide, in seconds',
    labelNames: ['layer'] as const,
    buckets: latencyBuckets,
    registers
  })
  const degraded = new Gauge({
    name: `${prefix}store_degraded`,
    help: '1 while a shared store cannot be used and decisions follow failMode (or, for the settle edge, this replica\'s share), else 0',
    labelNames: ['store', 'prefix'] as const,
    registers
  })
  const replicas = new Gauge({
    name: `${prefix}live_replicas`,
    help: 'Live replicas as the Redis store\'s heartbeat last counted them',
    labelNames: ['store', 'prefix'] as const,
    registers
  })

  const routes = new Set<string>()
  const routeLabel = (route: string | undefined): string => {
    if (route === undefined) return UNMATCHED_ROUTE
    if (routes.has(route)) return route
    if (routes.size >= maxRoutes) return OTHER_ROUTE
    routes.add(route)
    return route
  }
  const onDecision = (message: unknown): void => {
    const decision = message as DecisionMessage
    decisions.inc({ layer: decision.layer, tier: decision.tier ?? '', route: routeLabel(decision.route), outcome: decision.outcome })
    latency.observe({ layer: decision.layer }, decision.storeMs / 1000)
    if (decision.penalty?.state === 'started') penalties.inc({ layer: decision.layer })
  }
  // Stores heard of: the first heartbeat of one never degraded shows it at 0.
  const stores = new Set<string>()
  const onStore = (message: unknown): void => {
    const { store, prefix: storePrefix, event, liveReplicas } = message as StoreMessage
    const labels = { store, prefix: storePrefix }
    const known = stores.has(`${store}\n${storePrefix}`)
    stores.add(`${store}\n${storePrefix}`)
    if (event === 'degraded') degraded.set(labels, 1)
    else if (event === 'restored' || !known) degraded.set(labels, 0)
    if (store === 'redis') replicas.set(labels, liveReplicas)
  }
  subscribe(DECISION_CHANNEL, onDecision)
  subscribe(STORE_CHANNEL, onStore)
  return {
    close () {
      unsubscribe(DECISION_CHANNEL, onDecision)
      unsubscribe(STORE_CHANNEL, onStore)
      for (const metric of [decisions, penalties, latency, degraded, replicas]) {
        registry.removeSingleMetric((metric as unknown as { name: string }).name)
      }
    }
  }
}
