/**
 * The plugin options, checked into a `Plan` (config/plan.ts). Everything is
 * checked at `register`; a mistake fails startup with a coded error, never a
 * request. Nothing is created here: wire.ts builds the runtime from the plan.
 */
import type { WarningCode } from '../types/options.js'
import { MAX_SHADOW_ENTRIES } from '../output/shadow-report.js'
import { WARNING_CODES } from '../output/warnings.js'
import { checkAllowList } from './allow-list.js'
import { checkApp } from './app.js'
import { checkFunction, checkInteger, checkKnownKeys, checkObject, expected, failOption } from './check.js'
import { checkEdge } from './edge.js'
import { checkProtect } from './protect.js'
import { checkName, tiersIn } from './limits.js'
import { inRegistrationNamed } from '../output/headers.js'
import type { AppPlan, EdgePlan, Plan } from './plan.js'
import { keysOf, PLUGIN_OPTIONS, SHADOW_REPORT_OPTIONS } from './rows.js'
import { checkStore, PENALTY_NEEDS_REFUND } from './store.js'

const OPTION_KEYS = keysOf(PLUGIN_OPTIONS)

/** The longest `asyncTimeoutMs`: a request waits for a user function's promise at most this long. */
export const MAX_ASYNC_TIMEOUT_MS = 60_000

/** Validates the plugin options (throws `TOLLGATE_INVALID_OPTION`). */
export function checkOptions (value: unknown): Plan {
  const fail = failOption
  const options = checkObject(fail, 'options', value)
  checkKnownKeys(fail, 'options', options, OPTION_KEYS)
  const name = options.name === undefined ? undefined : checkName(fail, 'name', options.name)
  const store = checkStore(options.store)
  const quotaShare = store?.quotaShare ?? 1
  const refunds = store === undefined || typeof store.refund === 'function'
  const edge = edgeIn(checkEdge(options.edge, store), name)
  if (edge?.penalty !== undefined && edge.local) {
    fail(`Expected \`edge.penalty\` with \`edge.mode: 'exact'\` (the penalty is kept in the shared store), got it with \`edge.mode: '${edge.mode}'\``)
  }
  const app = appIn(checkApp(options.app, quotaShare), name)
  if ((edge?.penalty ?? app?.penalty) !== undefined && !refunds) failOption(PENALTY_NEEDS_REFUND)
  if (edge === undefined && app === undefined) {
    fail('Expected at least one layer: `edge` or `app` must be set (both are omitted or `false`)')
  }
  const headers = options.headers ?? 'draft'
  if (headers !== 'draft' && headers !== 'draft-03' && headers !== 'legacy' && headers !== false) {
    expected(fail, 'headers', "'draft', 'draft-03', 'legacy' or false", headers)
  }
  const shadow = options.shadow ?? false
  if (typeof shadow !== 'boolean') expected(fail, 'shadow', 'a boolean', shadow)
  const onLimit = options.onLimit === undefined ? undefined : checkFunction<Plan['onLimit']>(fail, 'onLimit', options.onLimit)
  const allowList = checkAllowList(options.allowList)
  const shadowReport = checkShadowReport(options.shadowReport)
  const asyncTimeoutMs = checkInteger(fail, 'asyncTimeoutMs', options.asyncTimeoutMs ?? 1000, 1, MAX_ASYNC_TIMEOUT_MS)
  const decisions = options.decisions ?? false
  if (typeof decisions !== 'boolean') expected(fail, 'decisions', 'a boolean', decisions)
  const protect = checkProtect(options.protect, app)
  return { name, store, quotaShare, refunds, headers, shadow, onLimit, edge, app, allowList, warnings: checkWarnings(options.warnings), shadowReport, asyncTimeoutMs, decisions, protect }
}

function checkShadowReport (value: unknown): { minutes: number, keys: number } {
  const fail = failOption
  const given = checkObject(fail, 'shadowReport', value ?? {})
  checkKnownKeys(fail, 'shadowReport', given, keysOf(SHADOW_REPORT_OPTIONS))
  const minutes = checkInteger(fail, 'shadowReport.minutes', given.minutes ?? 10, 1, 60)
  const keys = checkInteger(fail, 'shadowReport.keys', given.keys ?? 1000, 10, 10_000)
  if (minutes * keys > MAX_SHADOW_ENTRIES) {
    fail(`Expected \`shadowReport.minutes\` × \`shadowReport.keys\` to be at most ${MAX_SHADOW_ENTRIES} (the clients kept in all), got ${minutes} × ${keys} = ${minutes * keys}`)
  }
  return { minutes, keys }
}

function checkWarnings (value: unknown): Set<WarningCode> {
  if (value === undefined || value === true) return new Set(WARNING_CODES)
  if (value === false) return new Set()
  const given = checkObject(failOption, 'warnings', value)
  checkKnownKeys(failOption, 'warnings', given, WARNING_CODES)
  for (const [code, on] of Object.entries(given)) {
    if (typeof on !== 'boolean' && on !== undefined) expected(failOption, `warnings.${code}`, 'a boolean', on)
  }
  return new Set(WARNING_CODES.filter((code) => given[code] !== false))
}

/** The edge's bucket in registration `registration` (its member `"hourly.edge"`). */
function edgeIn (edge: EdgePlan | undefined, registration: string | undefined): EdgePlan | undefined {
  return edge?.bucket === undefined ? edge : { ...edge, bucket: inRegistrationNamed(edge.bucket, registration) }
}

/** The tiers' limits in registration `registration` (their members `"hourly.app"`). */
function appIn (app: AppPlan | undefined, registration: string | undefined): AppPlan | undefined {
  return app === undefined ? app : { ...app, tiers: tiersIn(app.tiers, registration) }
}
