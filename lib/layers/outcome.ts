/**
 * What a refusal does, chosen once per registration: enforce it (a 429, a 403
 * during a penalty of that status, a 503 when the store could not decide), or in
 * shadow mode log it and let the request pass. Either way it is reported,
 * counted and published the same; only the ending differs.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { LimitDecision } from '../types/decision.js'
import { PenalizedError, RateLimitedError, StoreUnavailableError } from '../output/errors.js'

export type Done = (error?: Error) => void

/** How a step ends: its request, reply and the hook's `done`. */
export interface StepEnd {
  request: FastifyRequest
  reply: FastifyReply
  done: Done
}

export interface Outcome {
  /** Shadow mode: nothing is refused (published as `shadow` in decision messages). */
  readonly shadow: boolean
  /** Ends a refused step, after its report, log and `onLimit`; `penalized`: a penalty of status 403 is in force. */
  refused (step: StepEnd, limit: LimitDecision, penalized: boolean): void
  /** Ends a step the store could not decide; `byPolicy`: the store refused by its failure policy (`StoreUnavailableError`). */
  unavailable (step: StepEnd, error: unknown, byPolicy: boolean): void
}

/** Refusals are sent: 429 (or 403 in a penalty) with `Retry-After`, 503 when the store could not decide. */
const ENFORCE: Outcome = {
  shadow: false,
  refused (step, limit, penalized) {
    step.request.log.debug({ rateLimit: limit }, 'fastify-tollgate: refused')
    const refusal = penalized ? new PenalizedError(limit) : new RateLimitedError(limit)
    if (refusal.retryAfterSeconds !== undefined) step.reply.header('retry-after', refusal.retryAfterSeconds)
    // RFC 6585: a 429 must not be stored by a cache.
    step.reply.header('cache-control', 'no-store')
    step.done(refusal)
  },
  unavailable (step, error, byPolicy) {
    logUnavailable(step, error, byPolicy, 'refused')
    step.reply.header('retry-after', 1)
    step.done(byPolicy ? error as Error : new StoreUnavailableError())
  }
}

/** Shadow mode: a refusal is logged and passes; so does a request the store could not decide. */
const SHADOW: Outcome = {
  shadow: true,
  refused (step, limit) {
    step.request.log.info({ rateLimit: limit }, 'fastify-tollgate: would refuse (shadow mode)')
    step.done()
  },
  unavailable (step, error, byPolicy) {
    logUnavailable(step, error, byPolicy, 'passed (shadow mode)')
    step.done()
  }
}

export const outcomeOf = (shadow: boolean): Outcome => shadow ? SHADOW : ENFORCE

function logUnavailable (step: StepEnd, error: unknown, byPolicy: boolean, outcome: string): void {
  if (byPolicy) {
    // The store refused by its failure policy and logs outages itself, without a line per request.
    step.request.log.debug(`fastify-tollgate: store unavailable; request ${outcome}`)
  } else {
    step.request.log.error({ err: error }, `fastify-tollgate: the store failed; request ${outcome}`)
  }
}
