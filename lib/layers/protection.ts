/**
 * One registration's capacity protection in this process: a limit on the
 * requests in flight (engine/concurrency-limit.ts), moved once per interval by
 * the health signals (protect-signals.ts) and split by priority. layers/protect.ts
 * admits and sheds with it.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteHandlerMethod } from 'fastify'
import type { ProtectPlan } from '../config/plan.js'
import { ConcurrencyLimit } from '../engine/concurrency-limit.js'
import { OverloadedError, overloaded } from '../output/errors.js'
import { openProtection, type ProtectionState } from '../output/protection-state.js'
import { RefusalBodies } from '../output/refusal-reply.js'
import type { RefusalReason } from './outcome.js'
import type { RouteLatency, Signals } from './protect-signals.js'
import { isThenable } from './promises.js'
import { PriorityLevels, type Level } from '../engine/priority-levels.js'

/** An admitted request in flight: when it was admitted, its route's latency (until its handler is over), and whether it left. */
interface InFlight {
  readonly level: Level
  readonly started: number
  latency: RouteLatency | undefined
  readonly reply: FastifyReply
  left: boolean
  /** Whether the promise its handler returned settled (on the routes the plugin wraps). */
  handled: boolean
  /** While its client's going away is being told (one turn): a promise settled then settled because of it. */
  closing: boolean
}

/** The most quiet intervals a tick lets the overload decay over (from MAX_OVERLOAD to 1 takes 7). */
const MAX_QUIET_INTERVALS = 64

/** The longest `Retry-After` of a shed request, in ms. */
const MAX_RETRY_MS = 60_000

/**
 * How long a request whose client went away still counts when nothing tells its
 * end (a handler that never sends, on a route the plugin could not wrap), in ms.
 */
export const ABANDONED_MAX_MS = 60_000

/** One registration's capacity protection in this process. */
export class Protection implements ProtectionState {
  private readonly law: ConcurrencyLimit
  readonly reason: RefusalReason
  private readonly priorities: PriorityLevels
  /** The interval's limit in use: the least limit under which its admissions would all have passed. */
  private inUse = 0
  private shed = 0
  private intervalStart: number
  /** Each tier's level. */
  private readonly tierLevels: Map<string, Level>
  private readonly release: () => void
  /** Requests whose client went away before their reply was sent, and when: swept each interval. */
  private readonly abandoned = new Map<InFlight, number>()
  /** Where a request holds its entry (this registration's own symbol). */
  private readonly admitted = Symbol('fastify-tollgate: in flight')

  constructor (readonly plan: ProtectPlan, readonly signals: Signals, private readonly clock: () => number, readonly registration: string | undefined) {
    this.law = new ConcurrencyLimit({ min: plan.minConcurrency, max: plan.maxConcurrency }, plan.initialConcurrency)
    this.priorities = new PriorityLevels(plan.priorities.length + 1)
    this.tierLevels = new Map(plan.priorities.map((tier, i) => [tier, this.priorities.levels[i + 1] as Level]))
    this.intervalStart = clock()
    const kind = overloaded(plan.status)
    this.reason = { bodies: new RefusalBodies(kind), error: (limit) => new OverloadedError(limit, plan.status) }
    this.release = openProtection(this)
  }

  get inFlight (): number { return this.priorities.total }
  get limit (): number { return this.law.limit }
  /** The requests in flight `level` may have now, its own and the higher levels'. */
  capacityOf (level: Level): number { return this.priorities.capacity(level, this.law.limit) }
  get overload (): number { return this.law.overload }
  get ratios (): Signals['last'] { return this.signals.last }

  /** The level of `tier`, one of the app layer's (config/protect.ts lists them all); critical routes' on a critical route. */
  levelOf (tier: string, critical: boolean): Level {
    return (critical ? this.priorities.levels[0] : this.tierLevels.get(tier)) as Level
  }

  /** Whether a request of `level` is admitted now; the interval moves on first when it is over. */
  admits (level: Level): boolean {
    this.refresh()
    return this.priorities.admits(level, this.law.limit)
  }

  /** Ends the interval when it is over (or when the clock went back), as an admission or a scrape of the metrics finds it. */
  refresh (): void {
    const now = this.clock()
    const elapsed = now - this.intervalStart
    if (elapsed >= this.plan.intervalMs || elapsed < 0) this.tick(now)
  }

  /**
   * `handler`, telling this protection when it is over (a promise it returns, once
   * settled): a request whose client went away leaves then (Fastify sends no reply
   * for it), and a hijacked reply leaves the latency signal. A thenable that is no
   * native promise is made one, so that its `then` runs once (a query builder's
   * runs its query at each).
   */
  watchHandler (handler: RouteHandlerMethod): RouteHandlerMethod {
    const returned = (request: FastifyRequest, reply: FastifyReply, value: unknown): unknown => this.handlerReturned(request, reply, value)
    return function tollgateProtected (this: FastifyInstance, request, reply) {
      return returned(request, reply, handler.call(this, request, reply))
    }
  }

  /** The handler of an admitted request returned `value`; returns what Fastify gets in its place. */
  private handlerReturned (request: FastifyRequest, reply: FastifyReply, value: unknown): unknown {
    const entry = (request as unknown as Record<symbol, InFlight | undefined>)[this.admitted]
    if (entry === undefined) return value
    // The reply itself (`return reply`): the handler answers later, as a callback's does.
    if (value === reply || !isThenable(value)) {
      // A handler that answers later is not over yet; one that hijacked as it returned ends its latency.
      if (reply.sent) this.endLatency(entry)
      return value
    }
    // A native promise as is; any other thenable (a subclass's own then included) made one, so that its then runs once.
    const promise = Object.getPrototypeOf(value) === Promise.prototype ? value as Promise<unknown> : Promise.resolve(value)
    const over = (): void => { this.handlerOver(entry) }
    promise.then(over, over)
    return promise
  }

  /** Its handler's promise settled: a request whose client went away leaves; a hijacked reply (or one sent) ends its latency sample. */
  private handlerOver (entry: InFlight): void {
    entry.handled = true
    // An entry that left is in neither case that matters: not abandoned, its latency already ended.
    // A promise that settled as its client went away followed the reply (an async handler's `return reply`): it tells nothing.
    if (this.abandoned.has(entry) && !entry.closing) this.leave(entry)
    else if (entry.reply.sent) this.endLatency(entry)
  }

  /**
   * Counts an admitted request in flight until its handler's work is over: at
   * `onSend` (its reply is being sent: the handler returned, or failed), or for a
   * hijacked reply when its connection closes. A client that goes away does not
   * end it: its handler still holds what it holds. It ends when the promise its
   * handler returned settles (`watchHandler`), or else is swept at the end of an
   * interval once its reply was sent without `onSend`, or ABANDONED_MAX_MS after.
   */
  enter (level: Level, request: FastifyRequest, reply: FastifyReply, latency: RouteLatency | undefined): void {
    const use = this.priorities.enter(level)
    if (use > this.inUse) this.inUse = use
    const started = this.clock()
    latency?.enter(started)
    const entry: InFlight = { level, started, latency, reply, left: false, handled: false, closing: false }
    ;(request as unknown as Record<symbol, InFlight>)[this.admitted] = entry
    // A client gone before its admission (during a slow hook or upload): its request is abandoned from the start.
    if (reply.raw.destroyed) {
      this.abandoned.set(entry, started)
      return
    }
    reply.raw.once('close', () => {
      if (entry.left) return
      // Sent (a hijacked reply's end), or its handler over without a reply: it leaves now; else when its handler is over.
      if (reply.sent || entry.handled) {
        this.leave(entry)
        return
      }
      this.abandoned.set(entry, this.clock())
      entry.closing = true
      setImmediate(() => { entry.closing = false })
    })
  }

  /** The `onSend` hook (added for every route of the plugin's context): an admitted request's work is over. */
  readonly onSend = (request: FastifyRequest, _reply: FastifyReply, payload: unknown, done: (error: null, payload: unknown) => void): void => {
    const entry = (request as unknown as Record<symbol, InFlight | undefined>)[this.admitted]
    if (entry !== undefined) this.leave(entry)
    done(null, payload)
  }

  /** Counts a shed request, and returns the `Retry-After` it gets, in ms. */
  noteShed (level: Level): number {
    this.shed++
    return Math.min(MAX_RETRY_MS, Math.max(1000, this.law.recoveryMs(this.priorities.countUpTo(level), level.share, this.plan.intervalMs)))
  }

  close (): void {
    this.signals.close()
    this.release()
  }

  private leave (entry: InFlight): void {
    if (entry.left) return
    entry.left = true
    this.priorities.leave(entry.level)
    this.abandoned.delete(entry)
    this.endLatency(entry)
  }

  /** Its handler is over: a sample of its route's latency (a hijacked reply stays in flight until its connection closes). */
  private endLatency (entry: InFlight): void {
    entry.latency?.leave(entry.started, this.clock())
    entry.latency = undefined
  }

  /**
   * The interval's end: the intervals that passed without an admission let the
   * overload decay, then the signals as read now move the limit. A clock that went
   * back starts a new interval.
   */
  private tick (now: number): void {
    const { intervalMs } = this.plan
    if (now >= this.intervalStart) {
      this.law.rest(Math.min(MAX_QUIET_INTERVALS, Math.floor((now - this.intervalStart) / intervalMs) - 1))
      this.law.update({ overload: this.signals.read(now), inUse: this.inUse, shed: this.shed })
    }
    for (const [entry, since] of this.abandoned) {
      if (entry.reply.sent || now - since >= ABANDONED_MAX_MS) this.leave(entry)
      // A clock that went back restarts the bound.
      else if (now < since) this.abandoned.set(entry, now)
    }
    this.inUse = this.priorities.inUse()
    this.shed = 0
    this.intervalStart = now
  }
}
