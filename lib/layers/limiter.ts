/**
 * `fastify.tollgate.limiter(options)`: a limiter as a hook, for what the layers
 * do not reach (a 404 handler, a group of routes sharing one bucket, a route keyed
 * by a function of its own). One bucket per key, named after the limiter, in the
 * plugin's store; each request runs through the layers' step (`runStep`: headers,
 * penalty, shadow counter, decision event, `onLimit`, outcome). `check()` counts
 * a request the same way and resolves to the decision instead.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Limiter, LimiterDecision } from '../types/limiter.js'
import type { BucketRequest } from '../types/store.js'
import type { LimiterPlan } from '../config/plan.js'
import { describe } from '../config/check.js'
import { overdraws } from '../engine/share.js'
import { InvalidCostError, LookupFailedError } from '../output/errors.js'
import { HeaderLayout } from '../output/headers.js'
import { requestRoute } from '../output/route-names.js'
import { storeOf, type HookContext } from './context.js'
import { limiterKeys } from './keys.js'
import { keyOf, type KeySource } from './client-key.js'
import { unlessAllowed } from './allow-list.js'
import { LOOKUP_FAILED, type Lookups } from './lookup.js'
import type { Done } from './outcome.js'
import { addPenaltyBuckets, stepPenalty } from './penalty.js'
import { continueAfter, isThenable } from './promises.js'
import { failStep, penalize, report, runStep, type Step } from './step.js'

/** A value, or a promise of it (a user function may answer either way). */
type Maybe<T> = T | PromiseLike<T>

/** What a limiter's requests are counted with. */
interface LimiterRun {
  plan: LimiterPlan
  /** Where its key comes from: its key function, else the client address. */
  source: KeySource
  layout: HeaderLayout
  /** Under a quota share, a cost above the share but within the whole capacity overdraws it. */
  shared: boolean
  lookups: Lookups
}

/** The limiter of `plan`, in the registration of `context`. */
export function createLimiter (context: HookContext, plan: LimiterPlan): Limiter {
  const { settings } = context
  const keys = limiterKeys(plan.name, settings, context.perConnection)
  const run: LimiterRun = {
    plan,
    // Without a key of its own, the client as the edge knows it (`edge.key`, else its address).
    source: { fn: plan.key ?? settings.edge?.key, name: 'limiter.key', keyOfValue: keys.value, addressKeyOf: keys.address, lookups: settings.lookups },
    layout: new HeaderLayout([plan.named]),
    shared: settings.quotaShare < 1,
    lookups: settings.lookups
  }
  const exempt = plan.allowList ? context.allowed : undefined
  // The requests counted by the hook: one carried by two hooks (a context's and a route's) counts once.
  const counted = new WeakSet<FastifyRequest>()
  const limit = (request: FastifyRequest, reply: FastifyReply, done: Done): void => {
    const step = stepOf(run, request)
    if (isThenable(step)) {
      const end = { request, reply, done }
      continueAfter(end, step, (ready) => { runOrFail(context, ready, end) })
    } else runOrFail(context, step, { request, reply, done })
  }
  const guarded = unlessAllowed(exempt, limit)
  const limiter = function tollgateLimiter (request: FastifyRequest, reply: FastifyReply, done: Done): void {
    if (counted.has(request)) {
      done()
      return
    }
    counted.add(request)
    guarded(request, reply, done)
  }
  const check = async (request: FastifyRequest): Promise<LimiterDecision> => {
    if (exempt !== undefined && await exempt(request)) return { layer: 'limiter', allowed: true, allowListed: true, cost: 0, retryAfterMs: 0, buckets: [] }
    const step = await stepOf(run, request)
    if (step instanceof Error) throw step
    const decision = await storeOf(settings, 'limiter').consume(step.buckets)
    const limit = report(step, decision, settings.name)
    if (!decision.allowed) penalize(settings, step, decision, limit)
    return { ...limit, layer: 'limiter', allowListed: false }
  }
  return Object.assign(limiter, { check })
}

/** Runs `step` for the request of `end`, or ends it with the step's error (an invalid cost, a cost lookup that failed). */
function runOrFail (context: HookContext, step: Step | Error, end: { request: FastifyRequest, reply: FastifyReply, done: Done }): void {
  if (step instanceof Error) failStep(context.settings, end, step)
  else runStep(context.settings, { ...step, ...end })
}

/** The step of `request`: its key and cost (each may come later, from a promise), then its bucket and penalty. */
function stepOf (run: LimiterRun, request: FastifyRequest): Maybe<Step | Error> {
  const key = keyOf(request, run.source)
  const cost = costOf(run, request)
  if (!isThenable(key) && !isThenable(cost)) return buildStep(run, key, cost)
  return Promise.all([key, cost]).then(([k, c]) => buildStep(run, k, c))
}

function buildStep (run: LimiterRun, key: string, cost: number | Error): Step | Error {
  if (cost instanceof Error) return cost
  const { plan } = run
  const buckets: BucketRequest[] = [{ key, policy: plan.named.policy, cost, overdraft: run.shared && overdraws(cost, plan.whole.capacity) }]
  const penalty = plan.penalty === undefined ? undefined : stepPenalty(plan.penalty, undefined, key)
  if (penalty !== undefined) addPenaltyBuckets(buckets, penalty)
  return { layer: 'limiter', buckets, layout: run.layout, tier: undefined, penalty }
}

/** The tokens `request` takes, or the error to fail it with (a cost function's mistake, never a free pass). */
function costOf (run: LimiterRun, request: FastifyRequest): Maybe<number | Error> {
  const { cost } = run.plan
  if (typeof cost === 'number') return cost
  let value: unknown
  try {
    value = cost(request)
  } catch (error) {
    return invalidCost(run, request, 'threw', { cause: error })
  }
  if (isThenable(value)) {
    return run.lookups.wait('limiter.cost', value).then((settled) => settled === LOOKUP_FAILED ? new LookupFailedError('limiter.cost') : checkedCost(run, request, settled))
  }
  return checkedCost(run, request, value)
}

function checkedCost (run: LimiterRun, request: FastifyRequest, cost: unknown): number | Error {
  if (typeof cost !== 'number' || !Number.isFinite(cost) || cost < 0) {
    return invalidCost(run, request, `returned ${describe(cost)}; expected a finite number ≥ 0`)
  }
  const { capacity } = run.plan.whole
  if (cost > capacity) return invalidCost(run, request, `returned ${cost}, above its capacity ${capacity}: it could never pass`)
  return cost
}

/** `TOLLGATE_INVALID_COST` for the request's route (`GET (not found)` for a 404): the limiter's cost function `problem` (`threw`, …). */
function invalidCost (run: LimiterRun, request: FastifyRequest, problem: string, cause?: { cause: unknown }): Error {
  const route = requestRoute(request) ?? `${request.method} (not found)`
  const text = `limiter \`${run.plan.name}\`'s cost function ${problem}`
  return cause === undefined ? new InvalidCostError(route, text) : new InvalidCostError(route, text, cause)
}
