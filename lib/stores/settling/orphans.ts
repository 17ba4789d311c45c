/**
 * What views no longer kept leave to settle under `edge.mode: 'settle'` (see
 * index.ts): a dropped view's unreserved spends less its reservation, a late
 * answer's reservation to give back, a debit the store did not take. One debit
 * per key, merged, sent with the next settlement.
 */
import type { BucketDebit } from '../../types/store.js'

export class Orphans {
  private readonly debits = new Map<string, BucketDebit>()

  /** At most `maxKeys` keys; past them, a new key's debit is handed to `dropped`. */
  constructor (private readonly maxKeys: number, private readonly dropped: (debit: BucketDebit) => void) {}

  /** Keeps `debit` (spent and given back) for the next settlement, merged with what is kept for its key. */
  add (debit: BucketDebit): void {
    if (debit.spent === 0) return
    const known = this.debits.get(debit.key)
    if (known === undefined && this.debits.size >= this.maxKeys) {
      this.dropped(debit)
      return
    }
    this.debits.set(debit.key, { key: debit.key, policy: debit.policy, spent: debit.spent + (known?.spent ?? 0), reserve: 0 })
  }

  /** What is kept to settle for `key` (0: nothing). */
  spentOf (key: string): number {
    return this.debits.get(key)?.spent ?? 0
  }

  delete (key: string): void {
    this.debits.delete(key)
  }

  values (): IterableIterator<BucketDebit> {
    return this.debits.values()
  }

  clear (): void {
    this.debits.clear()
  }
}
