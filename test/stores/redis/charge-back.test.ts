/**
 * What the local fallback owes, and where its shares start: the bookkeeping of
 * lib/stores/redis/charge-back.ts, last-levels.ts and local-shares.ts with the
 * time passed in. The Redis side of the same (the debit taken, the share
 * started from a real reply) is in fallback.test.ts.
 */
import t from 'tap'
import { unshared } from '../../../lib/engine/share.js'
import { ChargeBack, FLUSH_KEYS } from '../../../lib/stores/redis/charge-back.js'
import { Fallback } from '../../../lib/stores/redis/fallback.js'
import { OutageLog } from '../../../lib/stores/redis/outage-log.js'
import { LastLevels } from '../../../lib/stores/redis/last-levels.js'
import { CLOSE_CHARGE_MS, LocalShares } from '../../../lib/stores/redis/local-shares.js'
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

t.test('while a charge is on its way, charge() sends nothing more; chargeNow() (before a probe) does', async (t) => {
  const calls: BucketDebit[][] = []
  let release = (): void => {}
  const debit = async (debits: readonly BucketDebit[]): Promise<BucketSettlement[]> => {
    calls.push([...debits])
    await new Promise<void>((resolve) => { release = resolve })
    return debits.map(() => ({ tokens: 0, reserved: 0 }))
  }
  const fallback = new Fallback({ failMode: 'local', fallbackHeadroom: 0.2, liveReplicas: () => 1, clock: () => 0, log: new OutageLog(10_000), debit })
  t.ok(fallback.degrade([bucket('a')]).allowed)
  fallback.charge()
  t.equal(calls.length, 1, 'sent')
  t.ok(fallback.degrade([bucket('a')]).allowed)
  fallback.charge()
  fallback.answered()
  t.equal(calls.length, 1, 'not again while the first is on its way (a silent node would take every call\'s flush)')
  fallback.chargeNow()
  t.equal(calls.length, 2, 'before a probe it goes at once')
  release()
  await new Promise((resolve) => setImmediate(resolve))
  t.notOk(fallback.owing)
  await fallback.close()
})

t.test('close() charges everything owed, flush after flush; past maxKeys shares start again from level less owed', async (t) => {
  const { calls, debit } = ledger()
  const shares = new LocalShares({ fallbackHeadroom: 0.2, liveReplicas: () => 1, clock: () => 0, debit, maxKeys: 10 })
  for (let i = 0; i < FLUSH_KEYS + 5; i++) shares.consume([bucket(`k${i}`)])
  await shares.close()
  t.equal(calls.reduce((sum, call) => sum + call.length, 0), FLUSH_KEYS + 5, 'every key charged, over two flushes')
  t.equal(calls.length, 2)
  t.notOk(shares.owing)
})

t.test('close() stops at a flush that is not taken', async (t) => {
  const keys = new Set(['a', 'b'])
  const { calls, debit } = ledger(keys)
  const shares = new LocalShares({ fallbackHeadroom: 0.2, liveReplicas: () => 1, clock: () => 0, debit })
  shares.consume([bucket('a')])
  shares.consume([bucket('b')])
  await shares.close()
  t.equal(calls.length, 1, 'one flush: Redis does not take it, so no second')
  t.ok(shares.owing)
})

t.test('a key started again after the started set was cleared starts from its level less what it owes', async (t) => {
  const { debit } = ledger()
  const shares = new LocalShares({ fallbackHeadroom: 0, liveReplicas: () => 1, clock: () => 0, debit, maxKeys: 2 })
  shares.decided([bucket('a')], [5], 0)
  for (let i = 0; i < 3; i++) t.ok(shares.consume([bucket('a')]).allowed, `a: ${i + 1} of the 5 left`)
  shares.consume([bucket('x')])
  shares.consume([bucket('y')]) // the set is full: it starts over, a with it
  const again = shares.consume([bucket('a')])
  t.ok(again.allowed)
  t.equal(again.tokens[0], 1, 'restarted at 5 − 3 owed, then one more taken: 1 left, not a fresh 30')
  await shares.close()
})

t.test('close() waits at most CLOSE_CHARGE_MS for a charge Redis does not answer', async (t) => {
  const shares = new LocalShares({ fallbackHeadroom: 0.2, liveReplicas: () => 1, clock: () => 0, debit: async () => await new Promise<BucketSettlement[]>(() => {}) })
  shares.consume([bucket('a')])
  const started = performance.now()
  await shares.close()
  const waited = performance.now() - started
  t.ok(waited >= CLOSE_CHARGE_MS - 5 && waited < CLOSE_CHARGE_MS + 500, `closed after ${waited.toFixed(0)} ms`)
})
