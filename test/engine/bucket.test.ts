import t, { type Test } from 'tap'
import { consume, consumeOne, enough, msUntil, msUntilFull, read, refund, tokensAt, tokensNeeded, wholeTokens } from '../../lib/engine/bucket.js'
import type { BucketPolicy, BucketReading, BucketState } from '../../lib/types/engine.js'
import { conformanceCases } from '../helpers.js'

/** Runs steps through the pure engine, keeping state as a store would. */
function runEngine (policies: BucketPolicy[], steps: Array<{ atMs: number, costs: number[] }>, overdrafts?: boolean[]) {
  const states: Array<BucketState | undefined> = policies.map(() => undefined)
  return steps.map(({ atMs, costs }) => {
    const decision = consume(states, policies, costs, atMs, overdrafts)
    if (decision.allowed) decision.tokens.forEach((tokens, i) => { states[i] = { tokens, lastMs: atMs } })
    return decision
  })
}

t.test('conformance cases (test/fixtures/token-bucket.json)', async (t) => {
  const cases = conformanceCases()
  t.ok(cases.length > 0, 'there are cases')
  for (const c of cases) {
    t.test(c.name, async (t) => {
      const names = Object.keys(c.policies)
      const states = new Map<string, BucketState>()
      c.steps.forEach((step, n) => {
        const used = Object.keys(step.costs)
        const policies = used.map((name) => c.policies[name] as BucketPolicy)
        const decision = consume(used.map((name) => states.get(name)), policies, used.map((name) => step.costs[name] as number), step.atMs)
        t.equal(decision.allowed, step.allowed, `step ${n} at ${step.atMs} ms: allowed`)
        used.forEach((name, i) => {
          const before = tokensAt(states.get(name), c.policies[name] as BucketPolicy, step.atMs)
          t.ok(Math.abs(before - (step.tokensBefore[name] as number)) < 1e-6, `step ${n}: ${name} held ${step.tokensBefore[name]} (got ${before})`)
          if (decision.allowed) states.set(name, { tokens: decision.tokens[i] as number, lastMs: step.atMs })
          else t.equal(decision.tokens[i], before, `step ${n}: a refusal leaves ${name} unchanged`)
        })
      })
      t.ok(names.length > 0)
    })
  }
})

const B20R5: BucketPolicy = { capacity: 20, refillPerSecond: 5 }

t.test('edge cases, by name', async (t) => {
  const cases: Array<{ name: string, policy: BucketPolicy, overdraft?: true, steps: Array<{ atMs: number, cost: number }>, allowed: boolean[], check?: (decisions: ReturnType<typeof runEngine>, t: Test) => void }> = [
    {
      name: 'a new bucket starts full',
      policy: B20R5,
      steps: [{ atMs: 0, cost: 20 }],
      allowed: [true]
    },
    {
      name: 'clock going backwards adds no tokens',
      policy: { capacity: 2, refillPerSecond: 1 },
      steps: [{ atMs: 10_000, cost: 2 }, { atMs: 5_000, cost: 1 }, { atMs: 0, cost: 1 }],
      allowed: [true, false, false]
    },
    {
      name: 'after a backward jump, an allowed step records the earlier time (x/time/rate)',
      policy: { capacity: 2, refillPerSecond: 1 },
      steps: [{ atMs: 10_000, cost: 1 }, { atMs: 9_000, cost: 1 }, { atMs: 10_000, cost: 1 }],
      // at 9 000 one token is left and taken, last = 9 000; at 10 000 one second has passed: 1 token
      allowed: [true, true, true]
    },
    {
      name: 'cost above capacity never passes, even on a full bucket',
      policy: { capacity: 5, refillPerSecond: 100 },
      steps: [{ atMs: 0, cost: 6 }, { atMs: 1e9, cost: 6 }],
      allowed: [false, false],
      check: (d, t) => { t.equal(d[0]?.retryAfterMs, Infinity, 'retry never') }
    },
    {
      name: 'overdraft: a cost above capacity passes on a full bucket, debits the whole cost, and waits out the debt',
      policy: { capacity: 5, refillPerSecond: 1 },
      overdraft: true,
      steps: [{ atMs: 0, cost: 20 }, { atMs: 0, cost: 1 }, { atMs: 19_999, cost: 20 }, { atMs: 20_000, cost: 20 }],
      allowed: [true, false, false, true],
      check: (d, t) => {
        t.equal(d[0]?.tokens[0], -15, 'in debt by the excess: 5 − 20')
        t.equal(d[1]?.retryAfterMs, 16_000, 'a cost of 1 waits for the debt and one token: 16 s')
        t.ok(Math.abs((d[2]?.retryAfterMs ?? 0) - 1) < 1e-6, 'the next cost of 20 waits for a full bucket: 1 ms')
        t.equal(d[3]?.tokens[0], -15)
      }
    },
    {
      name: 'overdraft: a cost above capacity waits for a full bucket, not just any tokens',
      policy: { capacity: 5, refillPerSecond: 1 },
      overdraft: true,
      steps: [{ atMs: 0, cost: 1 }, { atMs: 0, cost: 20 }, { atMs: 1000, cost: 20 }],
      allowed: [true, false, true],
      check: (d, t) => { t.equal(d[1]?.retryAfterMs, 1000, 'until 5 of 5'); t.equal(d[2]?.tokens[0], -15) }
    },
    {
      name: 'overdraft: a cost within capacity decides as without it',
      policy: { capacity: 5, refillPerSecond: 1 },
      overdraft: true,
      steps: [{ atMs: 0, cost: 5 }, { atMs: 0, cost: 1 }, { atMs: 1000, cost: 1 }],
      allowed: [true, false, true],
      check: (d, t) => { t.equal(d[1]?.retryAfterMs, 1000); t.equal(d[2]?.tokens[0], 0, 'never below zero') }
    },
    {
      name: 'overdraft with no refill: one pass from full, then never',
      policy: { capacity: 5, refillPerSecond: 0 },
      overdraft: true,
      steps: [{ atMs: 0, cost: 20 }, { atMs: 1e12, cost: 1 }],
      allowed: [true, false],
      check: (d, t) => { t.equal(d[1]?.retryAfterMs, Infinity); t.equal(d[1]?.tokens[0], -15, 'the debt stays') }
    },
    {
      name: 'zero rate: the burst passes, nothing refills, retry is never',
      policy: { capacity: 3, refillPerSecond: 0 },
      steps: [{ atMs: 0, cost: 3 }, { atMs: Number.MAX_SAFE_INTEGER, cost: 1 }],
      allowed: [true, false],
      check: (d, t) => { t.equal(d[1]?.retryAfterMs, Infinity); t.equal(d[1]?.tokens[0], 0) }
    },
    {
      name: 'tiny rate: one token per ~31.7 years',
      policy: { capacity: 1, refillPerSecond: 1e-9 },
      steps: [{ atMs: 0, cost: 1 }, { atMs: 1e12 - 2, cost: 1 }, { atMs: 1e12, cost: 1 }],
      allowed: [true, false, true],
      check: (d, t) => { t.ok(Math.abs((d[1]?.retryAfterMs ?? 0) - 2) < 1e-3, 'retry ≈ 2 ms') }
    },
    {
      // The tolerance is 1e-12 token here, which this rate refills in 1 ms: 1e-12 of the 31.7 years.
      name: 'tiny rate: a request 1e-12 token short (the tolerance) passes',
      policy: { capacity: 1, refillPerSecond: 1e-9 },
      steps: [{ atMs: 0, cost: 1 }, { atMs: 1e12 - 1, cost: 1 }],
      allowed: [true, true]
    },
    {
      name: 'huge rate: refill caps at capacity, no overflow',
      policy: { capacity: 10, refillPerSecond: Number.MAX_VALUE },
      steps: [{ atMs: 0, cost: 10 }, { atMs: 0, cost: 1 }, { atMs: 1, cost: 10 }, { atMs: Number.MAX_SAFE_INTEGER, cost: 10 }],
      allowed: [true, false, true, true],
      check: (d, t) => { t.ok(Number.isFinite(d[2]?.tokens[0]), 'tokens stay finite'); t.equal(d[3]?.tokens[0], 0) }
    },
    {
      name: 'huge elapsed time caps at capacity',
      policy: B20R5,
      steps: [{ atMs: 0, cost: 20 }, { atMs: 1e15, cost: 20 }, { atMs: 1e15, cost: 1 }],
      allowed: [true, true, false]
    },
    {
      name: 'cost 0 always passes and takes nothing',
      policy: { capacity: 1, refillPerSecond: 0 },
      steps: [{ atMs: 0, cost: 1 }, { atMs: 0, cost: 0 }],
      allowed: [true, true],
      check: (d, t) => { t.equal(d[1]?.tokens[0], 0) }
    },
    {
      name: 'fractional tokens are kept, not rounded',
      policy: { capacity: 1, refillPerSecond: 3 },
      steps: [{ atMs: 0, cost: 1 }, { atMs: 100, cost: 0.3 }, { atMs: 100, cost: 0.01 }],
      allowed: [true, true, false],
      check: (d, t) => { t.ok(Math.abs((d[1]?.tokens[0] ?? -1)) < 1e-9, '0.3 - 0.3 = 0') }
    }
  ]
  for (const c of cases) {
    t.test(c.name, async (t) => {
      const decisions = runEngine([c.policy], c.steps.map((s) => ({ atMs: s.atMs, costs: [s.cost] })), [c.overdraft === true])
      t.same(decisions.map((d) => d.allowed), c.allowed)
      c.check?.(decisions, t)
    })
  }
})

t.test('overdraft: over any window, a bucket spends at most capacity + refill × t + one excess', async (t) => {
  // One replica's share of B = 20, R = 5/s among 3, for 60 s: a request of cost 20 every 250 ms, one of cost 1 every 2 s.
  const policy: BucketPolicy = { capacity: 20 / 3, refillPerSecond: 5 / 3 }
  const spentAt: Array<{ atMs: number, cost: number }> = []
  let state: BucketState | undefined
  for (let atMs = 0; atMs <= 60_000; atMs += 250) {
    for (const cost of atMs % 2000 === 0 ? [20, 1] : [20]) {
      const decision = consumeOne(state, policy, cost, atMs, true)
      if (!decision.allowed) continue
      state = { tokens: decision.tokens[0] as number, lastMs: atMs }
      spentAt.push({ atMs, cost })
    }
  }
  const excess = 20 - policy.capacity
  let worst = -Infinity
  for (const from of spentAt) {
    for (const to of spentAt) {
      if (to.atMs < from.atMs) continue
      const spent = spentAt.filter((s) => s.atMs >= from.atMs && s.atMs <= to.atMs).reduce((sum, s) => sum + s.cost, 0)
      const bound = policy.capacity + policy.refillPerSecond * (to.atMs - from.atMs) / 1000 + excess
      worst = Math.max(worst, spent - bound)
    }
  }
  t.ok(worst <= 1e-9, `every window within the bound (worst margin ${worst.toFixed(3)})`)
  t.equal(spentAt.filter((s) => s.cost === 20).length, 5, 'the heavy requests pass, one each time the share is full again')
  const total = spentAt.reduce((sum, s) => sum + s.cost, 0)
  t.ok(total <= policy.capacity + policy.refillPerSecond * 60 + excess + 1e-9, `${total} tokens spent in 60 s: at most the share's quota, 106.67, plus one excess, 13.33`)
})

t.test('tokensNeeded', async (t) => {
  t.equal(tokensNeeded(20, B20R5, false), 20)
  t.equal(tokensNeeded(21, B20R5, false), 21, 'without overdraft, a cost above capacity needs more than the bucket holds')
  t.equal(tokensNeeded(21, B20R5, true), 20, 'with overdraft, a full bucket')
  t.equal(tokensNeeded(3, B20R5, true), 3, 'a cost within capacity needs itself')
})

t.test('a refusal changes nothing and allowed steps record time', async (t) => {
  const state: BucketState = { tokens: 0.5, lastMs: 1000 }
  const decision = consume([state], [B20R5], [1], 1000)
  t.equal(decision.allowed, false)
  t.same(state, { tokens: 0.5, lastMs: 1000 }, 'the state object is not touched')
  t.equal(decision.tokens[0], 0.5)
})

t.test('retry time is exact: retrying at it passes, a millisecond before does not', async (t) => {
  const policy = { capacity: 20, refillPerSecond: 5 }
  const empty: BucketState = { tokens: 0, lastMs: 0 }
  const denied = consume([empty], [policy], [3], 0)
  t.equal(denied.retryAfterMs, 600)
  t.equal(consume([empty], [policy], [3], 599).allowed, false)
  t.equal(consume([empty], [policy], [3], 600).allowed, true)
})

t.test('retry time is never early', async (t) => {
  const cases: Array<{ name: string, policy: BucketPolicy, state: BucketState, cost: number, nowMs: number, retryAfterMs?: number, overdraft?: true }> = [
    // Found by the property tests: the exact quotient left the bucket an ulp short.
    { name: 'rounding: nudged past the float error', policy: { capacity: 149.76303114957818, refillPerSecond: 1 }, state: { tokens: 149.76303114957818 - 74.882, lastMs: 1_000_000 }, cost: 149.763, nowMs: 1_000_000 },
    { name: 'a clock behind the last step first catches up', policy: { capacity: 1, refillPerSecond: 1 }, state: { tokens: 0, lastMs: 10_000 }, cost: 1, nowMs: 9_000, retryAfterMs: 2000 },
    { name: 'a retry that lands on time zero', policy: B20R5, state: { tokens: 0, lastMs: -600 }, cost: 3, nowMs: -600, retryAfterMs: 600 },
    { name: 'a wait below a nanosecond is not snapped to nothing, and lands on time zero', policy: { capacity: 1, refillPerSecond: 1000 }, state: { tokens: 0, lastMs: -(2 ** -30) }, cost: 2 ** -30, nowMs: -(2 ** -30), retryAfterMs: 2 ** -30 },
    { name: 'a slow bucket at a large clock', policy: { capacity: 3, refillPerSecond: 0.001 }, state: { tokens: 0.1, lastMs: 1.7e12 }, cost: 2.9, nowMs: 1.7e12 + 1234.5 },
    { name: 'overdraft: a share in debt, thirds that do not divide evenly', policy: { capacity: 20 / 3, refillPerSecond: 5 / 3 }, state: { tokens: 20 / 3 - 20, lastMs: 1000 }, cost: 20, nowMs: 1000, overdraft: true }
  ]
  for (const c of cases) {
    const overdraft = c.overdraft === true
    const denied = consume([c.state], [c.policy], [c.cost], c.nowMs, [overdraft])
    t.equal(denied.allowed, false, `${c.name}: refused`)
    if (c.retryAfterMs !== undefined) t.equal(denied.retryAfterMs, c.retryAfterMs, `${c.name}: ${c.retryAfterMs} ms`)
    t.equal(consume([c.state], [c.policy], [c.cost], c.nowMs + denied.retryAfterMs, [overdraft]).allowed, true, `${c.name}: a retry at it passes`)
    t.equal(consumeOne(c.state, c.policy, c.cost, c.nowMs, overdraft).retryAfterMs, denied.retryAfterMs, `${c.name}: consumeOne agrees`)
  }
})

t.test('all or nothing over several buckets', async (t) => {
  const user = { capacity: 20, refillPerSecond: 5 }
  const route = { capacity: 1, refillPerSecond: 0.5 }
  const userState: BucketState = { tokens: 20, lastMs: 0 }
  const routeState: BucketState = { tokens: 0, lastMs: 0 }
  const decision = consume([userState, routeState], [user, route], [10, 1], 0)
  t.equal(decision.allowed, false)
  t.same(decision.tokens, [20, 0], 'the user bucket is not debited when the route bucket denies')
  t.equal(decision.retryAfterMs, 2000, 'the retry waits for the slowest bucket')
  const both = consume([userState, { tokens: 1, lastMs: 0 }], [user, route], [10, 1], 0)
  t.same(both.tokens, [10, 0], 'both debited together')
  const slowRoute = { capacity: 1, refillPerSecond: 0.25 }
  const twoShort = consume([{ tokens: 0, lastMs: 0 }, routeState], [user, slowRoute], [10, 1], 0)
  t.equal(twoShort.retryAfterMs, 4000, 'the longest wait of the short buckets (4 000 ms for the route, 2 000 for the user)')
  const userSlower = consume([{ tokens: 0, lastMs: 0 }, routeState], [user, route], [20, 1], 0)
  t.equal(userSlower.retryAfterMs, 4000, '20 tokens at 5/s wait longer than 1 at 0.5/s')
  const share = { capacity: 5, refillPerSecond: 1 }
  const overdrawn = consume([undefined, { tokens: 1, lastMs: 0 }], [share, route], [20, 1], 0, [true, false])
  t.same(overdrawn, { allowed: true, tokens: [-15, 0], retryAfterMs: 0 }, 'an overdraft bucket and a plain one, debited together')
  const routeShort = consume([undefined, routeState], [share, route], [20, 1], 0, [true, false])
  t.same(routeShort, { allowed: false, tokens: [5, 0], retryAfterMs: 2000 }, 'the plain bucket refuses: the overdraft bucket is not debited')
})

t.test('enough: the tokens needed, less a tolerance of 1e-12 × max(1, needed)', async (t) => {
  t.ok(enough(1, 1), 'exactly')
  t.ok(enough(0.9999999999999999, 1), 'an ulp short')
  t.ok(enough(1 - 1e-12, 1), 'at the tolerance')
  t.notOk(enough(1 - 2e-12, 1), 'beyond it')
  t.ok(enough(1e6 - 1e-7, 1e6), 'relative to the tokens needed: 1e-6 of a token for a million')
  t.notOk(enough(1e6 - 2e-6, 1e6))
  t.ok(enough(0.5 - 1e-12, 0.5), 'below one token needed, the tolerance of one')
  t.notOk(enough(0.5 - 2e-12, 0.5))
  t.ok(enough(-1e-12, 0), 'a cost of 0 passes an ulp of debt')
  t.notOk(enough(-1e-11, 0), 'not a debt')
  t.notOk(enough(Number.NaN, 1), 'NaN holds nothing')
  t.ok(enough(1e10 - 0.01, 1e10), '1e-12 of 1e10 tokens: 0.01')
  t.ok(enough(1e12 - 0.1, 1e12), 'at most 0.1 token')
  t.notOk(enough(1e12 - 0.2, 1e12), 'never a token, even at the largest capacity')
  t.notOk(enough(1e12 - 1, 1e12))
})

t.test('wholeTokens: the largest whole cost that passes now', async (t) => {
  t.equal(wholeTokens(0.9999999999999999), 1, 'an ulp short of 1 pays 1')
  t.equal(wholeTokens(2.9999999999999996), 3)
  t.equal(wholeTokens(0.999), 0)
  t.equal(wholeTokens(5.5), 5)
  t.equal(wholeTokens(-1e-16), 0)
  t.equal(wholeTokens(-0.5), -1, 'a debt (the headers show 0)')
  t.equal(wholeTokens(1e12 - 1), 1e12 - 1, 'not rounded up at the largest capacity')
  for (const tokens of [0.9999999999999999, 2.9999999999999996, 1e6 - 1e-7, 12.3]) {
    t.ok(enough(tokens, wholeTokens(tokens)) && !enough(tokens, wholeTokens(tokens) + 1), `${tokens}: enough for ${wholeTokens(tokens)}, not one more`)
  }
})

t.test('msUntil', async (t) => {
  t.equal(msUntil(0, 1, { capacity: 1, refillPerSecond: 1 / 7 }), 7000, 'whole nanoseconds where exact: not 7000.000000000002')
  t.equal(msUntil(0.9999999999999999, 1, { capacity: 1, refillPerSecond: 1 / 7 }), 0, 'enough already')
  t.equal(msUntil(0, 1 + 1e-13, { capacity: 1, refillPerSecond: 1 }), 1000, 'a cost within the tolerance above capacity: until full')
  t.equal(msUntil(5, 3, B20R5), 0, 'already there')
  t.equal(msUntil(0, 1, B20R5), 200)
  t.equal(msUntil(0, 21, B20R5), Infinity, 'above capacity')
  t.equal(msUntil(0, 1, { capacity: 1, refillPerSecond: 0 }), Infinity, 'no refill')
})

t.test('consumeOne decides exactly as consume over one bucket', async (t) => {
  const policies: BucketPolicy[] = [B20R5, { capacity: 1, refillPerSecond: 0 }, { capacity: 3.5, refillPerSecond: 0.25 }]
  const states: Array<BucketState | undefined> = [undefined, { tokens: 0, lastMs: 500 }, { tokens: 2.25, lastMs: 1000 }, { tokens: 19.5, lastMs: 2000 }]
  let compared = 0
  for (const policy of policies) {
    for (const state of states) {
      for (const cost of [0, 0.5, 1, 3, 20, 21]) {
        for (const nowMs of [0, 499, 1000, 1500, 60_000]) {
          for (const overdraft of [false, true]) {
            t.same(consumeOne(state, policy, cost, nowMs, overdraft), consume([state], [policy], [cost], nowMs, [overdraft]))
            compared++
          }
        }
      }
    }
  }
  t.equal(compared, 720)
})

t.test('refund: tokens back, never above capacity; an absent bucket stays absent', async (t) => {
  const B5R1: BucketPolicy = { capacity: 5, refillPerSecond: 1 }
  const cases: Array<{ name: string, policy: BucketPolicy, state: BucketState | undefined, amount: number, nowMs: number, after: BucketState | undefined }> = [
    { name: 'an absent bucket is full and stays absent', policy: B5R1, state: undefined, amount: 3, nowMs: 0, after: undefined },
    { name: 'some tokens back', policy: B5R1, state: { tokens: 2, lastMs: 0 }, amount: 1, nowMs: 0, after: { tokens: 3, lastMs: 0 } },
    { name: 'the refill since the last step counts first', policy: B5R1, state: { tokens: 0, lastMs: 0 }, amount: 1, nowMs: 1500, after: { tokens: 2.5, lastMs: 1500 } },
    { name: 'exactly to capacity: full, so absent', policy: B5R1, state: { tokens: 2, lastMs: 0 }, amount: 3, nowMs: 0, after: undefined },
    { name: 'above capacity: capped, so absent', policy: B5R1, state: { tokens: 2, lastMs: 0 }, amount: 100, nowMs: 0, after: undefined },
    { name: 'refilled to full by now: absent whatever the amount', policy: B5R1, state: { tokens: 0, lastMs: 0 }, amount: 0, nowMs: 5000, after: undefined },
    { name: 'a bucket in debt (an overdraft) gains the amount and may stay in debt', policy: B5R1, state: { tokens: -15, lastMs: 0 }, amount: 5, nowMs: 0, after: { tokens: -10, lastMs: 0 } },
    { name: 'R = 0: time adds nothing, the refund is all it gets', policy: { capacity: 3, refillPerSecond: 0 }, state: { tokens: 1, lastMs: 0 }, amount: 1, nowMs: 1e12, after: { tokens: 2, lastMs: 1e12 } },
    { name: 'a clock gone backwards adds nothing; the refund records the earlier time, as an allowed step does', policy: B5R1, state: { tokens: 0, lastMs: 10_000 }, amount: 1, nowMs: 5000, after: { tokens: 1, lastMs: 5000 } },
    { name: 'fractions are kept', policy: B5R1, state: { tokens: 0.25, lastMs: 0 }, amount: 0.5, nowMs: 0, after: { tokens: 0.75, lastMs: 0 } },
    { name: 'amount 0 records the time, like a step of cost 0', policy: B5R1, state: { tokens: 1, lastMs: 0 }, amount: 0, nowMs: 500, after: { tokens: 1.5, lastMs: 500 } }
  ]
  for (const c of cases) {
    const before = c.state === undefined ? undefined : { ...c.state }
    t.same(refund(c.state, c.policy, c.amount, c.nowMs), c.after, c.name)
    t.same(c.state, before, `${c.name}: the state given is not touched`)
  }
})

t.test('read: tokens now, the wait for a cost, and the wait until full', async (t) => {
  const B5R1: BucketPolicy = { capacity: 5, refillPerSecond: 1 }
  const cases: Array<{ name: string, policy: BucketPolicy, state: BucketState | undefined, cost: number, nowMs: number, overdraft?: true, reading: BucketReading }> = [
    { name: 'an absent bucket is full', policy: B5R1, state: undefined, cost: 1, nowMs: 0, reading: { tokens: 5, retryAfterMs: 0, fullInMs: 0 } },
    { name: 'an empty bucket', policy: B20R5, state: { tokens: 0, lastMs: 0 }, cost: 3, nowMs: 0, reading: { tokens: 0, retryAfterMs: 600, fullInMs: 4000 } },
    { name: 'part refilled', policy: B5R1, state: { tokens: 0, lastMs: 0 }, cost: 2, nowMs: 500, reading: { tokens: 0.5, retryAfterMs: 1500, fullInMs: 4500 } },
    { name: 'the cost fits now', policy: B5R1, state: { tokens: 3, lastMs: 0 }, cost: 3, nowMs: 0, reading: { tokens: 3, retryAfterMs: 0, fullInMs: 2000 } },
    { name: 'a cost above capacity never fits', policy: B5R1, state: undefined, cost: 6, nowMs: 0, reading: { tokens: 5, retryAfterMs: Infinity, fullInMs: 0 } },
    { name: 'overdraft: a cost above capacity waits for a full bucket', policy: B5R1, state: { tokens: 4, lastMs: 0 }, cost: 20, nowMs: 0, overdraft: true, reading: { tokens: 4, retryAfterMs: 1000, fullInMs: 1000 } },
    { name: 'R = 0: never', policy: { capacity: 3, refillPerSecond: 0 }, state: { tokens: 1, lastMs: 0 }, cost: 2, nowMs: 1e12, reading: { tokens: 1, retryAfterMs: Infinity, fullInMs: Infinity } },
    { name: 'R = 0 and the cost fits', policy: { capacity: 3, refillPerSecond: 0 }, state: { tokens: 1, lastMs: 0 }, cost: 1, nowMs: 0, reading: { tokens: 1, retryAfterMs: 0, fullInMs: Infinity } },
    { name: 'a clock gone backwards first catches up', policy: B5R1, state: { tokens: 0, lastMs: 10_000 }, cost: 1, nowMs: 9000, reading: { tokens: 0, retryAfterMs: 2000, fullInMs: 6000 } },
    { name: 'a bucket in debt', policy: B5R1, state: { tokens: -15, lastMs: 0 }, cost: 1, nowMs: 0, reading: { tokens: -15, retryAfterMs: 16_000, fullInMs: 20_000 } }
  ]
  for (const c of cases) t.same(read(c.state, c.policy, c.cost, c.nowMs, c.overdraft === true), c.reading, c.name)
})

t.test('read says what consume would decide, and its waits are never early', async (t) => {
  const policies: BucketPolicy[] = [B20R5, { capacity: 1, refillPerSecond: 0 }, { capacity: 3.5, refillPerSecond: 0.25 }, { capacity: 149.76303114957818, refillPerSecond: 1 }]
  const states: Array<BucketState | undefined> = [undefined, { tokens: 0, lastMs: 500 }, { tokens: 2.25, lastMs: 1000 }, { tokens: -3, lastMs: 60_000 }, { tokens: 149.76303114957818 - 74.882, lastMs: 1_000_000 }]
  let compared = 0
  for (const policy of policies) {
    for (const state of states) {
      for (const cost of [0, 0.5, 1, 3, 20, 21, 149.763]) {
        for (const nowMs of [0, 499, 1000, 1500, 60_000, 1_000_000]) {
          for (const overdraft of [false, true]) {
            const reading = read(state, policy, cost, nowMs, overdraft)
            const decision = consumeOne(state, policy, cost, nowMs, overdraft)
            t.equal(reading.retryAfterMs, decision.retryAfterMs, 'the wait consume gives (0 when it allows)')
            t.equal(reading.tokens, tokensAt(state, policy, nowMs))
            if (Number.isFinite(reading.retryAfterMs)) t.ok(consumeOne(state, policy, cost, nowMs + reading.retryAfterMs, overdraft).allowed, 'a retry at it passes')
            compared++
            // A state above its policy's capacity (read under another tier's) holds what it holds.
            if (state !== undefined && state.tokens > policy.capacity) continue
            if (Number.isFinite(reading.fullInMs)) t.equal(tokensAt(state, policy, nowMs + reading.fullInMs), policy.capacity, 'full at fullInMs')
            else t.ok(policy.refillPerSecond === 0 && reading.tokens < policy.capacity, 'never full: no refill')
          }
        }
      }
    }
  }
  t.equal(compared, 1680)
})

t.test('exact waits: a rate of max / seconds waits whole seconds where they are exact', async (t) => {
  // per(2, 3 s): 2/3 token a second; (2 − 2/3) / (2/3) is 2.0000000000000004 in floating point.
  const twoPerThree: BucketPolicy = { capacity: 2, refillPerSecond: 2 / 3 }
  const empty: BucketState = { tokens: 0, lastMs: 0 }
  const partly = consume([empty], [twoPerThree], [2], 1000)
  t.equal(partly.allowed, false)
  t.equal(partly.retryAfterMs, 2000, '2/3 held, 2 wanted: 2 s, not 2 s and a few femtoseconds')
  t.equal(consume([empty], [twoPerThree], [2], 1000 + partly.retryAfterMs).allowed, true, 'a retry at it passes')
  t.equal(consume([empty], [twoPerThree], [2], 0).retryAfterMs, 3000)
  t.equal(msUntilFull(0, twoPerThree), 3000, 'until full from empty: 3 s')
  t.equal(msUntilFull(2 / 3, twoPerThree), 2000, 'until full from 2/3: 2 s')
  t.same(read(empty, twoPerThree, 2, 1000), { tokens: 2 / 3, retryAfterMs: 2000, fullInMs: 2000 }, 'read agrees')
  // per(3, 10 s): 0.3 a second; the 3 tokens of 10 s were 10 000.000000000002 ms away, and short at 10 s.
  const threePerTen: BucketPolicy = { capacity: 3, refillPerSecond: 3 / 10 }
  t.equal(consume([empty], [threePerTen], [3], 0).retryAfterMs, 10_000)
  t.equal(consume([empty], [threePerTen], [3], 10_000).allowed, true, 'full at 10 s')
})

t.test('exact waits: at a token\'s exact due time the request passes', async (t) => {
  // per(1, 7 s): 1/7 token a second; at 7 s the bucket holds 0.9999999999999999 in floating point.
  const onePerSeven: BucketPolicy = { capacity: 1, refillPerSecond: 1 / 7 }
  const empty: BucketState = { tokens: 0, lastMs: 0 }
  t.ok(tokensAt(empty, onePerSeven, 7000) < 1, 'the level is an ulp short of 1 (the case)')
  t.equal(consume([empty], [onePerSeven], [1], 0).retryAfterMs, 7000, 'the wait from empty: 7 s')
  const due = consume([empty], [onePerSeven], [1], 7000)
  t.equal(due.allowed, true, 'passes at 7 s, not refused with a wait of 1e-12 ms')
  t.ok(Math.abs(due.tokens[0] as number) < 1e-12, 'and leaves (about) nothing')
  t.equal(consumeOne(empty, onePerSeven, 1, 7000).allowed, true, 'consumeOne agrees')
  t.same(read(empty, onePerSeven, 1, 7000), { tokens: tokensAt(empty, onePerSeven, 7000), retryAfterMs: 0, fullInMs: 0 }, 'read agrees: it fits, and the bucket counts as full')
  t.equal(consume([empty], [onePerSeven], [1], 6999).allowed, false, 'a millisecond early is still refused')
  // A large clock: the same at the time of day.
  const start = 1_767_225_600_000
  const drained: BucketState = { tokens: 0, lastMs: start }
  t.equal(consume([drained], [onePerSeven], [1], start).retryAfterMs, 7000)
  t.equal(consume([drained], [onePerSeven], [1], start + 7000).allowed, true)
})
