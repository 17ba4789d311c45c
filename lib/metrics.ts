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
 * It subscribes to the plugin's decision channel (diagnostics.ts), so every
 * registration of the plugin in the process is counted, whenever it was made;
 * the store gauges read each open store's health as it is when collected.
 * Label values are bounded: layers, outcomes and the configured tiers, routes by
 * their pattern (at most `maxRoutes`, then `other`), stores by their prefix.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { Counter, Gauge, Histogram, register, type OpenMetricsContentType, type PrometheusContentType, type Registry } from 'prom-client'
import { DECISION_CHANNEL, storeHealth, type DecisionMessage, type StoreMessage } from './output/diagnostics.js'
import { inRegistration } from './output/key-format.js'
import { protections, type ProtectionState } from './output/protection-state.js'
import { checkFunction, checkInteger, checkKnownKeys, checkObject, expected, failOption } from './config/check.js'

export interface TollgateMetricsOptions {
  /** Where the metrics are registered (Prometheus or OpenMetrics). Default: prom-client's global `register`. */
  registry?: Registry<PrometheusContentType> | Registry<OpenMetricsContentType> | undefined
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

const DECISION_LABELS = ['layer', 'tier', 'route', 'outcome'] as const
/** The metrics' names, after the prefix. */
const METRICS = ['decisions_total', 'penalties_started_total', 'store_duration_seconds', 'store_degraded', 'live_replicas', 'protect_limit', 'protect_in_flight', 'protect_overload', 'protect_signal_ratio']
type DecisionLabel = typeof DECISION_LABELS[number]
/** The decisions counted since the last collect, by labels. */
type DecisionCounts = Map<string, { labels: Record<DecisionLabel, string>, value: number }>
const DEFAULT_LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5]
const OPTION_KEYS = ['registry', 'prefix', 'maxRoutes', 'latencyBuckets']

function checkBuckets (value: unknown): number[] {
  const path = 'tollgateMetrics.latencyBuckets'
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
 * Registers the limiter's metrics and counts every decision from now on:
 * `<prefix>decisions_total{layer,tier,route,outcome}`,
 * `<prefix>penalties_started_total{layer}`, `<prefix>store_duration_seconds{layer}`;
 * `<prefix>store_degraded{store,prefix}` and `<prefix>live_replicas{store,prefix}`
 * show each open shared store's health at the scrape; `<prefix>protect_*{registration}`
 * each capacity protection's state. Throws
 * `TOLLGATE_INVALID_OPTION` for a bad option, or for a registry that already holds
 * one of those names (nothing is registered then).
 */
export function tollgateMetrics (options: TollgateMetricsOptions = {}): TollgateMetrics {
  const { registry, prefix, names, maxRoutes, latencyBuckets } = checkOptions(options)
  const registers = [registry]
  // Decisions are counted here and handed to prom-client when it collects (at a
  // scrape): its inc() with labels cost about 1 µs per decision, this a Map lookup.
  const decisionCounts: DecisionCounts = new Map()
  const { decisions, penalties, latency } = decisionMetrics(prefix, registers, latencyBuckets, decisionCounts)
  const { degraded, replicas } = storeGauges(prefix, registers)
  const onDecision = decisionCounter(maxRoutes, decisionCounts, latency, penalties)
  subscribe(DECISION_CHANNEL, onDecision)
  const ours = [decisions, penalties, latency, degraded, replicas, ...protectGauges(prefix, registers)]
  return {
    close () {
      unsubscribe(DECISION_CHANNEL, onDecision)
      // Only ours: a second close() must not remove the metrics of a later tollgateMetrics() on this registry.
      names.forEach((name, i) => { if (registry.getSingleMetric(name) === ours[i]) registry.removeSingleMetric(name) })
    }
  }
}

/** `options`, checked (or `TOLLGATE_INVALID_OPTION`), with the metrics' names, none of them in the registry yet. */
function checkOptions (options: TollgateMetricsOptions): { registry: Registry, prefix: string, names: string[], maxRoutes: number, latencyBuckets: number[] } {
  const given = checkObject(failOption, 'tollgateMetrics', options)
  checkKnownKeys(failOption, 'tollgateMetrics', given, OPTION_KEYS)
  const registry = (given.registry ?? register) as Registry
  if (typeof registry !== 'object' || registry === null) expected(failOption, 'tollgateMetrics.registry', 'a prom-client Registry', registry)
  checkFunction(failOption, 'tollgateMetrics.registry.registerMetric', (registry as { registerMetric?: unknown }).registerMetric)
  const prefix = given.prefix ?? 'tollgate_'
  if (typeof prefix !== 'string' || !/^[a-zA-Z_:][a-zA-Z0-9_:]*$|^$/.test(prefix)) {
    expected(failOption, 'tollgateMetrics.prefix', 'a Prometheus metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)', prefix)
  }
  const names = METRICS.map((metric) => `${prefix}${metric}`)
  const taken = names.find((name) => registry.getSingleMetric(name) !== undefined)
  if (taken !== undefined) {
    failOption(`Expected a registry without \`${taken}\`: tollgateMetrics() was called on it already (close() the first, or pass another \`registry\` or \`prefix\`)`)
  }
  const maxRoutes = checkInteger(failOption, 'tollgateMetrics.maxRoutes', given.maxRoutes ?? 100, 1, 10_000)
  const latencyBuckets = given.latencyBuckets === undefined ? DEFAULT_LATENCY_BUCKETS : checkBuckets(given.latencyBuckets)
  return { registry, prefix, names, maxRoutes, latencyBuckets }
}

/** The decision metrics, registered: the decisions (handed over from `decisionCounts` at collect), the penalties started, the store latency. */
function decisionMetrics (prefix: string, registers: Registry[], latencyBuckets: number[], decisionCounts: DecisionCounts) {
  const decisions = new Counter({
    name: `${prefix}decisions_total`,
    help: 'Rate-limit decisions, by layer, tier, route pattern and outcome (allowed, near-limit, refused, would-refuse, unavailable)',
    labelNames: DECISION_LABELS,
    registers,
    collect () {
      this.reset()
      for (const { labels, value } of decisionCounts.values()) this.inc(labels, value)
    }
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
  return { decisions, penalties, latency }
}

/** The store gauges, registered: set when prom-client collects, from each open store's last health message, by labels. */
function storeGauges (prefix: string, registers: Registry[]): { degraded: Gauge<'store' | 'prefix'>, replicas: Gauge<'store' | 'prefix'> } {
  const degraded = new Gauge({
    name: `${prefix}store_degraded`,
    help: '1 while a shared store of these labels cannot be used and decisions follow failMode (or, for the settle edge, this replica\'s share), else 0',
    labelNames: ['store', 'prefix'] as const,
    registers,
    collect () { fromStores(this, (messages) => messages.some((message) => message.degraded) ? 1 : 0) }
  })
  const replicas = new Gauge({
    name: `${prefix}live_replicas`,
    help: 'Live replicas as the Redis store\'s heartbeat last counted them',
    labelNames: ['store', 'prefix'] as const,
    registers,
    collect () {
      fromStores(this, (messages) => {
        const counted = messages.filter((message) => message.store === 'redis').map((message) => message.liveReplicas)
        return counted.length === 0 ? undefined : Math.max(...counted)
      })
    }
  })
  return { degraded, replicas }
}

/**
 * Capacity protection's gauges, registered, set when prom-client collects from
 * each open protection (label `registration`: its name, `''` for the one without):
 * the limit, the requests in flight, the smoothed overload, and each signal's
 * last reading over its target (label `signal`).
 */
function protectGauges (prefix: string, registers: Registry[]): Array<Gauge<string>> {
  const gauge = (name: string, help: string, value: (state: ProtectionState) => number, combine: Combine): Gauge<'registration'> => new Gauge({
    name: `${prefix}${name}`,
    help,
    labelNames: ['registration'] as const,
    registers,
    collect () {
      this.reset()
      for (const [registration, shown] of byRegistration(value, combine)) this.set({ registration }, shown)
    }
  })
  const signals = new Gauge({
    name: `${prefix}protect_signal_ratio`,
    help: 'Capacity protection: each health signal\'s last reading over its target (1 = at target), by signal',
    labelNames: ['registration', 'signal'] as const,
    registers,
    collect () {
      this.reset()
      for (const signal of ['gauge', 'latency', 'eventLoopDelay'] as const) {
        for (const [registration, ratio] of byRegistration((state) => state.ratios[signal], Math.max)) this.set({ registration, signal }, ratio)
      }
    }
  })
  return [
    gauge('protect_limit', 'Capacity protection: the limit on requests in flight, before priorities split it (summed over the protections of one name)', (state) => state.limit, sum),
    gauge('protect_in_flight', 'Capacity protection: requests in flight that it admitted', (state) => state.inFlight, sum),
    gauge('protect_overload', 'Capacity protection: the smoothed overload, the largest signal over its target (1 = at target)', (state) => state.overload, Math.max),
    signals
  ]
}

type Combine = (a: number, b: number) => number
const sum: Combine = (a, b) => a + b

/** `value` of each open protection (those without one left out), combined by registration name (`''`: none): protections of one name in several apps or contexts show as one. */
function byRegistration (value: (state: ProtectionState) => number | undefined, combine: Combine): Map<string, number> {
  const shown = new Map<string, number>()
  for (const state of protections()) {
    // An interval that ended without an admission is closed first: an idle replica's state moves on.
    state.refresh()
    const one = value(state)
    if (one === undefined) continue
    const registration = state.registration ?? ''
    const before = shown.get(registration)
    shown.set(registration, before === undefined ? one : combine(before, one))
  }
  return shown
}

/** Sets `gauge`, reset first, to `value` of the open stores' last health messages, grouped by labels (none when `undefined`). */
function fromStores (gauge: Gauge<'store' | 'prefix'>, value: (messages: StoreMessage[]) => number | undefined): void {
  gauge.reset()
  const byLabels = new Map<string, StoreMessage[]>()
  for (const health of storeHealth()) {
    const key = `${health.store}\n${health.prefix}`
    byLabels.set(key, [...byLabels.get(key) ?? [], health])
  }
  for (const messages of byLabels.values()) {
    const shown = value(messages)
    const { store, prefix: storePrefix } = messages[0] as StoreMessage
    if (shown !== undefined) gauge.set({ store, prefix: storePrefix }, shown)
  }
}

/** What counts a decision message: into `decisionCounts`, its store latency and a penalty started; routes past `maxRoutes` as `other`. */
function decisionCounter (maxRoutes: number, decisionCounts: DecisionCounts, latency: Histogram<'layer'>, penalties: Counter<'layer'>): (message: unknown) => void {
  const routes = new Set<string>()
  const routeLabel = (route: string | undefined): string => {
    if (route === undefined) return UNMATCHED_ROUTE
    if (routes.has(route)) return route
    if (routes.size >= maxRoutes) return OTHER_ROUTE
    routes.add(route)
    return route
  }
  // A registration's name before its layer's (`hourly.edge`), as in its keys and headers.
  const layerLabels = new Map<string, { layer: string }>()
  const layerLabel = (layer: string): { layer: string } => {
    let labels = layerLabels.get(layer)
    if (labels === undefined) layerLabels.set(layer, labels = { layer })
    return labels
  }
  return (message: unknown): void => {
    const { tier = '', outcome, storeMs, penalty, route: pattern, registration } = message as DecisionMessage
    const layer = inRegistration(registration, (message as DecisionMessage).layer)
    const route = routeLabel(pattern)
    const key = `${layer}\n${tier}\n${route}\n${outcome}`
    const counted = decisionCounts.get(key)
    if (counted === undefined) decisionCounts.set(key, { labels: { layer, tier, route, outcome }, value: 1 })
    else counted.value++
    latency.observe(layerLabel(layer), storeMs / 1000)
    if (penalty?.state === 'started') penalties.inc(layerLabel(layer))
  }
}
