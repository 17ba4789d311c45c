/**
 * `edge.mode: 'settle'`: the edge decides in this process, never waiting for the
 * shared store, from tokens each replica reserved in the shared bucket; every
 * `intervalMs` one call (per node) settles with the store.
 *
 * Each replica keeps, per key, the tokens it reserved in the shared bucket and
 * spends them without asking. A settlement takes, per key used since the last:
 * the tokens spent without a reservation, gives back a reservation larger than
 * the replica needs, and reserves its next tokens (twice what it spent in the last
 * interval, at least max(1, B / N), at most B; N the live replicas), all
 * atomically in the shared bucket. Reserved tokens are out of the bucket, so the
 * replicas together never spend a reserved token twice. The one spend without a
 * reservation is a key's first at a replica: until its first settlement is
 * answered it may spend max(1, B / N), taken from the shared bucket afterwards
 * whatever it holds (it may go into debt, refilled like any shortfall); after it,
 * only what settlements reserved. So over any t seconds a key is admitted at most
 * B + R·t, plus max(1, B / N) for each replica that starts a view of it meanwhile
 * (a view is kept until the shared bucket is full again), whatever the event
 * loop's delays and the settlements' latency: a settlement answered late gives
 * nothing more meanwhile. A client pinned to one replica gets max(1, B / N) at
 * once, then its reservation doubles at each settlement up to the whole quota.
 *
 * When the store is away (a settlement failed or the breaker refused it, or one
 * is unanswered after `answerDeadlineMs`, judged one poll for I/O after its timer)
 * the edge keeps deciding: each view spends what it holds, then a credit earned at
 * this replica's share of the refill (R / N a second, at most max(1, B / N); none
 * at once), and counts it as spent without a reservation; the first settlement
 * answered takes it all. A settlement unanswered after `answerDeadlineMs` is taken
 * as applied (its debits are not sent again, nothing reserved) and the next one
 * goes; if its answer comes later, what it did not take goes again and what it
 * reserved goes back.
 *
 * Here the edge (the store interface, the settlements' schedule, its health);
 * view.ts: one key's view (what it reserved, spent and sent); debits.ts: what a
 * settlement sends and what its answers change; settlement.ts: its call to the
 * store and the deadline; orphans.ts: what dropped views leave to settle.
 */
import { msUntil, tokensAt } from '../../engine/bucket.js'
import { type BucketRequest, type BucketSettlement, type Store, type StoreDecision, type StoreLogger, type StoreReading } from '../../types/store.js'
import { storeMethod } from '../store-method.js'
import { publishStore } from '../../output/diagnostics.js'
import { shareOf, sharePolicy } from '../../engine/share.js'
import { collectDebits, takeBack, type Ledger, type Outgoing } from './debits.js'
import { Orphans } from './orphans.js'
import { callSettle } from './settlement.js'
import { View } from './view.js'

/** Most keys viewed at once; past it the oldest view is dropped (what it spent and reserved is still settled). */
export const MAX_VIEWS = 100_000

export interface SettlingEdgeOptions {
  /** The shared store: its `settle` is used. */
  store: Store & Required<Pick<Store, 'settle'>>
  /** The live replicas now (≥ 1). */
  replicas: () => number
  /** Time between two settlements, in ms. */
  intervalMs: number
  /** This process's clock, in ms. */
  clock: () => number
  /** Most keys viewed at once. Default `MAX_VIEWS`. */
  maxViews?: number | undefined
  /** A settlement unanswered this long (real ms) is taken as applied. Default max(1 000, 10 × `intervalMs`). */
  answerDeadlineMs?: number | undefined
}

export class SettlingEdge implements Store {
  private readonly shared: Store & Required<Pick<Store, 'settle'>>
  private readonly clock: () => number
  private readonly replicas: () => number
  private readonly intervalMs: number
  private readonly maxViews: number
  private readonly answerDeadlineMs: number
  private readonly views = new Map<string, View>()
  /** What dropped views spent without a reservation, less what they had reserved, by key: settled next time. */
  private readonly orphans: Orphans
  /** The views and the orphans, as a settlement's debits are collected from and taken back into them. */
  private readonly ledger: Ledger
  private healthy = true
  /** When the edge last failed over (this process's clock): views earn their away credit from then. */
  private awaySinceMs = 0
  /** `close()` has begun: settlements reserve nothing more. */
  private closing = false
  /** The settlement on its way, until the store answers. */
  private inFlight: Promise<void> | undefined
  /** The tokens the settlement on its way spends or gives back. */
  private sendingTotal = 0
  /** The settlement that follows the one on its way. */
  private next: Promise<void> | undefined
  private timer: NodeJS.Timeout | undefined
  private logger: StoreLogger | undefined

  constructor (options: SettlingEdgeOptions) {
    this.shared = options.store
    this.clock = options.clock
    this.replicas = options.replicas
    this.intervalMs = options.intervalMs
    this.maxViews = options.maxViews ?? MAX_VIEWS
    this.answerDeadlineMs = options.answerDeadlineMs ?? Math.max(1000, 10 * options.intervalMs)
    this.orphans = new Orphans(2 * this.maxViews, (debit) => {
      this.logger?.warn({ key: debit.key, tokens: debit.spent }, 'fastify-tollgate: too many edge settlements waiting; one dropped')
    })
    this.ledger = { views: this.views, orphans: this.orphans }
    this.timer = setInterval(() => { void this.settleNow() }, options.intervalMs)
    this.timer.unref()
  }

  useLogger (logger: StoreLogger): void {
    this.logger = logger
  }

  consume (buckets: readonly BucketRequest[]): StoreDecision {
    const nowMs = this.clock()
    const views = buckets.map((bucket) => this.viewOf(bucket, nowMs))
    if (!this.healthy) {
      const replicas = this.replicas()
      for (const view of views) view.away(nowMs, this.awaySinceMs, sharePolicy(view.policy, 1, replicas))
    }
    let allowed = true
    let retryAfterMs = 0
    views.forEach((view, i) => {
      const cost = (buckets[i] as BucketRequest).cost
      if (view.allowance >= cost) return
      allowed = false
      view.refused(cost)
      // The next settlement reserves what the shared bucket holds by then: not sooner.
      const wait = Math.max(msUntil(tokensAt(view, view.policy, nowMs) + view.allowance, cost, view.policy), this.intervalMs)
      if (wait > retryAfterMs) retryAfterMs = wait
    })
    if (allowed) views.forEach((view, i) => { view.spend((buckets[i] as BucketRequest).cost) })
    const decision: StoreDecision = { allowed, tokens: views.map((view) => this.tokensOf(view, nowMs)), retryAfterMs }
    if (!this.healthy) decision.degraded = 'local'
    return decision
  }

  /** The shared bucket as the store holds it (this replica's reservation and unsettled spends not counted). */
  peek (bucket: BucketRequest): StoreReading | Promise<StoreReading> {
    return storeMethod(this.shared, 'peek')(bucket)
  }

  /** Gives tokens back in the shared store; this replica's view takes the bucket's new level at its next settlement. */
  async refund (bucket: BucketRequest): Promise<number> {
    return storeMethod(this.shared, 'refund')(bucket)
  }

  /** Deletes the shared bucket; this replica forgets its view (its reservation and unsettled spends with it). */
  async reset (key: string): Promise<void> {
    this.views.delete(key)
    this.orphans.delete(key)
    await storeMethod(this.shared, 'reset')(key)
  }

  /**
   * Settles what is left (spends, and reservations given back), waiting at most
   * `intervalMs`, and no more than a second, for the answers; then stops. What
   * could not be settled in that time is logged, and dropped.
   */
  async close (): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer)
    this.timer = undefined
    for (const view of this.views.values()) view.forgetSpends() // reserve nothing more
    this.closing = true
    let timer: NodeJS.Timeout | undefined
    const given = new Promise<void>((resolve) => { timer = setTimeout(resolve, Math.min(this.intervalMs, 1000)) })
    await Promise.race([this.settleNow(), given])
    clearTimeout(timer)
    let unsettled = this.sendingTotal
    for (const view of this.views.values()) unsettled += view.held
    for (const orphan of this.orphans.values()) unsettled += Math.abs(orphan.spent)
    if (unsettled > 0) this.logger?.warn({ tokens: unsettled }, 'fastify-tollgate: closing with edge tokens spent or reserved that the shared store did not settle')
    this.views.clear()
    this.publish('closed')
  }

  /**
   * Sends, for every key asked for or spent since the last settlement, what was
   * spent without a reservation and the reservation to keep; takes back the
   * shared levels and the tokens reserved. Views of keys neither asked for nor
   * spent, whose shared bucket is full by now, are dropped (their reservation
   * given back). Resolves when the store answers. While a settlement is
   * unanswered, none other is sent: one follows once it is answered (or taken as
   * applied after `answerDeadlineMs`), and the call resolves after that one.
   */
  settleNow (): Promise<void> {
    const nowMs = this.clock()
    if (this.inFlight !== undefined) return this.following(this.inFlight)
    const outgoing = collectDebits(this.ledger, nowMs, this.closing, () => this.replicas())
    if (outgoing.debits.length === 0) return Promise.resolve()
    return this.send(outgoing)
  }

  /**
   * The settlement that follows `inFlight`, the one on its way (one, however many
   * ask). A late answer is no failure: meanwhile the views spend only what they
   * hold (see `View.allowance`), so a busy event loop or a slow store admits no more.
   */
  private following (inFlight: Promise<void>): Promise<void> {
    this.next ??= inFlight.then(async () => {
      this.next = undefined
      return this.settleNow()
    })
    return this.next
  }

  /** Sends `outgoing`, given up on after `answerDeadlineMs`; resolves once its answers are taken back. */
  private send (outgoing: Outgoing): Promise<void> {
    const { debits } = outgoing
    const { answers, clear } = callSettle(this.shared, debits, {
      deadlineMs: this.answerDeadlineMs,
      givenUp: () => { this.failing('no answer to a settlement within its deadline: taken as applied') },
      late: (debit) => { this.orphans.add(debit) }
    })
    const call = answers
      .then((settlements) => { this.settled(outgoing, settlements) }, (error: unknown) => {
        this.settled(outgoing, debits.map(() => ({ tokens: NaN, reserved: 0 })))
        this.failing(error)
      })
      .finally(() => {
        clear()
        this.inFlight = undefined
        this.sendingTotal = 0
      })
    this.inFlight = call
    this.sendingTotal = debits.reduce((total, debit) => total + Math.abs(debit.spent), 0)
    return call
  }

  /** Takes back a settlement's answers (see `takeBack`); the edge fails over, or back, on them. */
  private settled (outgoing: Outgoing, settlements: readonly BucketSettlement[]): void {
    if (!takeBack(this.ledger, outgoing, settlements, this.clock())) {
      this.failing('the store did not take a settlement')
    } else if (!this.healthy && settlements.every((settlement) => settlement.tokens !== Infinity)) {
      this.healthy = true
      for (const view of this.views.values()) view.back()
      this.logger?.info({ store: 'settle' }, 'fastify-tollgate: settlement answered; the edge is back on the shared quota')
      this.publish('restored')
    }
  }

  /** The store is away: views earn their credit from now until a settlement is answered (see `View.away`); logged once. */
  private failing (reason: unknown): void {
    if (!this.healthy) return
    this.healthy = false
    this.awaySinceMs = this.clock()
    this.logger?.warn({ err: reason }, 'fastify-tollgate: settlement failed; the edge spends what this replica holds, then its share of the refill, until the shared store answers')
    this.publish('degraded')
  }

  /** Publishes a health event (publishStore drops those after `'closed'`: a settlement given up on after close). */
  private publish (event: 'degraded' | 'restored' | 'closed'): void {
    publishStore(this, 'settle', this.shared.keyspace?.prefix ?? '', event, !this.healthy, this.replicas())
  }

  /** What the headers show: this replica's allowance and the tokens left in the shared bucket, at most capacity. */
  private tokensOf (view: View, nowMs: number): number {
    return Math.min(view.policy.capacity, view.allowance + Math.max(0, tokensAt(view, view.policy, nowMs)))
  }

  private viewOf (bucket: BucketRequest, nowMs: number): View {
    let view = this.views.get(bucket.key)
    if (view === undefined) {
      if (this.views.size >= this.maxViews) this.dropOldest()
      // A key whose dropped view left spends to settle starts with no share: its bucket may be drained.
      const share = this.orphans.spentOf(bucket.key) > 0 ? 0 : shareOf(bucket.policy.capacity, 1, this.replicas())
      view = new View(bucket.policy, nowMs, share)
      this.views.set(bucket.key, view)
    } else {
      view.touch()
    }
    return view
  }

  /** Drops the view seen first; what it spent unreserved and its reservation are settled next time. */
  private dropOldest (): void {
    const [key, view] = this.views.entries().next().value as [string, View]
    this.views.delete(key)
    this.orphans.add(view.leftOver(key))
    // A settlement on its way for it comes back as an orphan (see `takeBack` in debits.ts).
  }
}
