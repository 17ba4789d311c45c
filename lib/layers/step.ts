/**
 * One layer's step for one request: ask the store, then turn its decision into
 * headers, a log line, `onLimit`, and either `done()` or a refusal.
 * The store may answer synchronously; then no promise is made.
 */
import type { FastifyRequest } from 'fastify'
import { performance } from 'node:perf_hooks'
import { decisionChannel, publishDecision, publishUnavailable, type DecisionMessage } from '../output/diagnostics.js'
import { LookupFailedError, StoreUnavailableError } from '../output/errors.js'
import { HeaderLayout, namedPolicy, writeHeaders, writePolicies } from '../output/headers.js'
import { storeOf, type Settings } from './context.js'
import type { LimitDecision } from '../types/decision.js'
import type { BucketRequest, StoreDecision } from '../types/store.js'
import type { BucketPolicy } from '../types/engine.js'
import type { PenaltyState, StepPenalty } from './penalty.js'
import { endOnThrow, isThenable, thenSafely } from './promises.js'
import { giveBackOthers, noteTake } from './registrations.js'
import { LIMITED, PENALIZED, type StepEnd } from './outcome.js'

/** What one layer asks of the store for one request. */
export interface Step {
  layer: LimitDecision['layer']
  /**
   * The buckets to consume, all or nothing; `layout.buckets[i]` names `buckets[i]`.
   * With a penalty, its buckets come last (the layer's, then the route's own), after those the layout names.
   */
  buckets: BucketRequest[]
  layout: HeaderLayout
  tier: string | undefined
  penalty?: StepPenalty | undefined
}

/** A layer's step for one request: the request, its reply, and the hook's `done`. */
export interface RequestStep extends Step, StepEnd {
  /** The store's decision, once the step passed: what `fastify.tollgate.decision(request)` reports. */
  decision?: StoreDecision | undefined
}

/** The time of a step no one watched (its decision is not published), in place of the store's time. */
const UNWATCHED = -1

/** The store's time to answer a step asked at `startedMs`, taken as it answers; UNWATCHED for an unwatched step. */
function elapsed (startedMs: number): number {
  return startedMs === UNWATCHED ? UNWATCHED : performance.now() - startedMs
}

/** Runs `step` against the store and calls `step.done` once, with a refusal or with nothing. */
export function runStep (settings: Settings, step: RequestStep): void {
  const startedMs = decisionChannel.hasSubscribers ? performance.now() : UNWATCHED
  let result: StoreDecision | PromiseLike<StoreDecision>
  try {
    result = storeOf(settings, step.layer).consume(step.buckets)
  } catch (error) {
    storeFailed(settings, step, elapsed(startedMs), error)
    return
  }
  if (isThenable(result)) {
    // What finishing throws (a malformed decision, an onLimit that broke it) is a 500, as with a synchronous store.
    const onDecision = (decision: StoreDecision): void => { endOnThrow(step, () => { finish(settings, step, decision, elapsed(startedMs)) }) }
    const onFailure = (error: unknown): void => { endOnThrow(step, () => { storeFailed(settings, step, elapsed(startedMs), error) }) }
    // A native promise's then() rejects only if a handler throws, and these do not: no guard on what it returns.
    if (result instanceof Promise) void result.then(onDecision, onFailure)
    else thenSafely(result, onDecision, onFailure)
  } else {
    finish(settings, step, result, elapsed(startedMs))
  }
}

/** The decision as `onLimit` and the logs see it. */
export function report (step: Step, decision: StoreDecision, registration: string | undefined): LimitDecision {
  const result: LimitDecision = {
    layer: step.layer,
    allowed: decision.allowed,
    cost: (step.buckets[0] as BucketRequest).cost,
    retryAfterMs: decision.retryAfterMs,
    buckets: step.layout.buckets.map((named, i) => {
      const bucket = step.buckets[i] as BucketRequest
      return {
        name: named.name,
        key: bucket.key,
        capacity: (decision.policies?.[i] ?? bucket.policy).capacity,
        refillPerSecond: (decision.policies?.[i] ?? bucket.policy).refillPerSecond,
        tokens: decision.tokens[i] as number
      }
    })
  }
  if (step.tier !== undefined) result.tier = step.tier
  if (registration !== undefined) result.registration = registration
  return result
}

/**
 * After a refusal of `step` (reported as `limit`): counts it toward the step's
 * penalty (recorded in the store unless in shadow mode), and notes in `limit` a
 * penalty it starts or meets in force. Returns the penalty's state.
 */
export function penalize (settings: Settings, step: Step, decision: StoreDecision, limit: LimitDecision): PenaltyState {
  const penalty = step.penalty === undefined ? 'none' : settings.penalties.onRefusal(step.penalty, decision, !settings.outcome.shadow)
  if (penalty !== 'none') {
    // In force: the route's own penalty, or the layer's one that still holds on this route.
    const { seconds } = (step.penalty as StepPenalty).settings
    limit.penalty = { state: penalty, seconds }
    // The refusal that starts a penalty already waits for its end.
    if (penalty === 'started') limit.retryAfterMs = Math.max(limit.retryAfterMs, seconds * 1000)
  }
  return penalty
}

/** Layouts under the policies a store applied, by their list: a list that comes back (a replica's share) is laid out once. */
const appliedLayouts = new WeakMap<readonly BucketPolicy[], HeaderLayout>()

function layoutUnder (layout: HeaderLayout, applied: readonly BucketPolicy[]): HeaderLayout {
  let under = appliedLayouts.get(applied)
  if (under === undefined) {
    under = new HeaderLayout(layout.buckets.map((bucket, i) => namedPolicy(bucket.name, applied[i] as BucketPolicy)))
    appliedLayouts.set(applied, under)
  }
  return under
}

/** The store's answer → headers, then `done()`, or the refusal's report, log, `onLimit`, and its outcome; published when watched. */
function finish (settings: Settings, step: RequestStep, decision: StoreDecision, storeMs: number): void {
  const request = step.request
  const outcome = settings.outcome
  // Honest headers when degraded: a local share shows its own policies; an uncounted pass shows the policies alone.
  if (settings.headers !== false) {
    const applied = decision.policies
    const layout = applied === undefined ? step.layout : layoutUnder(step.layout, applied)
    if (decision.degraded !== 'open') writeHeaders(step.reply, settings.headers, layout, decision.tokens)
    else writePolicies(step.reply, settings.headers, layout)
  }
  if (decision.allowed) {
    if (storeMs !== UNWATCHED) publishDecision(request, report(step, decision, settings.name), outcome.shadow, decision.degraded, storeMs)
    // For `fastify.tollgate.decision(request)` in the handler, reported only when asked.
    // Kept only when asked for (`decisions: true`): a property on every request costs about 1% of its instructions.
    if (settings.decisions && (step.layer === 'edge' || step.layer === 'app')) {
      step.decision = decision
      ;(request as unknown as Record<symbol, RequestStep>)[settings.decided[step.layer]] = step
    }
    // A degraded pass took nothing from the shared store (uncounted, or this replica's share): nothing to give back there.
    if (settings.group.size > 1 && decision.degraded === undefined) noteTake(request, { owner: settings, store: storeOf(settings, step.layer), buckets: step.buckets })
    step.done()
    return
  }
  const limit = report(step, decision, settings.name)
  const penalty = penalize(settings, step, decision, limit)
  reportRefusal(settings, { request, limit, asked: step.buckets, degraded: decision.degraded, storeMs })
  outcome.refused(step, limit, penalty !== 'none' && (step.penalty as StepPenalty).settings.status === 403 ? PENALIZED : LIMITED)
}

/** A refusal (or, in shadow mode, a would-be refusal) to report: a layer's or capacity protection's. */
export interface Refusal {
  request: FastifyRequest
  limit: LimitDecision
  /** The buckets the refusal is counted against in the shadow report. */
  asked: readonly BucketRequest[]
  degraded: StoreDecision['degraded']
  /** The store's time to decide, published with it; UNWATCHED: not published. */
  storeMs: number
}

/**
 * Everything a refusal does before its outcome: other registrations give back what
 * they took (unless in shadow mode), the shadow report counts it, the diagnostics
 * channel hears it when watched, then `onLimit` (last: it may change `limit`).
 */
export function reportRefusal (settings: Settings, refusal: Refusal): void {
  const { request, limit } = refusal
  if (settings.group.size > 1 && !settings.outcome.shadow) giveBackOthers(request, settings)
  settings.shadowCounter?.record(limit, refusal.asked)
  if (refusal.storeMs !== UNWATCHED && decisionChannel.hasSubscribers) publishDecision(request, limit, settings.outcome.shadow, refusal.degraded, refusal.storeMs)
  if (settings.onLimit !== undefined) callOnLimit(settings.onLimit, request, limit)
}

/** Calls `onLimit`; what it throws, or an async one rejects, is logged, never an unhandled rejection. */
function callOnLimit (onLimit: NonNullable<Settings['onLimit']>, request: FastifyRequest, limit: LimitDecision): void {
  try {
    const returned: unknown = onLimit(request, limit)
    if (isThenable(returned)) returned.then(undefined, (error: unknown) => { request.log.error({ err: error }, 'fastify-tollgate: onLimit rejected') })
  } catch (error) {
    request.log.error({ err: error }, 'fastify-tollgate: onLimit threw')
  }
}

/**
 * Ends a step that never reached the store, with `error`: a cost function's
 * mistake (a 500) or a cost lookup that failed (a 503, a pass in shadow mode).
 * A request it ends gets back what other registrations took for it, as on a refusal.
 */
export function failStep (settings: Settings, end: StepEnd, error: Error): void {
  const lookup = error instanceof LookupFailedError
  if (settings.group.size > 1 && !(lookup && settings.outcome.shadow)) giveBackOthers(end.request, settings)
  if (lookup) settings.outcome.unavailable(end, error, true)
  else end.done(error)
}

function storeFailed (settings: Settings, step: RequestStep, storeMs: number, error: unknown): void {
  const { outcome } = settings
  if (settings.group.size > 1 && !outcome.shadow) giveBackOthers(step.request, settings)
  if (storeMs !== UNWATCHED) publishUnavailable(step.request, { layer: step.layer as DecisionMessage['layer'], registration: settings.name, tier: step.tier, cost: (step.buckets[0] as BucketRequest).cost }, storeMs, outcome.shadow)
  outcome.unavailable(step, error, error instanceof StoreUnavailableError)
}
