/**
 * A penalty's options (`edge.penalty`, `app.penalty`, `config.rateLimit.penalty`),
 * checked. How a penalty works is told in layers/penalty.ts.
 */
import type { BucketPolicy } from '../types/engine.js'
import { unshared } from '../engine/share.js'
import { checkInteger, checkKnownKeys, checkNumber, checkObject, expected, POLICY_BOUNDS, type Fail } from './check.js'
import { keysOf, PENALTY_OPTIONS } from './rows.js'

/** A checked penalty. */
export interface PenaltySettings {
  readonly after: number
  readonly withinSeconds: number
  readonly seconds: number
  readonly status: 429 | 403
  /** The penalty bucket in the store: 1 token, refilled at 1 a second (a debt of `seconds` lasts `seconds`, exactly). */
  readonly policy: BucketPolicy
  /** This process's count of refusals: `after` tokens, refilled over `withinSeconds`. */
  readonly strikePolicy: BucketPolicy
}

export function checkPenalty (fail: Fail, path: string, value: unknown): PenaltySettings {
  const penalty = checkObject(fail, path, value)
  checkKnownKeys(fail, path, penalty, keysOf(PENALTY_OPTIONS))
  const after = checkInteger(fail, `${path}.after`, penalty.after, 1, 1e6)
  const withinSeconds = penalty.withinSeconds
  if (typeof withinSeconds !== 'number' || !(withinSeconds >= 0.001 && withinSeconds <= POLICY_BOUNDS.secondsToFill)) {
    expected(fail, `${path}.withinSeconds`, 'a number of seconds from 0.001 to 1e10', withinSeconds)
  }
  const seconds = checkNumber(fail, `${path}.seconds`, penalty.seconds, 1)
  if (seconds > POLICY_BOUNDS.secondsToFill) expected(fail, `${path}.seconds`, 'a number of seconds from 1 to 1e10', seconds)
  const status = penalty.status ?? 429
  if (status !== 429 && status !== 403) expected(fail, `${path}.status`, '429 or 403', status)
  return Object.freeze({
    after,
    withinSeconds,
    seconds,
    status,
    policy: unshared(Object.freeze({ capacity: 1, refillPerSecond: 1 })),
    strikePolicy: Object.freeze({ capacity: after, refillPerSecond: after / withinSeconds })
  })
}
