/**
 * What a settlement sends under `edge.mode: 'settle'` (see index.ts), per view
 * and for the orphans, and what its answers change in the views.
 */
import type { BucketDebit, BucketSettlement } from '../../types/store.js'
import { shareOf } from '../../engine/share.js'
import type { Orphans } from './orphans.js'
import type { View } from './view.js'

/** This replica's views by key, and what dropped ones left to settle. */
export interface Ledger {
  readonly views: Map<string, View>
  readonly orphans: Orphans
}

/** A settlement's debits, each with the view it settles (`undefined`: an orphan's). */
export interface Outgoing {
  debits: BucketDebit[]
  sent: Array<View | undefined>
}

/**
 * The debits to send now, marked as on their way in their views; views full again
 * are dropped, and the orphans handed over. `closing`: reserve nothing more.
 */
export function collectDebits (ledger: Ledger, nowMs: number, closing: boolean, replicas: () => number): Outgoing {
  const debits: BucketDebit[] = []
  const sent: Array<View | undefined> = []
  for (const [key, view] of ledger.views) {
    const debit = debitOf(ledger, key, view, nowMs, closing, replicas)
    if (debit === undefined) continue
    debits.push(debit)
    sent.push(view)
  }
  for (const orphan of ledger.orphans.values()) {
    debits.push(orphan)
    sent.push(undefined)
  }
  ledger.orphans.clear()
  return { debits, sent }
}

/** What `view` sends now (marked as on its way), or `undefined`: nothing to send, or dropped. */
function debitOf (ledger: Ledger, key: string, view: View, nowMs: number, closing: boolean, replicas: () => number): BucketDebit | undefined {
  const minimum = (): number => shareOf(view.policy.capacity, 1, replicas())
  const idle = view.idle
  if (idle && view.fullAt(nowMs)) {
    // Full again: the view knows nothing the bucket does not; its reservation goes back.
    ledger.views.delete(key)
    ledger.orphans.add(view.leftOver(key))
    return undefined
  }
  // An idle view holding its minimum, or short of it while the shared bucket cannot top it up: nothing to send (see `keepsMinimum`).
  if (idle && !closing && view.keepsMinimum(minimum(), nowMs)) return undefined
  const wanted = view.wanted(minimum)
  const target = closing ? 0 : Math.min(view.policy.capacity, wanted)
  const { debit, returned } = view.debitTo(key, target)
  // An idle view holding what it asked for (a cost above its minimum): nothing to send.
  if (idle && debit.spent === 0 && debit.reserve === 0) return undefined
  view.sending(returned)
  return debit
}

/**
 * Takes back a settlement's answers. `tokens: NaN`: that debit was not taken, and
 * goes again; `tokens: Infinity`: no answer (taken as applied, nothing reserved).
 * False when a debit was not taken.
 */
export function takeBack (ledger: Ledger, { debits, sent }: Outgoing, settlements: readonly BucketSettlement[], nowMs: number): boolean {
  let taken = true
  sent.forEach((view, i) => {
    const debit = debits[i] as BucketDebit
    const { tokens, reserved } = settlements[i] as BucketSettlement
    const current = view !== undefined && ledger.views.get(debit.key) === view
    if (Number.isNaN(tokens)) {
      taken = false
      if (current) view.notTaken()
      // A dropped view's (or an orphan's) settlement: it joins the orphans.
      else ledger.orphans.add({ ...debit, reserve: 0 })
    } else if (current) {
      view.taken(reserved, tokens, nowMs)
    } else {
      // A view dropped while its settlement was on its way: what it reserved goes back.
      ledger.orphans.add({ key: debit.key, policy: debit.policy, spent: -reserved, reserve: 0 })
    }
  })
  return taken
}
