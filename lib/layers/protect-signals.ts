/**
 * Capacity protection's health signals, each read once per interval as a ratio
 * to its target (1 = at target): the event loop's p99 delay, the handler's mean
 * latency per route (measured by the plugin, from the app layer's admission to
 * its reply, `onSend`), and a gauge of the user's (a pool's waiting count). The largest ratio is
 * the interval's overload (engine/concurrency-limit.ts).
 */
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks'
import type { FastifyBaseLogger } from 'fastify'
import { describe } from '../config/check.js'
import type { ProtectPlan } from '../config/plan.js'
import { isThenable } from './promises.js'

/**
 * One route's handler latency against its target: the mean of the requests that
 * ended during the interval, or, when it is larger, the mean age of those still in
 * flight (a stalled dependency ends nothing, and must not read as healthy).
 */
export class RouteLatency {
  private sumMs = 0
  private count = 0
  private inFlight = 0
  /** The sum of the admission times of the requests in flight. */
  private startedSum = 0

  constructor (readonly targetMs: number) {}

  enter (startedMs: number): void {
    this.inFlight++
    this.startedSum += startedMs
  }

  /** A request admitted at `startedMs` ended at `nowMs`. */
  leave (startedMs: number, nowMs: number): void {
    this.inFlight--
    this.startedSum -= startedMs
    this.sumMs += nowMs - startedMs
    this.count++
  }

  /** The interval's reading over the target (`undefined`: nothing ended and nothing is in flight), and a fresh interval. */
  take (nowMs: number): number | undefined {
    if (this.count === 0 && this.inFlight === 0) return undefined
    const ended = this.count === 0 ? 0 : this.sumMs / this.count
    const age = this.inFlight === 0 ? 0 : nowMs - this.startedSum / this.inFlight
    this.sumMs = 0
    this.count = 0
    return Math.max(ended, age) / this.targetMs
  }
}

/** The last reading of each signal, as a ratio to its target (`undefined`: no reading yet, or none configured). */
export interface SignalRatios {
  eventLoopDelay: number | undefined
  latency: number | undefined
  gauge: number | undefined
}

/** The signals of one registration's protection; `close()` stops the event loop's monitor. */
export class Signals {
  /** The last interval's ratios (what the metrics show). */
  readonly last: SignalRatios = { eventLoopDelay: undefined, latency: undefined, gauge: undefined }
  private readonly routes: RouteLatency[] = []
  private readonly loop: IntervalHistogram | undefined
  private gaugeFailed = false

  constructor (private readonly plan: ProtectPlan, private readonly log: FastifyBaseLogger) {
    if (plan.eventLoopDelayMs !== undefined) {
      this.loop = monitorEventLoopDelay({ resolution: 10 })
      this.loop.enable()
    }
  }

  /** A route's latency, against its own target (`rateLimit.latencyMs`) or the plugin's; `undefined` without a latency signal. */
  route (targetMs: number | undefined): RouteLatency | undefined {
    const target = targetMs ?? this.plan.latencyMs
    if (target === undefined) return undefined
    const latency = new RouteLatency(target)
    this.routes.push(latency)
    return latency
  }

  /** The largest ratio this interval, at `nowMs` (0 when no signal had a reading), each signal's kept in `last`. */
  read (nowMs: number): number {
    const { last, plan } = this
    if (this.loop !== undefined) {
      // Nanoseconds; a histogram without a sample reads 0.
      last.eventLoopDelay = this.loop.percentile(99) / 1e6 / (plan.eventLoopDelayMs as number)
      this.loop.reset()
    }
    if (this.routes.length > 0) {
      let latency: number | undefined
      for (const route of this.routes) {
        const ratio = route.take(nowMs)
        if (ratio !== undefined && (latency === undefined || ratio > latency)) latency = ratio
      }
      last.latency = latency
    }
    if (plan.gauge !== undefined) last.gauge = this.gaugeRatio(plan.gauge)
    return Math.max(last.eventLoopDelay ?? 0, last.latency ?? 0, last.gauge ?? 0)
  }

  close (): void {
    this.loop?.disable()
  }

  /** The gauge over its target; a gauge that throws or reads no finite number ≥ 0 has no reading (logged once). */
  private gaugeRatio (gauge: NonNullable<ProtectPlan['gauge']>): number | undefined {
    let value: unknown
    try {
      value = gauge.read()
    } catch (error) {
      this.gaugeFailedOnce(error, 'threw')
      return undefined
    }
    if (isThenable(value)) {
      // Not awaited, but heard: a rejection it holds must not end the process.
      Promise.resolve(value).then(undefined, () => {})
      this.gaugeFailedOnce(undefined, 'returned a promise (it must return a number at once)')
      return undefined
    }
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
      this.gaugeFailedOnce(undefined, `returned ${describe(value)}`)
      return undefined
    }
    return value / gauge.target
  }

  private gaugeFailedOnce (error: unknown, what: string): void {
    if (this.gaugeFailed) return
    this.gaugeFailed = true
    this.log.error({ err: error }, `fastify-tollgate: protect.gauge.read ${what}; the gauge is left out until it reads a finite number ≥ 0 (logged once)`)
  }
}
