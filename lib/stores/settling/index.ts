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
 * reservation is a key's first at a replica: until its first settlement it may
 * spend max(1, B / N), taken from the shared bucket afterwards whatever it holds
 * (it may go into debt, refilled like any shortfall). A key is admitted at most
 * B + R·t over any t seconds, plus max(1, B / N) for each replica that starts a
 * view of a key others have drained (a view is kept until the shared bucket is
 * full again). A client pinned to one replica gets max(1, B / N) at once, then
 * its reservation doubles at each settlement up to the whole quota.
 *
 * When settlements fail (the store is down, or a settlement has waited
 * `intervalMs` unanswered), the edge decides by each replica's share (as
 * `'replica-share'`) and counts what it spends; the first settlement answered
 * takes it all. A settlement unanswered after `answerDeadlineMs` is taken as
 * applied (its debits are not sent again) and the next one goes; if its answer
 * comes later, what it did not take goes again and what it reserved goes back.
 */
import { msUntil, tokensAt } from '../../engine/bucket.js'
import type { BucketPolicy, BucketState } from '../../types/engine.js'
import { type BucketDebit, type BucketRequest, type BucketSettlement, type Store, type StoreDecision, type StoreLogger, type StoreReading } from '../../types/store.js'
import { storeMethod } from '../store-method.js'
import { publishStore } from '../../output/diagnostics.js'
import { shareOf } from '../../engine/share.js'
import { ReplicaShareEdge } from '../replica-share.js'

/** Most keys viewed at once; past it the oldest view is dropped (what it spent and reserved is still settled). */
export const MAX_VIEWS = 100_000

/** This replica's view of one shared bucket. */
class View implements BucketState {
  /** The shared bucket's tokens (reservations out) at `lastMs`, as the last settlement left them. */
  tokens: number
  lastMs: number
  /** Tokens reserved for this replica in the shared bucket, not spent yet. */
  reserved = 0
  /** Tokens this replica may spend without a reservation (a new view's share, until its first settlement). */
  share: number
  /** Tokens spent without a reservation, not sent yet. */
  unreserved = 0
  /** Tokens spent since the last settlement was sent; and in the interval before it. */
  spent = 0
  spentBefore = 0
  /** In the settlement on its way: the unreserved spends and the reserved tokens given back. */
  sendingSpent = 0
  sendingReturned = 0
  /** Asked for since the last settlement was sent. */
  touched = true

  /** No settlement of this view was answered yet. */
  first = true
  /** The largest cost refused and not served since (a manual `consume`): reservations cover it until it is. */
  asked = 0

  constructor (readonly policy: BucketPolicy, nowMs: number, share: number) {
    this.share = share
    this.tokens = policy.capacity - share
    this.lastMs = nowMs
  }

  /** What this replica may spend now. */
  get allowance (): number {
    return this.reserved + this.share
  }

  /** Spends `cost`: reserved tokens first. A cost asked for before is served. */
  spend (cost: number): void {
    if (cost >= this.asked) this.asked = 0
    const fromReserve = Math.min(this.reserved, cost)
    this.reserved -= fromReserve
    const rest = cost - fromReserve
    this.share -= rest
    this.unreserved += rest
    this.spent += cost
  }
}

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
  private readonly orphans = new Map<string, BucketDebit>()
  /** Decides while settlements fail. */
  private readonly fallback: ReplicaShareEdge
  private healthy = true
  /** `close()` has begun: settlements reserve nothing more. */
  private closing = false
  /** The settlement on its way, until the store answers; sent at `sentAtMs`. */
  private inFlight: Promise<void> | undefined
  private sentAtMs = 0
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
    this.fallback = new ReplicaShareEdge(options.replicas, options.clock)
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
      const decision = this.fallback.consume(buckets)
      if (decision.allowed) {
        views.forEach((view, i) => {
          const cost = (buckets[i] as BucketRequest).cost
          view.unreserved += cost
          view.spent += cost
        })
      }
      return { ...decision, degraded: 'local' }
    }
    let allowed = true
    let retryAfterMs = 0
    views.forEach((view, i) => {
      const cost = (buckets[i] as BucketRequest).cost
      if (view.allowance >= cost) return
      allowed = false
      if (cost > view.asked) view.asked = cost
      // The next settlement reserves what the shared bucket holds by then: not sooner.
      const wait = Math.max(msUntil(tokensAt(view, view.policy, nowMs) + view.allowance, cost, view.policy), this.intervalMs)
      if (wait > retryAfterMs) retryAfterMs = wait
    })
    if (allowed) views.forEach((view, i) => { view.spend((buckets[i] as BucketRequest).cost) })
    return { allowed, tokens: views.map((view) => this.tokensOf(view, nowMs)), retryAfterMs }
  }

  /** The shared bucket as the store holds it (this replica's reservation and unsettled spends not counted). */
  peek (bucket: BucketRequest): StoreReading | Promise<StoreReading> {
    return storeMethod(this.shared, 'peek')(bucket)
  }

  /** Gives tokens back in the shared store; this replica's view takes the bucket's new level at its next settlement. */
  async refund (bucket: BucketRequest): Promise<number> {
    const left = await storeMethod(this.shared, 'refund')(bucket)
    this.fallback.refund(bucket)
    return left
  }

  /** Deletes the shared bucket; this replica forgets its view (its reservation and unsettled spends with it). */
  async reset (key: string): Promise<void> {
    this.views.delete(key)
    this.orphans.delete(key)
    this.fallback.reset(key)
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
    for (const view of this.views.values()) view.spentBefore = view.spent = 0 // reserve nothing more
    this.closing = true
    let timer: NodeJS.Timeout | undefined
    const given = new Promise<void>((resolve) => { timer = setTimeout(resolve, Math.min(this.intervalMs, 1000)) })
    await Promise.race([this.settleNow(), given])
    clearTimeout(timer)
    let unsettled = this.sendingTotal
    for (const view of this.views.values()) unsettled += view.unreserved + view.reserved
    for (const orphan of this.orphans.values()) unsettled += Math.abs(orphan.spent)
    if (unsettled > 0) this.logger?.warn({ tokens: unsettled }, 'fastify-tollgate: closing with edge tokens spent or reserved that the shared store did not settle')
    this.views.clear()
    this.fallback.close()
    this.publish('closed')
  }

  /**
   * Sends, for every key asked for or spent since the last settlement, what was
   * spent without a reservation and the reservation to keep; takes back the
   * shared levels and the tokens reserved. Views of keys neither asked for nor
   * spent, whose shared bucket is full by now, are dropped (their reservation
   * given back). Resolves when the store answers. While a settlement is
   * unanswered, none other is sent: one follows once it is answered (or taken as
   * applied after `answerDeadlineMs`), and the call resolves after that one. Once
   * a settlement has waited `intervalMs`, the edge decides by this replica's
   * share until a settlement is answered.
   */
  settleNow (): Promise<void> {
    const nowMs = this.clock()
    if (this.inFlight !== undefined) {
      if (nowMs - this.sentAtMs >= this.intervalMs) this.failing('no answer to the last settlement within settleIntervalMs')
      this.next ??= this.inFlight.then(async () => {
        this.next = undefined
        return this.settleNow()
      })
      return this.next
    }
    const minimum = (view: View): number => shareOf(view.policy.capacity, 1, this.replicas())
    const debits: BucketDebit[] = []
    const sent: Array<View | undefined> = []
    for (const [key, view] of this.views) {
      const idle = !view.touched && view.unreserved === 0
      if (idle && tokensAt(view, view.policy, nowMs) + view.reserved >= view.policy.capacity) {
        // Full again: the view knows nothing the bucket does not; its reservation goes back.
        this.views.delete(key)
        this.orphan({ key, policy: view.policy, spent: -view.reserved, reserve: 0 })
        continue
      }
      if (idle && !this.closing) {
        // An idle view keeps a reservation of its minimum, so that a client that comes back in a
        // burst finds it here: the excess goes back, a shortfall is topped up once the shared
        // bucket (as last seen, refilled since) holds all of it. Otherwise nothing to send.
        const short = minimum(view) - view.reserved
        if (Math.abs(short) < 1e-9 || (short > 0 && tokensAt(view, view.policy, nowMs) < short)) continue
      }
      // A view's first settlement reserves no more than what is left of its first share: the other
      // replicas' first shares, not settled yet, may be spending the bucket's other tokens.
      const wanted = view.first ? view.share : Math.max(minimum(view), 2 * Math.max(view.spent, view.spentBefore), view.asked)
      const target = this.closing ? 0 : Math.min(view.policy.capacity, wanted)
      const returned = Math.max(0, view.reserved - target)
      const debit = { key, policy: view.policy, spent: view.unreserved - returned, reserve: target - view.reserved + returned }
      // An idle view holding what it asked for (a cost above its minimum): nothing to send.
      if (idle && debit.spent === 0 && debit.reserve === 0) continue
      debits.push(debit)
      sent.push(view)
      view.reserved -= returned
      view.sendingReturned = returned
      view.sendingSpent = view.unreserved
      view.unreserved = 0
      view.spentBefore = view.spent
      view.spent = 0
      view.touched = false
    }
    for (const orphan of this.orphans.values()) {
      debits.push(orphan)
      sent.push(undefined)
    }
    this.orphans.clear()
    if (debits.length === 0) return Promise.resolve()
    let deadline: NodeJS.Timeout | undefined
    const settlement = Promise.resolve().then(async () => this.shared.settle(debits))
    const givenUp = new Promise<readonly BucketSettlement[]>((resolve) => {
      deadline = setTimeout(() => {
        this.failing('no answer to a settlement within its deadline: taken as applied')
        resolve(debits.map(() => ({ tokens: Infinity, reserved: 0 })))
        // Its answer, if one comes: what it did not take goes again, what it reserved goes back.
        settlement.then((late) => {
          late.forEach(({ tokens, reserved }, i) => {
            const debit = debits[i] as BucketDebit
            this.orphan(Number.isNaN(tokens) ? { ...debit, reserve: 0 } : { key: debit.key, policy: debit.policy, spent: -reserved, reserve: 0 })
          })
        }, () => { for (const debit of debits) this.orphan({ ...debit, reserve: 0 }) })
      }, this.answerDeadlineMs)
      deadline.unref()
    })
    const call = Promise.race([settlement, givenUp])
      .then((settlements) => { this.settled(debits, sent, settlements) }, (error: unknown) => {
        this.settled(debits, sent, debits.map(() => ({ tokens: NaN, reserved: 0 })))
        this.failing(error)
      })
      .finally(() => {
        clearTimeout(deadline)
        this.inFlight = undefined
        this.sendingTotal = 0
      })
    this.inFlight = call
    this.sentAtMs = nowMs
    this.sendingTotal = debits.reduce((total, debit) => total + Math.abs(debit.spent), 0)
    return call
  }

  /**
   * Takes back a settlement. `tokens: NaN`: that debit was not taken, and goes
   * again; `tokens: Infinity`: no answer (taken as applied, nothing reserved).
   */
  private settled (debits: readonly BucketDebit[], sent: ReadonlyArray<View | undefined>, settlements: readonly BucketSettlement[]): void {
    const nowMs = this.clock()
    let taken = true
    sent.forEach((view, i) => {
      const debit = debits[i] as BucketDebit
      const { tokens, reserved } = settlements[i] as BucketSettlement
      const current = view !== undefined && this.views.get(debit.key) === view
      if (Number.isNaN(tokens)) {
        taken = false
        if (!current) {
          // A dropped view's (or an orphan's) settlement: it joins the orphans.
          this.orphan({ ...debit, reserve: 0 })
          return
        }
        view.unreserved += view.sendingSpent
        view.reserved += view.sendingReturned
        view.touched = true
      } else if (!current) {
        // A view dropped while its settlement was on its way: what it reserved goes back.
        this.orphan({ key: debit.key, policy: debit.policy, spent: -reserved, reserve: 0 })
        return
      } else {
        view.reserved += reserved
        view.share = 0
        view.first = false
        if (tokens !== Infinity) {
          view.tokens = tokens
          view.lastMs = nowMs
        }
      }
      view.sendingSpent = view.sendingReturned = 0
    })
    if (!taken) {
      this.failing('the store did not take a settlement')
    } else if (!this.healthy && settlements.every((settlement) => settlement.tokens !== Infinity)) {
      this.healthy = true
      this.logger?.info({ store: 'settle' }, 'fastify-tollgate: settlement answered; the edge is back on the shared quota')
      this.publish('restored')
    }
  }

  /** Decides by this replica's share until a settlement is answered; logged once. */
  private failing (reason: unknown): void {
    if (!this.healthy) return
    this.healthy = false
    this.logger?.warn({ err: reason }, 'fastify-tollgate: settlement failed; the edge enforces this replica\'s share until the shared store answers')
    this.publish('degraded')
  }

  /** Publishes a health event (publishStore drops those after `'closed'`: a settlement given up on after close). */
  private publish (event: 'degraded' | 'restored' | 'closed'): void {
    publishStore(this, 'settle', this.shared.keyspace?.prefix ?? '', event, !this.healthy, this.replicas())
  }

  /** Keeps `debit` (spent and given back) for the next settlement, merged with what is kept for its key; at most 2 × `maxViews` keys. */
  private orphan (debit: BucketDebit): void {
    if (debit.spent === 0) return
    const known = this.orphans.get(debit.key)
    if (known === undefined && this.orphans.size >= 2 * this.maxViews) {
      this.logger?.warn({ key: debit.key, tokens: debit.spent }, 'fastify-tollgate: too many edge settlements waiting; one dropped')
      return
    }
    this.orphans.set(debit.key, { key: debit.key, policy: debit.policy, spent: debit.spent + (known?.spent ?? 0), reserve: 0 })
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
      const share = (this.orphans.get(bucket.key)?.spent ?? 0) > 0 ? 0 : shareOf(bucket.policy.capacity, 1, this.replicas())
      view = new View(bucket.policy, nowMs, share)
      this.views.set(bucket.key, view)
    } else {
      view.touched = true
    }
    return view
  }

  /** Drops the view seen first; what it spent unreserved and its reservation are settled next time. */
  private dropOldest (): void {
    const [key, view] = this.views.entries().next().value as [string, View]
    this.views.delete(key)
    this.orphan({ key, policy: view.policy, spent: view.unreserved - view.reserved, reserve: 0 })
    // A settlement on its way for it comes back as an orphan (see `settled`).
  }
}
