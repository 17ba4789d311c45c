/**
 * `fastify.tollgate.limiter(options)`, checked into a `LimiterPlan` (throws
 * `TOLLGATE_INVALID_OPTION` naming the option, the value and what was expected).
 * Nothing is built here: layers/limiter.ts makes the hook from the plan.
 */
import { namedPolicy } from '../output/headers.js'
import { inRegistration } from '../output/key-format.js'
import { checkFunction, checkKnownKeys, checkNumber, checkObject, checkPolicy, describe, expected, failOption } from './check.js'
import { checkName, share } from './limits.js'
import { checkPenalty } from './penalty.js'
import type { LimiterPlan, RouteCheckContext } from './plan.js'
import { keysOf, LIMITER_OPTIONS } from './rows.js'
import { PENALTY_NEEDS_REFUND } from './store.js'

const LIMITER_KEYS = keysOf(LIMITER_OPTIONS)

/** The names of the plugin's own buckets in the headers: a limiter named alike would be mistaken for one. */
const RESERVED_NAMES = ['edge', 'edge-route', 'app', 'route', 'manual']

/** What the check needs to know of the registration. */
export interface LimiterCheckContext extends Pick<RouteCheckContext, 'quotaShare' | 'refunds' | 'name'> {
  /** The names of the registration's limiters so far. */
  taken: ReadonlySet<string>
}

/** Validates a limiter's options (throws `TOLLGATE_INVALID_OPTION`). */
export function checkLimiter (value: unknown, context: LimiterCheckContext): LimiterPlan {
  const fail = failOption
  const options = checkObject(fail, 'limiter', value)
  checkKnownKeys(fail, 'limiter', options, LIMITER_KEYS)
  const name = checkName(fail, 'limiter.name', options.name)
  if (RESERVED_NAMES.includes(name)) {
    fail(`Expected \`limiter.name\` to differ from the plugin's own bucket names (${RESERVED_NAMES.join(', ')}), got ${describe(name)}`)
  }
  if (context.taken.has(name)) {
    fail(`Expected \`limiter.name\` to be unique in this registration (limiters of one name would share their buckets), got ${describe(name)} twice`)
  }
  const whole = checkPolicy(fail, 'limiter', options, LIMITER_KEYS)
  const named = namedPolicy(inRegistration(context.name, name), share(fail, 'limiter', whole, context.quotaShare))
  const key = options.key === undefined ? undefined : checkFunction<LimiterPlan['key']>(fail, 'limiter.key', options.key)
  const cost = checkCost(options.cost ?? 1, whole.capacity)
  const penalty = options.penalty === undefined ? undefined : checkPenalty(fail, 'limiter.penalty', options.penalty)
  if (penalty !== undefined && !context.refunds) fail(PENALTY_NEEDS_REFUND)
  const allowList = options.allowList ?? true
  if (typeof allowList !== 'boolean') expected(fail, 'limiter.allowList', 'a boolean', allowList)
  return { name, named, whole, key, cost, penalty, allowList }
}

/** `limiter.cost`: a function, or a number from 0 to the capacity (as configured). */
function checkCost (cost: unknown, capacity: number): LimiterPlan['cost'] {
  if (typeof cost === 'function') return cost as LimiterPlan['cost']
  if (typeof cost !== 'number') expected(failOption, 'limiter.cost', 'a finite number ≥ 0 or a function of the request', cost)
  checkNumber(failOption, 'limiter.cost', cost, 0)
  if (cost > capacity) failOption(`Expected \`limiter.cost\` to be at most \`limiter.capacity\` (${capacity}), got \`${cost}\`: it could never pass`)
  return cost
}
