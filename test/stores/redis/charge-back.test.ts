/**
 * What the local fallback owes, and where its shares start: the bookkeeping of
 * lib/stores/redis/charge-back.ts, last-levels.ts and local-shares.ts with the
 * time passed in. The Redis side of the same (the debit taken, the share
 * started from a real reply) is in fallback.test.ts.
 */
import t from 'tap'
import { unshared } from '../../../lib/engine/share.js'
import { ChargeBack, FLUSH_KEYS } from '../../../lib/stores/redis/charge-back.js'
import { LastLevels } from '../../../lib/stores/redis/last-levels.js'
import { LocalShares } from '../../../lib/stores/redis/local-shares.js'
import type { BucketDebit, BucketRequest, BucketSettlement } from '../../../lib/types/store.js'

const POLICY = { capacity: 30, refillPerSecond: 1 }
const bucket = (key: string, cost = 1, policy = POLICY): BucketRequest => ({ key, policy, cost })

/** A debit that takes everything asked, keeping each call; `fails` lists keys it does not take. */
function ledger (fails: Set<string> = new Set()): { calls: BucketDebit[][], debit: (debits: readonly BucketDebit[]) => Promise<BucketSettlement[]> } {
  const calls: BucketDebit[][] = []
  return {
    calls,
    debit: async (debits) => {
      calls.push([...debits])
      return debits.map((debit) => ({ tokens: fails.has(debit.key) ? NaN : 30 - debit.spent, reserved: 0 }))
    }
  }
}

t.test('a flush sends at most FLUSH_KEYS keys; the rest go at the next', async (t) => {
  const { calls, debit } = ledger()
  const owed = new ChargeBack(debit, () => {})
  owed.add(Array.from({ length: FLUSH_KEYS + 1 }, (_, i) => bucket(`k${i}`)))
  await owed.flush()
  t.equal(calls[0]?.length, FLUSH_KEYS)
  t.ok(owed.pending, 'one key still owed')
  await owed.flush()
  t.same(calls[1], [{ key: `k${FLUSH_KEYS}`, policy: POLICY, spent: 1, reserve: 0 }])
  t.notOk(owed.pending)
  await owed.flush()
  t.equal(calls.length, 2, 'nothing owed: nothing sent')
})

t.test('a debit not taken is owed again, added to what was spent since; one taken is heard with its level', async (t) => {
  const { debit } = ledger(new Set(['lost']))
  const heard: Array<[string, number]> = []
  const owed = new ChargeBack(debit, (charged, tokens) => { heard.push([charged.key, tokens]) })
  owed.add([bucket('lost', 2), bucket('taken', 3)])
  const flushing = owed.flush()
  owed.add([bucket('lost', 1)])
  await flushing
  t.equal(owed.on('lost'), 3, 'the 2 not taken, and the 1 spent meanwhile')
  t.equal(owed.on('taken'), 0)
  t.same(heard, [['taken', 27]])
  owed.forget('lost')
  t.notOk(owed.pending, 'a key reset owes nothing')
})

t.test('a share starts from its part of the last level, refilled, less what is owed; past maxKeys the first noted go', async (t) => {
  const levels = new LastLevels(10)
  const share = { capacity: 12, refillPerSecond: 0.4 }
  levels.note([bucket('a')], [10], 1000)
  t.equal(levels.shareAt(bucket('a'), share, 3000, 0), 12 * 12 / 30, '10 + 2 s × 1/s = 12, of which 12/30')
  t.equal(levels.shareAt(bucket('a'), share, 3000, 5), 7 * 12 / 30, 'less 5 owed')
  t.equal(levels.shareAt(bucket('b'), share, 3000, 0), undefined, 'no level known')
  for (let i = 0; i < 10; i++) levels.note([bucket(`k${i}`)], [1], 1000)
  t.equal(levels.shareAt(bucket('a'), share, 1000, 0), undefined, 'the first noted went to make room')
  t.equal(levels.shareAt(bucket('k9'), share, 1000, 0), 0.4, 'the last noted stays')
  levels.forget('k9')
  t.equal(levels.shareAt(bucket('k9'), share, 1000, 0), undefined)
})

t.test('an unshared bucket (a penalty) is decided whole on the fallback and owes nothing', async (t) => {
  const { debit } = ledger()
  const shares = new LocalShares({ fallbackHeadroom: 0.2, liveReplicas: () => 3, clock: () => 0, debit })
  const penalty = unshared({ capacity: 1, refillPerSecond: 0.01 })
  const decision = shares.consume([bucket('edge'), bucket('penalty', 1, penalty)])
  t.ok(decision.allowed)
  t.same(decision.policies?.[1], penalty, 'the penalty policy, not a share of it')
  t.equal(decision.policies?.[0]?.capacity, 12, 'the quota: 30 × 1.2 / 3')
  t.ok(shares.owing, 'the quota bucket is owed')
  await shares.close()
})
