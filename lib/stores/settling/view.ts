/**
 * This replica's view of one shared bucket under `edge.mode: 'settle'` (the
 * algorithm and its bounds are in index.ts): the shared level as the last
 * settlement left it, the tokens reserved for this replica, and what it spent
 * since. Its counts change only here: a spend, a settlement sent, its answer.
 */
import { tokensAt } from '../../engine/bucket.js'
import type { BucketPolicy, BucketState } from '../../types/engine.js'
import type { BucketDebit } from '../../types/store.js'

/** A settlement of one view: its debit, and the reserved tokens the debit gives back. */
export interface ViewDebit {
  debit: BucketDebit
  returned: number
}

/** This replica's view of one shared bucket. */
export class View implements BucketState {
  /** The shared bucket's tokens (reservations out) at `lastMs`, as the last settlement left them. */
  tokens: number
  lastMs: number
  /** Tokens reserved for this replica in the shared bucket, not spent yet. */
  private reserved = 0
  /** Tokens this replica may spend without a reservation (a new view's share, until its first settlement). */
  private share: number
  /**
   * While settlements fail (the shared store is away): tokens earned since at this
   * replica's share of the refill, at most its share of the capacity (see `away`).
   */
  private credit = 0
  private creditMs = 0
  /** Tokens spent without a reservation, not sent yet. */
  private unreserved = 0
  /** Tokens spent since the last settlement was sent; and in the interval before it. */
  private spent = 0
  private spentBefore = 0
  /** In the settlement on its way: the unreserved spends and the reserved tokens given back. */
  private sendingSpent = 0
  private sendingReturned = 0
  /** Asked for since the last settlement was sent. */
  private touched = true

  /** No settlement of this view was answered yet. */
  private first = true
  /** The largest cost refused and not served since (a manual `consume`): reservations cover it until it is. */
  private asked = 0

  constructor (readonly policy: BucketPolicy, nowMs: number, share: number) {
    this.share = share
    this.tokens = policy.capacity - share
    this.lastMs = nowMs
    this.creditMs = nowMs
  }

  /**
   * What this replica may spend now: its reservation, what is left of its first share
   * (until its first settlement is answered), and, while the store is away, its credit.
   * Nothing else: a settlement answered late, or not at all, gives no more.
   */
  get allowance (): number {
    return this.reserved + this.share + this.credit
  }

  /** Neither asked for since the last settlement was sent, nor holding spends to send. */
  get idle (): boolean {
    return !this.touched && this.unreserved === 0
  }

  /** What is not settled: the tokens spent without a reservation and the ones reserved. */
  get held (): number {
    return this.unreserved + this.reserved
  }

  /** Asked for again. */
  touch (): void {
    this.touched = true
  }

  /** Spends `cost` (within `allowance`): reserved tokens first, then the first share, then the credit. A cost asked for before is served. */
  spend (cost: number): void {
    if (cost >= this.asked) this.asked = 0
    const fromReserve = Math.min(this.reserved, cost)
    this.reserved -= fromReserve
    const rest = cost - fromReserve
    const fromShare = Math.min(this.share, rest)
    this.share -= fromShare
    this.credit -= rest - fromShare
    this.unreserved += rest
    this.spent += cost
  }

  /**
   * The store is away since `sinceMs`: the credit, none when it went away (or when
   * this view was made, if later), grows at `share`'s refill up to its capacity (the
   * replica's share of the quota). So an outage gives each replica R / N a second,
   * never a fresh share at once, nor again to a view made anew.
   */
  away (nowMs: number, sinceMs: number, share: BucketPolicy): void {
    if (this.creditMs < sinceMs) {
      this.credit = 0
      this.creditMs = sinceMs
    }
    this.credit = Math.min(share.capacity, this.credit + Math.max(0, nowMs - this.creditMs) * share.refillPerSecond / 1000)
    this.creditMs = Math.max(this.creditMs, nowMs)
  }

  /** The store answers again: the credit is gone. */
  back (): void {
    this.credit = 0
  }

  /** Refused `cost`: reservations cover the largest cost refused until it is served. */
  refused (cost: number): void {
    if (cost > this.asked) this.asked = cost
  }

  /** Closing: what was spent asks for no reservation any more. */
  forgetSpends (): void {
    this.spentBefore = this.spent = 0
  }

  /** The shared bucket (as last seen, refilled since) with this replica's reservation is full again. */
  fullAt (nowMs: number): boolean {
    return tokensAt(this, this.policy, nowMs) + this.reserved >= this.policy.capacity
  }

  /**
   * An idle view keeps a reservation of its minimum, so that a client that comes back in a
   * burst finds it here: the excess goes back, a shortfall is topped up once the shared
   * bucket (as last seen, refilled since) holds all of it. True: nothing to send.
   */
  keepsMinimum (minimum: number, nowMs: number): boolean {
    const short = minimum - this.reserved
    return Math.abs(short) < 1e-9 || (short > 0 && tokensAt(this, this.policy, nowMs) < short)
  }

  /**
   * The reservation this view asks for: the largest of its minimum, twice what it spent
   * in either of the last two intervals, and the largest cost refused. A view's first settlement reserves no more than
   * what is left of its first share: the other replicas' first shares, not settled yet,
   * may be spending the bucket's other tokens.
   */
  wanted (minimum: () => number): number {
    return this.first ? this.share : Math.max(minimum(), 2 * Math.max(this.spent, this.spentBefore), this.asked)
  }

  /** The debit that settles this view with a reservation of `target`: its unreserved spends, less the reservation it gives back. */
  debitTo (key: string, target: number): ViewDebit {
    const returned = Math.max(0, this.reserved - target)
    return { debit: { key, policy: this.policy, spent: this.unreserved - returned, reserve: target - this.reserved + returned }, returned }
  }

  /** What a dropped view leaves to settle: its unreserved spends, less its reservation. */
  leftOver (key: string): BucketDebit {
    return { key, policy: this.policy, spent: this.unreserved - this.reserved, reserve: 0 }
  }

  /** Its debit is sent, giving back `returned` reserved tokens: the spends are on their way, the interval starts again. */
  sending (returned: number): void {
    this.reserved -= returned
    this.sendingReturned = returned
    this.sendingSpent = this.unreserved
    this.unreserved = 0
    this.spentBefore = this.spent
    this.spent = 0
    this.touched = false
  }

  /** The store did not take its debit: it goes again with the next settlement. */
  notTaken (): void {
    this.unreserved += this.sendingSpent
    this.reserved += this.sendingReturned
    this.touched = true
    this.sendingSpent = this.sendingReturned = 0
  }

  /** The store took its debit, reserving `reserved`; `tokens`: the shared level now (`Infinity`: taken as applied, unknown). */
  taken (reserved: number, tokens: number, nowMs: number): void {
    this.reserved += reserved
    this.share = 0
    this.first = false
    if (tokens !== Infinity) {
      this.tokens = tokens
      this.lastMs = nowMs
    }
    this.sendingSpent = this.sendingReturned = 0
  }
}
