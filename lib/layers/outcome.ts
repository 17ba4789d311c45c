/**
 * What a refusal does, chosen once per registration: enforce it (a 429, a 403
 * during a penalty of that status, a 503 when the store could not decide), or in
 * shadow mode log it and let the request pass. Either way it is reported,
 * counted and published the same; only the ending differs.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { LimitDecision } from '../types/decision.js'
import { PenalizedError, RateLimitedError, StoreUnavailableError } from '../output/errors.js'
import { retryAfterSeconds } from '../output/headers.js'
import { REFUSAL_BODIES, type RefusalBodies } from '../output/refusal-reply.js'
import type { RefusalAnswerer } from './prepared.js'

export type Done = (error?: Error) => void

/**
 * What `done` gets after a refusal answered from the hook: the reply is sent,
 * so Fastify ignores it, and what wraps `done` (edge.ts) sees that the step ended in a refusal.
 */
const ANSWERED = new Error('fastify-tollgate: refusal answered')

/** How a step ends: its request, reply and the hook's `done`. */
export interface StepEnd {
  request: FastifyRequest
  reply: FastifyReply
  done: Done
}

/** Why a step was refused: the bodies of its response, and the error Fastify's path gets. */
export interface RefusalReason {
  readonly bodies: RefusalBodies
  error (limit: LimitDecision): Error
}

/** A bucket was empty: 429. */
export const LIMITED: RefusalReason = { bodies: REFUSAL_BODIES.limited, error: (limit) => new RateLimitedError(limit) }
/** A penalty of status 403 is in force. */
export const PENALIZED: RefusalReason = { bodies: REFUSAL_BODIES.penalized, error: (limit) => new PenalizedError(limit) }

export interface Outcome {
  /** Shadow mode: nothing is refused (published as `shadow` in decision messages). */
  readonly shadow: boolean
  /** Ends a refused step, after its report, log and `onLimit`, for `reason`. */
  refused (step: StepEnd, limit: LimitDecision, reason: RefusalReason): void
  /** Ends a step the store could not decide; `byPolicy`: the store refused by its failure policy (`StoreUnavailableError`). */
  unavailable (step: StepEnd, error: unknown, byPolicy: boolean): void
}

/**
 * Refusals are sent: 429 (or 403 in a penalty) with `Retry-After`, 503 when the
 * store could not decide. A refusal goes to Fastify as the error it is (its error
 * handler shapes the response), unless `prepared` answers it from the hook with
 * the response Fastify's default error handler would give (prepared.ts).
 */
function enforce (prepared: RefusalAnswerer): Outcome {
  return {
    shadow: false,
    refused (step, limit, reason) {
      step.request.log.debug({ rateLimit: limit }, 'fastify-tollgate: refused')
      const seconds = retryAfterSeconds(limit.retryAfterMs)
      const refusal = { bodies: reason.bodies, decision: limit, seconds }
      // Sets `Retry-After` and `Cache-Control`; answered from the hook, or handed to Fastify as the error it is.
      if (prepared.answer(step, refusal)) step.done(ANSWERED)
      else step.done(reason.error(limit))
    },
    unavailable (step, error, byPolicy) {
      logUnavailable(step, error, byPolicy, 'refused')
      step.reply.header('retry-after', 1)
      step.done(byPolicy ? error as Error : new StoreUnavailableError())
    }
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

/** The outcome of a registration: shadow mode's, or enforcing, with refusals answered by `prepared` where it may. */
export const outcomeOf = (shadow: boolean, prepared: RefusalAnswerer): Outcome => shadow ? SHADOW : enforce(prepared)

function logUnavailable (step: StepEnd, error: unknown, byPolicy: boolean, outcome: string): void {
  if (byPolicy) {
    // The store refused by its failure policy and logs outages itself, without a line per request.
    step.request.log.debug(`fastify-tollgate: store unavailable; request ${outcome}`)
  } else {
    step.request.log.error({ err: error }, `fastify-tollgate: the store failed; request ${outcome}`)
  }
}
