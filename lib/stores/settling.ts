/**
 * `edge.mode: 'settle'`: the edge decides from this replica's view of each shared
 * bucket, never waiting for the shared store, and settles with it in the
 * background: every `intervalMs`, one call (per node) sends what was spent per
 * key since the last settlement and takes back each bucket's level.
 *
 * A view is the shared bucket as the last settlement left it, refilled locally
 * and debited by local spends. Between two settlements a replica also spends no
 * more than its allowance: max(1, L / N) (L the level the last settlement gave, N
 * the live replicas), plus the refill since. N replicas together then spend at
 * most what the bucket held, plus each one's refill over the interval and the
 * rounding up to one token: over any t seconds a key is admitted at most
 * B + R·t + (N − 1)·(1 + R·(I + RTT)), I the interval. A key seen for the first
 * time starts full, with an allowance of max(1, B / N). A client pinned to one
 * replica gets its whole quota: its allowance is renewed at every settlement.
 *
 * When a settlement fails (the store is down or its breaker open), the edge
 * decides by each replica's share (as `'replica-share'`) and keeps counting what
 * it spends; the first settlement that succeeds debits it all, and the views
 * take back the shared levels.
 */
import { retryWait, tokensAt, type BucketPolicy, type BucketState } from '../bucket.js'
import { storeMethod, type BucketDebit, type BucketRequest, type Store, type StoreDecision, type StoreLogger, type StoreReading } from '../store.js'
import { ReplicaShareEdge } from './replica-share.js'

/** Most keys viewed at once; past it the oldest view is dropped (its spends still settled). */
export const MAX_VIEWS = 100_000

/** This replica's view of one shared bucket. */
class View implements BucketState {
  /** The shared bucket's tokens at `lastMs` as this replica sees them. */
  tokens: number
  lastMs: number
  /** What this replica may still spend at `allowanceMs`; grows by the refill rate. */
  allowance: number
  allowanceMs: number
  /** Spent here since the last settlement was sent. */
  unsent = 0
  /** Spent here, in the settlement on its way. */
  sending = 0
  /** Asked for since the last settlement was sent. */
  touched = true

  constructor (readonly policy: BucketPolicy, nowMs: number, replicas: number) {
    this.tokens = policy.capacity
    this.lastMs = nowMs
    this.allowance = Math.max(1, policy.capacity / replicas)
    this.allowanceMs = nowMs
  }

  allowanceAt (nowMs: number): number {
    const elapsedMs = nowMs - this.allowanceMs
    return elapsedMs > 0 ? this.allowance + elapsedMs * (this.policy.refillPerSecond / 1000) : this.allowance
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
}

export class SettlingEdge implements Store {
  private readonly shared: Store & Required<Pick<Store, 'settle'>>
  private readonly clock: () => number
  private readonly replicas: () => number
  private readonly intervalMs: number
  private readonly maxViews: number
  private readonly views = new Map<string, View>()
  /** Spends of views dropped before they were settled, by key. */
  private readonly orphans = new Map<string, BucketDebit>()
  /** Decides while settlements fail. */
  private readonly fallback: ReplicaShareEdge
  private healthy = true
  /** The settlement on its way, until the store answers; sent at `sentAtMs`. */
  private inFlight: Promise<void> | undefined
  private sentAtMs = 0
  private timer: NodeJS.Timeout | undefined
  private logger: StoreLogger | undefined

  constructor (options: SettlingEdgeOptions) {
    this.shared = options.store
    this.clock = options.clock
    this.replicas = options.replicas
    this.intervalMs = options.intervalMs
    this.maxViews = options.maxViews ?? MAX_VIEWS
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
      if (decision.allowed) views.forEach((view, i) => { view.unsent += (buckets[i] as BucketRequest).cost })
      return decision
    }
    const tokens = new Array<number>(views.length)
    let allowed = true
    let retryAfterMs = 0
    views.forEach((view, i) => {
      const cost = (buckets[i] as BucketRequest).cost
      const available = tokensAt(view, view.policy, nowMs)
      const allowance = view.allowanceAt(nowMs)
      tokens[i] = Math.min(available, allowance)
      if (available >= cost && allowance >= cost) return
      allowed = false
      let wait = available >= cost ? 0 : retryWait(view, view.policy, nowMs, available, cost)
      // An allowance is renewed at the next settlement, if the refill has not made it up by then.
      if (allowance < cost && view.policy.refillPerSecond > 0) wait = Math.max(wait, (cost - allowance) * 1000 / view.policy.refillPerSecond)
      if (wait > retryAfterMs) retryAfterMs = wait
    })
    if (!allowed) return { allowed, tokens, retryAfterMs }
    views.forEach((view, i) => {
      const cost = (buckets[i] as BucketRequest).cost
      view.tokens = tokensAt(view, view.policy, nowMs) - cost
      view.lastMs = nowMs
      view.allowance = view.allowanceAt(nowMs) - cost
      view.allowanceMs = nowMs
      view.unsent += cost
      tokens[i] = Math.min(view.tokens, view.allowance)
    })
    return { allowed, tokens, retryAfterMs: 0 }
  }

  /** The shared bucket as the store holds it (this replica's unsettled spends not counted). */
  peek (bucket: BucketRequest): StoreReading | Promise<StoreReading> {
    return storeMethod(this.shared, 'peek')(bucket)
  }

  /** Gives tokens back in the shared store, and to this replica's view. */
  async refund (bucket: BucketRequest): Promise<number> {
    const left = await storeMethod(this.shared, 'refund')(bucket)
    const view = this.views.get(bucket.key)
    if (view !== undefined) {
      const nowMs = this.clock()
      view.tokens = Math.min(view.policy.capacity, tokensAt(view, view.policy, nowMs) + bucket.cost)
      view.lastMs = nowMs
      view.allowance = view.allowanceAt(nowMs) + bucket.cost
      view.allowanceMs = nowMs
    }
    this.fallback.refund(bucket)
    return left
  }

  /** Deletes the shared bucket; this replica forgets its view (its unsettled spends with it). */
  async reset (key: string): Promise<void> {
    this.views.delete(key)
    this.orphans.delete(key)
    this.fallback.reset(key)
    await storeMethod(this.shared, 'reset')(key)
  }

  /**
   * Settles what is left to settle (waiting at most `intervalMs`, and no more than
   * a second, for the answer), then stops.
   */
  async close (): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer)
    this.timer = undefined
    let timer: NodeJS.Timeout | undefined
    const given = new Promise<void>((resolve) => { timer = setTimeout(resolve, Math.min(this.intervalMs, 1000)) })
    await Promise.race([this.inFlight ?? this.settleNow(), given])
    clearTimeout(timer)
    this.views.clear()
    this.fallback.close()
  }

  /**
   * Sends what was spent since the last settlement, and the keys asked for since,
   * in one `Store.settle` call; takes back their levels. Views of keys neither
   * asked for nor spent, and full by now, are dropped (a new view starts full).
   * Resolves when the store answers. While a settlement is unanswered, none
   * other is sent (it may have been applied: its debits are not sent twice), and
   * once it has waited `intervalMs` the edge decides by this replica's share
   * until a settlement is answered.
   */
  settleNow (): Promise<void> {
    const nowMs = this.clock()
    if (this.inFlight !== undefined) {
      if (nowMs - this.sentAtMs >= this.intervalMs) this.failing('no answer to the last settlement within settleIntervalMs')
      return this.inFlight
    }
    const debits: BucketDebit[] = []
    const sent: Array<View | undefined> = []
    for (const [key, view] of this.views) {
      if (view.touched || view.unsent > 0) {
        const orphan = this.orphans.get(key)
        this.orphans.delete(key)
        debits.push({ key, policy: view.policy, spent: view.unsent + (orphan?.spent ?? 0) })
        sent.push(view)
        view.sending = view.unsent
        view.unsent = 0
        view.touched = false
      } else if (view.sending === 0 && tokensAt(view, view.policy, nowMs) >= view.policy.capacity) {
        this.views.delete(key)
      }
    }
    for (const orphan of this.orphans.values()) {
      debits.push(orphan)
      sent.push(undefined)
    }
    this.orphans.clear()
    if (debits.length === 0) return Promise.resolve()
    const call = Promise.resolve()
      .then(async () => this.shared.settle(debits))
      .then((levels) => { this.settled(debits, sent, levels) }, (error: unknown) => {
        this.settled(debits, sent, debits.map(() => NaN))
        this.failing(error)
      })
      .finally(() => { this.inFlight = undefined })
    this.inFlight = call
    this.sentAtMs = nowMs
    return call
  }

  /** Takes back the levels of a settlement; a `NaN` level: that debit was not taken, and goes again next time. */
  private settled (debits: readonly BucketDebit[], sent: ReadonlyArray<View | undefined>, levels: readonly number[]): void {
    const nowMs = this.clock()
    const replicas = this.replicas()
    let taken = true
    sent.forEach((view, i) => {
      const debit = debits[i] as BucketDebit
      const level = levels[i] as number
      const current = view !== undefined && this.views.get(debit.key) === view
      if (Number.isNaN(level)) {
        taken = false
        // A dropped view's later spends (or an orphan's) are orphans already: this debit joins them.
        if (current) view.unsent += debit.spent
        else this.orphan(debit, debit.spent)
      }
      if (!current) return
      view.sending = 0
      if (Number.isNaN(level)) {
        view.touched = true
        return
      }
      view.tokens = level - view.unsent
      view.lastMs = nowMs
      view.allowance = Math.max(1, view.tokens / replicas)
      view.allowanceMs = nowMs
    })
    if (!taken) {
      this.failing('the store did not take a debit')
    } else if (!this.healthy) {
      this.healthy = true
      this.logger?.info({ store: 'settle' }, 'fastify-tollgate: settlement answered; the edge is back on the shared quota')
    }
  }

  /** Decides by this replica's share until a settlement is answered; logged once. */
  private failing (reason: unknown): void {
    if (!this.healthy) return
    this.healthy = false
    this.logger?.warn({ err: reason }, 'fastify-tollgate: settlement failed; the edge enforces this replica\'s share until the shared store answers')
  }

  /** Keeps `spent` tokens of `debit.key` for the next settlement. */
  private orphan (debit: BucketDebit, spent: number): void {
    if (spent <= 0) return
    const known = this.orphans.get(debit.key)
    this.orphans.set(debit.key, { key: debit.key, policy: debit.policy, spent: spent + (known?.spent ?? 0) })
  }

  private viewOf (bucket: BucketRequest, nowMs: number): View {
    let view = this.views.get(bucket.key)
    if (view === undefined) {
      if (this.views.size >= this.maxViews) this.dropOldest()
      view = new View(bucket.policy, nowMs, this.replicas())
      this.views.set(bucket.key, view)
    } else {
      view.touched = true
    }
    return view
  }

  /** Drops the view seen first; what it spent and has not settled is kept for the next settlement. */
  private dropOldest (): void {
    const [key, view] = this.views.entries().next().value as [string, View]
    this.views.delete(key)
    this.orphan({ key, policy: view.policy, spent: 0 }, view.unsent)
    // What it is sending comes back as an orphan if that settlement fails (see `unsettled`).
  }
}
