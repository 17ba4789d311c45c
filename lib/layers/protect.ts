/**
 * Capacity protection's admission: a limit on the requests in flight in this
 * process (protection.ts), split by priority. It runs in the app layer, once the requester's tier is known
 * and before its quota is taken: a request over its priority's share is shed
 * (503 or 429 with `Retry-After`) through the refusal's path, and costs no quota.
 * No store call: each replica protects what it sees.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { LimitDecision } from '../types/decision.js'
import type { Settings } from './context.js'
import type { Done } from './outcome.js'
import type { RouteLatency } from './protect-signals.js'
import type { Level } from '../engine/priority-levels.js'
import type { Protection } from './protection.js'
import { reportRefusal } from './step.js'

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
  const level = protection.levelOf(admission.tier, route.critical)
  if (!protection.admits(level)) {
    const limit = shedDecision(settings, protection, admission, level)
    const bucket = limit.buckets[0] as LimitDecision['buckets'][number]
    const asked = [{ key: bucket.key, policy: { capacity: bucket.capacity, refillPerSecond: 0 }, cost: 1 }]
    // No store was asked: published with a store time of 0.
    reportRefusal(settings, { request: admission.request, limit, asked, degraded: undefined, storeMs: 0 })
    if (!settings.outcome.shadow) {
      settings.outcome.refused(admission, limit, protection.reason)
      return false
    }
    admission.request.log.info({ rateLimit: limit }, 'fastify-tollgate: would shed (shadow mode)')
  }
  protection.enter(level, admission.request, admission.reply, route.latency)
  return true
}

/** A shed as `onLimit`, the logs and the metrics see it: one bucket named `protect`, its capacity the requests in flight its level and those above it may have. */
function shedDecision (settings: Settings, protection: Protection, admission: Admission, level: Level): LimitDecision {
  const limit: LimitDecision = {
    layer: 'protect',
    allowed: false,
    tier: admission.tier,
    cost: 1,
    retryAfterMs: protection.noteShed(level),
    buckets: [{ name: 'protect', key: admission.key(), capacity: protection.capacityOf(level), refillPerSecond: 0, tokens: 0 }]
  }
  if (settings.name !== undefined) limit.registration = settings.name
  return limit
}
