/**
 * One registration's capacity protection in this process: a limit on the
 * requests in flight (engine/concurrency-limit.ts), moved once per interval by
 * the health signals (protect-signals.ts) and split by priority. layers/protect.ts
 * admits and sheds with it.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { ProtectPlan } from '../config/plan.js'
import { ConcurrencyLimit } from '../engine/concurrency-limit.js'
import { OverloadedError, overloaded } from '../output/errors.js'
import { openProtection, type ProtectionState } from '../output/protection-state.js'
import { RefusalBodies } from '../output/refusal-reply.js'
import type { RefusalReason } from './outcome.js'
import type { RouteLatency, Signals } from './protect-signals.js'

/** Priority shares: `critical` routes have the whole limit; the tiers, highest first, fall by equal steps. */
function sharesOf (priorities: readonly string[]): Map<string, number> {
  const levels = priorities.length + 1
  return new Map(priorities.map((tier, i) => [tier, (levels - 1 - i) / levels]))
}

/** An admitted request in flight: when it was admitted, its route's latency, and whether it left. */
interface InFlight {
  readonly started: number
  readonly latency: RouteLatency | undefined
  left: boolean
}

/** The longest `Retry-After` of a shed request, in ms. */
const MAX_RETRY_MS = 60_000

/** One registration's capacity protection in this process. */
export class Protection implements ProtectionState {
  inFlight = 0
  readonly law: ConcurrencyLimit
  readonly reason: RefusalReason
  private peak = 0
  private shed = 0
  private intervalStart: number
  private readonly shares: Map<string, number>
  private readonly release: () => void
  /** Where a request holds its entry (this registration's own symbol). */
  private readonly admitted = Symbol('fastify-tollgate: in flight')

  constructor (readonly plan: ProtectPlan, readonly signals: Signals, private readonly clock: () => number, readonly registration: string | undefined) {
    this.law = new ConcurrencyLimit({ min: plan.minConcurrency, max: plan.maxConcurrency })
    this.shares = sharesOf(plan.priorities)
    this.intervalStart = clock()
    const kind = overloaded(plan.status)
    this.reason = { bodies: new RefusalBodies(kind), error: (limit) => new OverloadedError(limit, plan.status) }
    this.release = openProtection(this)
  }

  get limit (): number { return this.law.limit }
  get overload (): number { return this.law.overload }
  get ratios (): Signals['last'] { return this.signals.last }

  /** The share of the limit of `tier`, one of the app layer's (config/protect.ts lists them all); 1 on a critical route. */
  shareOf (tier: string, critical: boolean): number {
    return critical ? 1 : this.shares.get(tier) as number
  }

  /** Whether a request of `share` is admitted now; the interval moves on first when it is over. */
  admits (share: number): boolean {
    const now = this.clock()
    if (now - this.intervalStart >= this.plan.intervalMs) this.tick(now)
    return this.law.admits(this.inFlight, share)
  }

  /**
   * Counts an admitted request in flight until its handler's work is over: at
   * `onSend` (its reply is being sent: the handler returned, or failed), or when
   * its response finished without one (a hijacked reply). A client that goes
   * away does not end it: its handler still holds what it holds.
   */
  enter (request: FastifyRequest, reply: FastifyReply, latency: RouteLatency | undefined): void {
    if (++this.inFlight > this.peak) this.peak = this.inFlight
    const entry: InFlight = { started: this.clock(), latency, left: false }
    ;(request as unknown as Record<symbol, InFlight>)[this.admitted] = entry
    reply.raw.once('finish', () => { this.leave(entry) })
  }

  /** The `onSend` hook (added for every route of the plugin's context): an admitted request's work is over. */
  readonly onSend = (request: FastifyRequest, _reply: FastifyReply, payload: unknown, done: (error: null, payload: unknown) => void): void => {
    const entry = (request as unknown as Record<symbol, InFlight | undefined>)[this.admitted]
    if (entry !== undefined) this.leave(entry)
    done(null, payload)
  }

  /** Counts a shed request, and returns the `Retry-After` it gets, in ms. */
  noteShed (share: number): number {
    this.shed++
    return Math.min(MAX_RETRY_MS, Math.max(1000, this.law.recoveryMs(this.inFlight, share, this.plan.intervalMs)))
  }

  close (): void {
    this.signals.close()
    this.release()
  }

  private leave (entry: InFlight): void {
    if (entry.left) return
    entry.left = true
    this.inFlight--
    entry.latency?.add(this.clock() - entry.started)
  }

  private tick (now: number): void {
    this.law.update({ overload: this.signals.read(), peak: this.peak, shed: this.shed })
    this.peak = this.inFlight
    this.shed = 0
    this.intervalStart = now
  }
}
