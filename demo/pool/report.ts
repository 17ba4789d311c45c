/**
 * The pool scenario's figures: a class's summary row (sent, admitted per
 * second, p50, p99, refusals, pool timeouts), a phase's table (with its column
 * header), the summary, and the per-window series the SVG draws.
 */
import { quantile, type ClassResult, type Counts } from './load.js'
import type { PhaseResult } from './acts.js'

export interface ClassFigures {
  name: string
  sent: number
  admittedPerSecond: number
  p50: number
  p99: number
  tooMany: number
  /** 429s without Retry-After. */
  tooManyBare: number
  shed: number
  /** 503s without Retry-After. */
  shedBare: number
  poolTimeouts: number
  /** Requests with no answer within TIMEOUT_MS. */
  noAnswer: number
  /** Other 5xx and connection errors. */
  otherErrors: number
}

/** How long a class sent, in seconds. */
const activeSeconds = (result: ClassResult, durationMs: number): number =>
  (Math.min(durationMs, result.spec.toMs ?? durationMs) - (result.spec.fromMs ?? 0)) / 1000

export function classFigures (result: ClassResult, durationMs: number): ClassFigures {
  const t = result.total
  return {
    name: result.spec.name,
    sent: t.sent,
    admittedPerSecond: t.ok / activeSeconds(result, durationMs),
    p50: quantile(t.latencies, 0.5),
    p99: quantile(t.latencies, 0.99),
    tooMany: t.tooMany,
    tooManyBare: t.tooMany - t.tooManyRetryAfter,
    shed: t.shed,
    shedBare: t.shed - t.shedRetryAfter,
    poolTimeouts: t.poolTimeouts,
    noAnswer: t.timeouts,
    otherErrors: t.otherErrors
  }
}

export const phaseFigures = (result: PhaseResult): ClassFigures[] =>
  result.run.classes.map((one) => classFigures(one, result.run.durationMs))

const ms = (value: number): string => Number.isNaN(value) ? '-' : value < 100 ? value.toFixed(1) : value.toFixed(0)

const COLUMNS: Array<[string, number]> = [
  ['class', 22], ['sent', 7], ['ok/s', 7], ['p50 ms', 7], ['p99 ms', 7], ['429', 6], ['503', 6], ['pool t/o', 9], ['no answer', 10], ['other', 6]
]

/** A row of the table: the class's name left-aligned, the figures right-aligned, in the COLUMNS' widths. */
const row = (cells: readonly string[]): string => cells.map((cell, i) => {
  const [, width] = COLUMNS[i] as [string, number]
  return i === 0 ? cell.padEnd(width) : cell.padStart(width)
}).join(' ')

/**
 * A phase's table: its title, both processes' CPU and event loop, then the column
 * header and a row per class (printed after each act, and again in the summary).
 */
export function phaseTable (result: PhaseResult): string[] {
  const seconds = result.run.durationMs / 1000
  const cpu = (cpuMs: number): string => `${(cpuMs / 1000).toFixed(1)} s (${Math.round(cpuMs / seconds / 10)}% of a core)`
  return [
    result.phase.label,
    `  server: CPU ${cpu(result.serverCpuMs)}, event loop p99 ${ms(result.serverEventLoopDelayP99Ms)} ms, ${result.serverPoolTimeouts} pool timeouts; load generator: CPU ${cpu(result.run.cpuMs)}, event loop p99 ${ms(result.run.eventLoopDelayP99Ms)} ms`,
    row(COLUMNS.map(([name], i) => i === 0 ? `  ${name}` : name)),
    ...phaseFigures(result).map((f) =>
      row([`  ${f.name}`, String(f.sent), f.admittedPerSecond.toFixed(0), ms(f.p50), ms(f.p99), String(f.tooMany), String(f.shed), String(f.poolTimeouts), String(f.noAnswer), String(f.otherErrors)]))
  ]
}

/** The summary: each phase's table, one after the other. */
export const summaryTable = (results: readonly PhaseResult[]): string[] => results.flatMap(phaseTable)

/** Per window of a class: admitted per second, p99 (NaN without a 2xx), and errors (pool timeouts and other failures) per second. */
export function windowSeries (result: ClassResult, windowMs: number): { admitted: number[], p99: number[], errors: number[], shed: number[] } {
  const perSecond = (pick: (counts: Counts) => number): number[] => result.windows.map((counts) => pick(counts) * 1000 / windowMs)
  return {
    admitted: perSecond((c) => c.ok),
    p99: result.windows.map((c) => quantile(c.latencies, 0.99)),
    errors: perSecond((c) => c.poolTimeouts + c.otherErrors + c.timeouts),
    shed: perSecond((c) => c.shed)
  }
}
