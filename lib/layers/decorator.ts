/**
 * `fastify.tollgate`: the manual API (`consume`, `peek`, `refund`, `reset`,
 * `settle`, `shadowReport`) of one registration, on the buckets manual.ts names.
 */
import type { BucketPolicy } from '../types/engine.js'
import type { LimitDecision } from '../types/decision.js'
import type { Limiter, LimiterOptions } from '../types/limiter.js'
import type { FastifyRequest } from 'fastify'
import { checkInteger, checkKnownKeys, checkNumber, checkObject, expected, failOption } from '../config/check.js'
import { checkLimiter } from '../config/limiter.js'
import { HeaderLayout } from '../output/headers.js'
import type { ShadowReport } from '../output/shadow-report.js'
import { SettlingEdge } from '../stores/settling/index.js'
import { storeOf, type HookContext } from './context.js'
import { createLimiter } from './limiter.js'
import { overdraftOf, peek, refund, reset, resolve, type BucketLevel, type LayerBucket, type Manual, type PeekDecision, type RouteQuotas } from './manual.js'
import { report, type RequestStep, type Step } from './step.js'

/**
 * `fastify.tollgate`: a bucket by hand, for work that is not an HTTP route, or
 * from a handler. Each method names a bucket of its own by `key` (a non-empty
 * string, or a finite number: the key of its string) and `policy` (`policy`
 * scaled by the store's quota share, like every other policy; its keys live
 * apart from the layers'), or a bucket a layer uses by who it belongs to
 * (`LayerBucket`: `{ layer: 'app', user: '42' }`), with that layer's key and policy.
 * Invalid arguments reject with `TOLLGATE_INVALID_OPTION` naming them; `peek`,
 * `refund` and `reset` on a store without them, with `TOLLGATE_STORE_UNSUPPORTED`.
 */
export interface TollgateDecorator {
  /**
   * Takes `cost` tokens (default 1) from the bucket, all or nothing (a cost above
   * this process's share but within the whole quota passes on a full share and
   * overdraws it, see `BucketRequest.overdraft`). Never throws for a refusal: read
   * `allowed` and `retryAfterMs`.
   */
  consume (key: string | number, policy: BucketPolicy, cost?: number): Promise<LimitDecision>
  consume (bucket: LayerBucket, cost?: number): Promise<LimitDecision>
  /**
   * Reads the bucket without taking: the decision `consume` would make now for
   * `cost` (default 1), with the tokens held now and `fullInMs`. Changes nothing.
   */
  peek (key: string | number, policy: BucketPolicy, cost?: number): Promise<PeekDecision>
  peek (bucket: LayerBucket, cost?: number): Promise<PeekDecision>
  /**
   * Gives `tokens` (default 1) back, never above capacity; a bucket that is full
   * (absent) stays so. Resolves with the bucket as it is then.
   */
  refund (key: string | number, policy: BucketPolicy, tokens?: number): Promise<BucketLevel>
  refund (bucket: LayerBucket, tokens?: number): Promise<BucketLevel>
  /** Deletes the bucket: it is full again. */
  reset (key: string | number | LayerBucket): Promise<void>
  /**
   * With `edge.mode: 'settle'`: settles now what the edge spent and reserved
   * (as the timer does every `edge.settleIntervalMs`), after the settlement on
   * its way if there is one; resolves when the store answered, failed, or the
   * settlement was given up on. Otherwise resolves at once.
   */
  settle (): Promise<void>
  /**
   * In shadow mode: the clients and tiers that would have been refused most in the
   * last `shadowReport.minutes`, the `top` clients (default 20) most first. Outside
   * shadow mode: `shadow: false` and empty lists. Throws `TOLLGATE_INVALID_OPTION`
   * for a `top` that is not an integer ≥ 1.
   */
  shadowReport (options?: { top?: number | undefined }): ShadowReport
  /**
   * With the plugin's `decisions: true`: what `layer` (default `'app'`) decided for `request`, when it let it through:
   * as `onLimit` gets a decision (`buckets[i].tokens`, the tokens left), read from
   * the request without another store call; `undefined` when that layer did not
   * decide this request (an exempt route, an allow-listed client, the layer off).
   */
  decision (request: FastifyRequest, layer?: 'edge' | 'app'): LimitDecision | undefined
  /**
   * A limiter: a hook for `onRequest`, `preValidation` or `preHandler` that takes
   * from one bucket per key (the client address, or `options.key`'s value), named
   * `options.name`, with the plugin's headers, allow-list, `onLimit`, decision
   * events and shadow mode, and refuses as the layers do; `check(request)` counts
   * a request and resolves to the decision instead. Throws `TOLLGATE_INVALID_OPTION`
   * for invalid options, or a name this registration's limiters already use.
   */
  limiter (options: LimiterOptions): Limiter
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The registration without a `name`. */
    tollgate: TollgateDecorator
    /** The named registrations of this context and its parents, by `name`. */
    tollgates: Readonly<Record<string, TollgateDecorator>>
  }
}

/** `[policy, amount]` of a call on `target`: a key of its own takes a policy first, a layer's bucket does not. */
function argumentsOf (target: unknown, rest: readonly unknown[]): [unknown, unknown] {
  const [policy, amount] = typeof target === 'string' || typeof target === 'number' ? rest : [undefined, rest[0]]
  return [policy, amount === undefined ? 1 : amount]
}

/**
 * `fastify.tollgate` of the registration whose hooks run with `context`;
 * `routes`: the routes' own quotas by bucket name, filled as routes are declared.
 */
export function decorator (context: HookContext, routes: RouteQuotas): TollgateDecorator {
  const { settings } = context
  const m: Manual = { settings, routes }
  // The limiters' names so far: two limiters of one name would share their buckets.
  const limiters = new Set<string>()
  return {
    async consume (target: string | number | LayerBucket, ...rest: unknown[]) {
      const [policy, cost] = argumentsOf(target, rest)
      const resolved = await resolve(m, target, policy)
      const amount = checkNumber(failOption, 'cost', cost, 0)
      const step: Step = {
        layer: resolved.layer,
        buckets: resolved.buckets.map((bucket) => ({ key: bucket.key, policy: bucket.named.policy, cost: amount, overdraft: overdraftOf(m, bucket, amount) })),
        layout: new HeaderLayout(resolved.buckets.map((bucket) => bucket.named)),
        tier: resolved.tier
      }
      return report(step, await storeOf(settings, resolved.layer).consume(step.buckets), settings.name)
    },
    async peek (target: string | number | LayerBucket, ...rest: unknown[]) {
      const [policy, cost] = argumentsOf(target, rest)
      return peek(m, target, policy, cost)
    },
    async refund (target: string | number | LayerBucket, ...rest: unknown[]) {
      const [policy, tokens] = argumentsOf(target, rest)
      return refund(m, target, policy, tokens)
    },
    async reset (target) {
      return reset(m, target)
    },
    async settle () {
      const edgeStore = storeOf(settings, 'edge')
      if (edgeStore instanceof SettlingEdge) await edgeStore.settleNow()
    },
    decision (request, layer = 'app') {
      if (!settings.decisions) failOption('`fastify.tollgate.decision(request)` reads the decisions kept on the request: register the plugin with `decisions: true`')
      if (layer !== 'edge' && layer !== 'app') expected(failOption, 'layer', "'edge' or 'app'", layer)
      const decided = (request as unknown as Record<symbol, RequestStep | undefined>)[settings.decided[layer]]
      return decided?.decision === undefined ? undefined : report(decided, decided.decision, settings.name)
    },
    shadowReport (options) {
      const given = checkObject(failOption, 'shadowReport', options ?? {})
      checkKnownKeys(failOption, 'shadowReport', given, ['top'])
      const top = checkInteger(failOption, 'top', given.top ?? 20, 1)
      return settings.shadowCounter?.read(top, true) ?? { shadow: false, minutes: 0, wouldRefuse: 0, clients: [], tiers: [] }
    },
    limiter (options) {
      const plan = checkLimiter(options, { quotaShare: settings.quotaShare, refunds: settings.refunds, name: settings.name, taken: limiters })
      limiters.add(plan.name)
      return createLimiter(context, plan)
    }
  }
}
