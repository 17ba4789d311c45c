/** The `protect` option (capacity protection), checked into a `ProtectPlan`. */
import { checkFunction, checkInteger, checkKnownKeys, checkObject, expected, failOption } from './check.js'
import type { AppPlan, ProtectPlan } from './plan.js'
import { keysOf, PLUGIN_OPTIONS } from './rows.js'

const PROTECT_KEYS = keysOf(PLUGIN_OPTIONS, 'protect')
const GAUGE_KEYS = ['read', 'target']
/** The longest signal target in ms: an hour. */
const MAX_TARGET_MS = 3_600_000

/** A target: a finite number > 0, at most `max`. */
function checkTarget (path: string, value: unknown, max: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > max) expected(failOption, path, `a number > 0 and ≤ ${max}`, value)
  return value
}

/** The tiers highest first by default: the others in the order given, then `default`, then `anonymous`. */
function defaultPriorities (tiers: readonly string[]): string[] {
  const others = tiers.filter((tier) => tier !== 'default' && tier !== 'anonymous')
  return [...others, 'default', ...(tiers.includes('anonymous') ? ['anonymous'] : [])]
}

function checkPriorities (value: unknown, tiers: readonly string[]): readonly string[] {
  if (value === undefined) return defaultPriorities(tiers)
  const path = 'protect.priorities'
  if (!Array.isArray(value)) expected(failOption, path, 'an array of tier names, highest priority first', value)
  const given = value as unknown[]
  given.forEach((tier, i) => {
    if (typeof tier !== 'string' || !tiers.includes(tier)) expected(failOption, `${path}[${i}]`, `a tier of \`app.tiers\` (${tiers.map((t) => `'${t}'`).join(', ')})`, tier)
    if (given.indexOf(tier) !== i) expected(failOption, `${path}[${i}]`, 'each tier once', tier)
  })
  const missing = tiers.filter((tier) => !given.includes(tier))
  if (missing.length > 0) failOption(`Expected \`${path}\` to name every tier of \`app.tiers\`, highest priority first; missing: ${missing.map((t) => `'${t}'`).join(', ')}`)
  return given as string[]
}

function checkGauge (value: unknown): ProtectPlan['gauge'] {
  if (value === undefined) return undefined
  const gauge = checkObject(failOption, 'protect.gauge', value)
  checkKnownKeys(failOption, 'protect.gauge', gauge, GAUGE_KEYS)
  return {
    read: checkFunction<() => unknown>(failOption, 'protect.gauge.read', gauge.read),
    target: checkTarget('protect.gauge.target', gauge.target, Number.MAX_SAFE_INTEGER)
  }
}

/** `protect` (`undefined` or `false`: none); it sheds by the app layer's tiers, so it needs `app`. */
export function checkProtect (value: unknown, app: AppPlan | undefined): ProtectPlan | undefined {
  if (value === undefined || value === false) return undefined
  const fail = failOption
  const given = checkObject(fail, 'protect', value)
  checkKnownKeys(fail, 'protect', given, PROTECT_KEYS)
  if (app === undefined) return fail('Expected `app` with `protect`: capacity protection runs in the app layer and sheds by its tiers')
  const eventLoopDelayMs = given.eventLoopDelayMs === undefined ? undefined : checkTarget('protect.eventLoopDelayMs', given.eventLoopDelayMs, MAX_TARGET_MS)
  const latencyMs = given.latencyMs === undefined ? undefined : checkTarget('protect.latencyMs', given.latencyMs, MAX_TARGET_MS)
  const gauge = checkGauge(given.gauge)
  if (eventLoopDelayMs === undefined && latencyMs === undefined && gauge === undefined) {
    fail('Expected at least one signal in `protect`: `eventLoopDelayMs`, `latencyMs` or `gauge`, each with its target')
  }
  const minConcurrency = checkInteger(fail, 'protect.minConcurrency', given.minConcurrency ?? 4, 1, 1e6)
  const maxConcurrency = checkInteger(fail, 'protect.maxConcurrency', given.maxConcurrency ?? 10_000, minConcurrency, 1e6)
  const initialConcurrency = given.initialConcurrency === undefined ? undefined : checkInteger(fail, 'protect.initialConcurrency', given.initialConcurrency, minConcurrency, maxConcurrency)
  const status = given.status ?? 503
  if (status !== 503 && status !== 429) expected(fail, 'protect.status', '503 or 429', status)
  return {
    eventLoopDelayMs,
    latencyMs,
    gauge,
    priorities: checkPriorities(given.priorities, Object.keys(app.tiers)),
    minConcurrency,
    maxConcurrency,
    initialConcurrency,
    intervalMs: checkInteger(fail, 'protect.intervalMs', given.intervalMs ?? 100, 10, 60_000),
    status
  }
}
