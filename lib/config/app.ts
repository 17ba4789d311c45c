/** The `app` option, checked into an `AppPlan`. */
import type { AppHookName } from '../types/options.js'
import { checkFunction, checkKnownKeys, checkObject, checkPolicy, expected, failOption } from './check.js'
import { checkTierLimits } from './limits.js'
import { keysOf, PLUGIN_OPTIONS } from './rows.js'
import { checkPenalty } from './penalty.js'
import type { AppPlan } from './plan.js'

const APP_KEYS = keysOf(PLUGIN_OPTIONS, 'app')
const HOOKS: readonly AppHookName[] = ['preHandler', 'preValidation', 'preParsing']

/** `app` (`undefined` or `false`: no app layer); `quotaShare`: the store's. */
export function checkApp (value: unknown, quotaShare: number): AppPlan | undefined {
  if (value === undefined || value === false) return undefined
  const fail = failOption
  const app = checkObject(fail, 'app', value)
  checkKnownKeys(fail, 'app', app, APP_KEYS)
  if (app.global !== undefined && typeof app.global !== 'boolean') expected(fail, 'app.global', 'a boolean', app.global)
  if (app.digestIds !== undefined && typeof app.digestIds !== 'boolean') expected(fail, 'app.digestIds', 'a boolean', app.digestIds)
  const tiers = checkTierLimits(fail, 'app.tiers', app.tiers, 'app', quotaShare)
  const hook = app.hook ?? 'preHandler'
  if (!HOOKS.includes(hook as AppHookName)) expected(fail, 'app.hook', HOOKS.map((h) => `'${h}'`).join(', or '), hook)
  const maxQuota = app.maxQuota === undefined ? undefined : checkPolicy(fail, 'app.maxQuota', app.maxQuota)
  if (app.quotaClaim !== undefined && (typeof app.quotaClaim !== 'string' || app.quotaClaim === '')) expected(fail, 'app.quotaClaim', 'a non-empty string', app.quotaClaim)
  if (app.quotaClaim === 'sub' || app.quotaClaim === 'tier') expected(fail, 'app.quotaClaim', 'a claim other than `sub` and `tier` (they hold the id and the tier)', app.quotaClaim)
  if (app.quotaClaim !== undefined && app.identify !== undefined) {
    fail('Expected `app.quotaClaim` without `app.identify`: the claim is read by the default identify (`request.user`); with your own `identify`, return the quota as `quota`')
  }
  if (app.quotaClaim !== undefined && maxQuota === undefined) {
    fail('Expected `app.maxQuota` with `app.quotaClaim`: the largest quota a token may carry, e.g. `{ capacity: 10000, refillPerSecond: 1000 }`')
  }
  return {
    tiers,
    anonymousTier: 'anonymous' in tiers ? 'anonymous' : 'default',
    identify: app.identify === undefined ? undefined : checkFunction(fail, 'app.identify', app.identify),
    maxQuota,
    quotaClaim: app.quotaClaim,
    penalty: app.penalty === undefined ? undefined : checkPenalty(fail, 'app.penalty', app.penalty),
    hook: hook as AppHookName,
    global: app.global !== false,
    digestIds: app.digestIds === true
  }
}
