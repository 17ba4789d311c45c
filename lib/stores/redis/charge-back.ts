/**
 * What this replica admitted on its local shares while Redis was away, per key,
 * debited from the shared buckets once Redis answers again (the settle script,
 * with nothing to reserve). So an outage, a stall or a failover that was not one
 * hands out no fresh share on top of the shared quota: what was spent locally is
 * spent in the shared bucket too, a little later.
 *
 * A debit takes a bucket down to zero, never into debt: Redis's bucket went on
 * refilling during the outage but only up to its capacity, so after a long
 * outage a debit of everything spent locally would lock a client out for about
 * as long again. What the headroom let through beyond the shared quota is so
 * not paid back; it is the `h·(B + R·d)` of the stated bound.
 *
 * A debit whose call failed is kept for the next answer (it may then be taken
 * twice: fewer admitted, never more).
 */
import type { BucketPolicy } from '../../types/engine.js'
import type { BucketDebit, BucketRequest, BucketSettlement } from '../../types/store.js'

/** Takes debits in Redis: one settlement per debit, `tokens: NaN` where its call failed; never rejects. */
export type Debit = (debits: readonly BucketDebit[]) => Promise<BucketSettlement[]>

/** Most keys one flush sends: a long outage over many keys is charged over several answers, none holding the event loop long. */
export const FLUSH_KEYS = 10_000

interface Spent {
  policy: BucketPolicy
  spent: number
}

export class ChargeBack {
  private spent = new Map<string, Spent>()
  /** Flushes sent and not answered yet. */
  private sending = 0

  /** `debit` takes the debits; `charged` hears each bucket's level after its debit. */
  constructor (private readonly debit: Debit, private readonly charged: (bucket: BucketRequest, tokens: number) => void) {}

  /** Whether spends wait to be charged. */
  get pending (): boolean {
    return this.spent.size > 0
  }

  /** Keys with spends waiting to be charged. */
  get size (): number {
    return this.spent.size
  }

  /** `buckets` were admitted locally: each cost is owed to its shared bucket (whose policy is the one asked for). */
  add (buckets: readonly BucketRequest[]): void {
    for (const bucket of buckets) this.owe(bucket.key, bucket.policy, bucket.cost)
  }

  /** Whether no flush is on its way. */
  get idle (): boolean {
    return this.sending === 0
  }

  /** Tokens owed on `key`, not yet charged. */
  on (key: string): number {
    return this.spent.get(key)?.spent ?? 0
  }

  /** A key reset in Redis is full again: nothing is owed on it. */
  forget (key: string): void {
    this.spent.delete(key)
  }

  /**
   * Sends what is owed now, at most `FLUSH_KEYS` keys (the rest at the next
   * flush); what a failed call held is owed again. A flush does not wait for the
   * one before: each goes ahead of the call that follows it. Resolves when Redis
   * answered or failed.
   */
  async flush (): Promise<void> {
    const debits: BucketDebit[] = []
    for (const [key, { policy, spent }] of this.spent) {
      if (debits.length === FLUSH_KEYS) break
      debits.push({ key, policy, spent, reserve: 0 })
    }
    for (const { key } of debits) this.spent.delete(key)
    if (debits.length === 0) return
    this.sending++
    const settlements = await this.debit(debits)
    this.sending--
    debits.forEach(({ key, policy, spent }, i) => {
      const { tokens } = settlements[i] as BucketSettlement
      if (Number.isNaN(tokens)) this.owe(key, policy, spent)
      else this.charged({ key, policy, cost: spent }, tokens)
    })
  }

  private owe (key: string, policy: BucketPolicy, cost: number): void {
    const entry = this.spent.get(key)
    if (entry === undefined) this.spent.set(key, { policy, spent: cost })
    else entry.spent += cost
  }
}
