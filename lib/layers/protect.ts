/**
 * Capacity protection's admission: a limit on the requests in flight in this
 * process (protection.ts), split by priority. It runs in the app layer, once the requester's tier is known
 * and before its quota is taken: a request over its priority's share is shed
 * (503 or 429 with `Retry-After`) through the refusal's path, and costs no quota.
 * No store call: each replica protects what it sees.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { decisionChannel, publishDecision } from '../output/diagnostics.js'
import type { LimitDecision } from '../types/decision.js'
import type { Settings } from './context.js'
import type { Done } from './outcome.js'
import type { RouteLatency } from './protect-signals.js'
import type { Protection } from './protection.js'
import { giveBackOthers } from './registrations.js'
import { callOnLimit } from './step.js'

/** What one route's app hook protects with. */
export interface ProtectedRoute {
  protection: Protection
  critical: boolean
  latency: RouteLatency | undefined
}

/** A request of the app layer, its tier known: where a shed decision is reported, and how it ends. */
export interface Admission {
  request: FastifyRequest
  reply: FastifyReply
  done: Done
  tier: string
  /** The requester's key in the app layer (its shed is reported under it). */
  key: () => string
}

/**
 * Admits the request (counted in flight; `true`: the app layer goes on), or sheds
 * it: reported as a refusal of layer `protect`, and ended with a 503 (or 429);
 * in shadow mode reported as a would-be refusal and admitted.
 */
export function admit (settings: Settings, route: ProtectedRoute, admission: Admission): boolean {
  const { protection } = route
  const share = protection.shareOf(admission.tier, route.critical)
  if (!protection.admits(share)) {
    const limit = shedDecision(settings, protection, admission, share)
    if (!settings.outcome.shadow) {
      if (settings.group.size > 1) giveBackOthers(admission.request, settings)
      report(settings, admission, limit)
      settings.outcome.refused(admission, limit, protection.reason)
      return false
    }
    admission.request.log.info({ rateLimit: limit }, 'fastify-tollgate: would shed (shadow mode)')
    report(settings, admission, limit)
  }
  protection.enter(admission.request, admission.reply, route.latency)
  return true
}

/** A shed as `onLimit`, the logs and the metrics see it: one bucket named `protect`, its capacity the requests in flight its priority may have. */
function shedDecision (settings: Settings, protection: Protection, admission: Admission, share: number): LimitDecision {
  const limit: LimitDecision = {
    layer: 'protect',
    allowed: false,
    tier: admission.tier,
    cost: 1,
    retryAfterMs: protection.noteShed(share),
    buckets: [{ name: 'protect', key: admission.key(), capacity: Math.floor(protection.limit * share), refillPerSecond: 0, tokens: 0 }]
  }
  if (settings.name !== undefined) limit.registration = settings.name
  return limit
}

function report (settings: Settings, admission: Admission, limit: LimitDecision): void {
  const bucket = limit.buckets[0] as LimitDecision['buckets'][number]
  settings.shadowCounter?.record(limit, [{ key: bucket.key, policy: { capacity: bucket.capacity, refillPerSecond: 0 }, cost: 1 }])
  if (decisionChannel.hasSubscribers) publishDecision(admission.request, limit, settings.outcome.shadow, undefined, 0)
  if (settings.onLimit !== undefined) callOnLimit(settings.onLimit, admission.request, limit)
}

