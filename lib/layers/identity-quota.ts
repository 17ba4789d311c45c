/**
 * Quotas carried by the identity: a customer with a negotiated quota gets it
 * from `identify` (or a JWT claim) instead of a tier name. Such a quota comes
 * with each request, so it is checked per request, without throwing at the
 * caller: anything malformed, or above the operator's `app.maxQuota`, is refused
 * with a reason, and the request gets the identity's tier (`default` without
 * one: never a better quota).
 */
import type { FastifyRequest } from 'fastify'
import { performance } from 'node:perf_hooks'
import type { BucketPolicy } from '../types/engine.js'
import { checkQuota, limitsIn, share, type TierLimit } from '../config/limits.js'
import { identityQuotaSuffix } from '../output/key-format.js'
import { ThrottledLog } from '../output/throttled-log.js'
import type { Fail } from '../config/check.js'

/** How often a refused quota is logged, at most: once a minute (ms). */
export const QUOTA_REFUSED_LOG_INTERVAL_MS = 60_000

/** An identity's quota, checked, with its keys apart from every tier's and every other policy's. */
export interface IdentityQuota {
  /**
   * Its limits. Each key suffix names the policy, `~q500r50` (`:<name>~q…r…` in a
   * list): a user under another policy has other buckets, and the same policy
   * finds the same bucket again.
   */
  readonly limits: readonly TierLimit[]
}

/** How many checked quotas are kept, by their text: past it, the cache starts again. */
const CACHE_SIZE = 1000

class Refused extends Error {}

/** Why a quota was refused, whatever was thrown (a hostile value may throw anything, even from `instanceof`). */
function reasonOf (error: unknown): string {
  try {
    return error instanceof Refused ? error.message : 'reading it threw'
  } catch {
    return 'reading it threw'
  }
}
const refuse: Fail = (problem) => { throw new Refused(problem) }

/** What identities' quotas are checked against, and logged with. */
export interface IdentityQuotaSettings {
  /** `app.maxQuota`: each limit's capacity and refill at most its own. */
  max: BucketPolicy
  /** The replica's share of a quota (`plan.quotaShare`). */
  quotaShare: number
  /** The plugin's `name`, in the quotas' header members. */
  registration: string | undefined
  /** A user id as store keys hold it (`storedUserId`: its digest under `app.digestIds`), and so as the log names it. */
  userId: (id: string) => string
}

/** Checks identities' quotas against `max`, scaled by `quotaShare`. */
export class IdentityQuotas {
  private readonly checked = new Map<string, IdentityQuota>()
  private readonly refusals: ThrottledLog

  constructor (private readonly settings: IdentityQuotaSettings, now: () => number = () => performance.now()) {
    this.refusals = new ThrottledLog(QUOTA_REFUSED_LOG_INTERVAL_MS, now)
  }

  /**
   * Logs (once a minute at most) that the quota of the user `id` was refused, and
   * why, naming the user as store keys do; the request then gets its tier's.
   */
  refused (request: FastifyRequest, id: string, reason: string): void {
    this.refusals.log((since) => {
      request.log.warn({ user: this.settings.userId(id), reason, since }, 'fastify-tollgate: an identity\'s quota was refused; its tier applies (default without one; logged once a minute; `since`: refusals not logged since the last line)')
    })
  }

  /** The checked quota of `value`, or why it is refused (for the log). */
  of (value: unknown): IdentityQuota | string {
    const { max, quotaShare, registration } = this.settings
    let limits: readonly TierLimit[]
    try {
      limits = limitsIn(checkQuota(refuse, 'quota', value, 'app', (path, policy) => share(refuse, path, policy, quotaShare)), registration)
      for (const [i, limit] of limits.entries()) {
        const at = limits.length > 1 ? `quota[${i}]` : 'quota'
        if (limit.whole.capacity > max.capacity) refuse(`\`${at}.capacity\` ${limit.whole.capacity} is above \`app.maxQuota.capacity\` ${max.capacity}`)
        if (limit.whole.refillPerSecond > max.refillPerSecond) {
          refuse(`\`${at}.refillPerSecond\` ${limit.whole.refillPerSecond} is above \`app.maxQuota.refillPerSecond\` ${max.refillPerSecond}`)
        }
      }
    } catch (error) {
      return reasonOf(error)
    }
    const keySuffixes = limits.map((limit) => identityQuotaSuffix(limit.keySuffix, limit.whole))
    const text = keySuffixes.join(',')
    let quota = this.checked.get(text)
    if (quota === undefined) {
      if (this.checked.size >= CACHE_SIZE) this.checked.clear()
      quota = { limits: limits.map((limit, i) => ({ ...limit, keySuffix: keySuffixes[i] as string })) }
      this.checked.set(text, quota)
    }
    return quota
  }
}
