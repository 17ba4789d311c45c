/**
 * One settlement's call to the shared store under `edge.mode: 'settle'` (see
 * index.ts), raced against its deadline: unanswered after `deadlineMs` (real ms),
 * judged one poll for I/O after the timer fires (Node runs expired timers before it
 * reads the sockets: after the event loop was held, the answer may be waiting), it
 * is taken as applied (every debit answered `tokens: Infinity`, nothing
 * reserved), and its answer, if one comes later, is handed back debit by debit.
 */
import type { BucketDebit, BucketSettlement, Store } from '../../types/store.js'

export interface SettlementCall {
  /** The store's answers, or, after the deadline, the ones taken as applied. */
  answers: Promise<readonly BucketSettlement[]>
  /** Clears the deadline. */
  clear: () => void
}

export interface SettlementDeadline {
  deadlineMs: number
  /** Called when the deadline passes unanswered. */
  givenUp: () => void
  /** After the deadline: each debit of the late answer (or of its failure) to settle again. */
  late: (debit: BucketDebit) => void
}

/** Sends `debits` (in a later microtask) with `store.settle`. */
export function callSettle (store: Required<Pick<Store, 'settle'>>, debits: readonly BucketDebit[], deadline: SettlementDeadline): SettlementCall {
  let timer: NodeJS.Timeout | undefined
  let answered = false
  const settlement = Promise.resolve().then(async () => store.settle(debits))
  settlement.then(() => { answered = true }, () => { answered = true })
  const givenUp = new Promise<readonly BucketSettlement[]>((resolve) => {
    const judge = (): void => {
      if (answered) return
      deadline.givenUp()
      resolve(debits.map(() => ({ tokens: Infinity, reserved: 0 })))
      // Its answer, if one comes: what it did not take goes again, what it reserved goes back.
      settlement.then((late) => {
        late.forEach(({ tokens, reserved }, i) => {
          const debit = debits[i] as BucketDebit
          deadline.late(Number.isNaN(tokens) ? { ...debit, reserve: 0 } : { key: debit.key, policy: debit.policy, spent: -reserved, reserve: 0 })
        })
      }, () => { for (const debit of debits) deadline.late({ ...debit, reserve: 0 }) })
    }
    timer = setTimeout(() => { setImmediate(judge).unref() }, deadline.deadlineMs)
    timer.unref()
  })
  return { answers: Promise.race([settlement, givenUp]), clear: () => { clearTimeout(timer) } }
}
