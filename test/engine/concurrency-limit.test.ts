/**
 * Capacity protection's control law (engine/concurrency-limit.ts): edge cases by
 * name, a table of signal traces → limits, and properties (fast-check): the limit
 * stays within its bounds, and it converges back once the signal clears
 * (priorities: priority-levels.test.ts).
 */
import { test } from 'tap'
import fc from 'fast-check'
import { ConcurrencyLimit, DECAY, GROWTH, INITIAL_LIMIT, MAX_CUT, MAX_OVERLOAD, type Interval } from '../../lib/engine/concurrency-limit.js'

const bounds = { min: 4, max: 1000 }
const quiet: Interval = { overload: 0.5, inUse: 0, shed: 0 }

/** The limit after each interval of `trace`. */
function limits (trace: Interval[], law = new ConcurrencyLimit(bounds)): number[] {
  return trace.map((interval) => { law.update(interval); return Math.round(law.limit * 1000) / 1000 })
}

test('starts at INITIAL_LIMIT, within the bounds', async (t) => {
  t.equal(new ConcurrencyLimit(bounds).limit, INITIAL_LIMIT)
  t.equal(new ConcurrencyLimit({ min: 50, max: 100 }).limit, 50, 'raised to the floor')
  t.equal(new ConcurrencyLimit({ min: 1, max: 8 }).limit, 8, 'lowered to the ceiling')
})

test('a healthy interval that shed nothing leaves the limit where it is', async (t) => {
  t.same(limits([quiet, quiet, { overload: 1, inUse: 19, shed: 0 }]), [20, 20, 20])
})

test('slow start: doubles after each healthy interval that shed, until the first cut', async (t) => {
  const shedding: Interval = { overload: 0.2, inUse: 20, shed: 3 }
  t.same(limits([shedding, shedding, shedding]), [40, 80, 160])
})

test('over target: cut from the concurrency in use, by 1 / overload, at most to half', async (t) => {
  t.same(limits([{ overload: 1.25, inUse: 20, shed: 0 }]), [16], '25% over: × 0.8')
  t.same(limits([{ overload: 10, inUse: 20, shed: 0 }]), [20 * MAX_CUT], 'far over: halved, no more')
  t.same(limits([{ overload: 2, inUse: 8, shed: 0 }]), [4], 'from the 8 in use, not from the limit of 20')
  t.same(limits([{ overload: 2, inUse: 100, shed: 0 }]), [10], 'the limit, when more were in flight than it (shadow mode)')
})

test('never below the floor nor above the ceiling', async (t) => {
  t.same(limits([{ overload: 50, inUse: 0, shed: 0 }, { overload: 50, inUse: 0, shed: 0 }]), [4, 4])
  const small = new ConcurrencyLimit({ min: 1, max: 30 })
  t.same(limits([{ overload: 0, inUse: 20, shed: 1 }, { overload: 0, inUse: 30, shed: 1 }], small), [30, 30])
})

test('after a cut, probes up by GROWTH of itself (at least 1) per healthy interval that shed', async (t) => {
  const law = new ConcurrencyLimit(bounds)
  law.update({ overload: 2, inUse: 20, shed: 0 }) // 10
  // The smoothed overload decays by DECAY of its gap per interval: 2 → 1.25 → 0.875.
  t.same(limits([{ overload: 0.5, inUse: 10, shed: 5 }], law), [8], 'still over target while decaying (1.25): cut again')
  t.equal(law.overload, 2 + DECAY * (0.5 - 2))
  t.same(limits([{ overload: 0.5, inUse: 8, shed: 5 }, { overload: 0.5, inUse: 9, shed: 5 }], law), [9, 10], '+1 while 10% is less than 1')
  law.limit = 100
  t.same(limits([{ overload: 0.5, inUse: 100, shed: 1 }], law), [Math.round(100 * (1 + GROWTH) * 1000) / 1000])
})

test('the overload rises at once and decays by halves', async (t) => {
  const law = new ConcurrencyLimit(bounds)
  const seen = [3, 1, 1, 1, 5, 0].map((overload) => { law.update({ overload, inUse: 4, shed: 0 }); return law.overload })
  t.same(seen, [3, 2, 1.5, 1.25, 5, 2.5])
})

test('NaN is no reading; a negative one reads 0; one above MAX_OVERLOAD (Infinity too) reads MAX_OVERLOAD', async (t) => {
  const law = new ConcurrencyLimit(bounds)
  law.update({ overload: 2, inUse: 20, shed: 0 })
  law.update({ overload: Number.NaN, inUse: 10, shed: 0 })
  t.equal(law.overload, 2, 'kept')
  law.update({ overload: -3, inUse: 10, shed: 0 })
  t.equal(law.overload, 1, 'a negative one reads 0')
  law.update({ overload: Number.MAX_VALUE, inUse: 10, shed: 0 })
  t.equal(law.overload, MAX_OVERLOAD)
  law.update({ overload: Infinity, inUse: 10, shed: 0 })
  t.equal(law.overload, MAX_OVERLOAD)
  let intervals = 0
  while (law.overload > 1) { law.update({ overload: 0, inUse: 4, shed: 0 }); intervals++ }
  t.equal(intervals, 7, 'an absurd reading decays within 7 intervals')
})

test('recoveryMs: the overload decaying to its target, then the limit growing to the load', async (t) => {
  const law = new ConcurrencyLimit(bounds)
  t.equal(law.recoveryMs(4, 0.25, 100), 100, 'healthy, limit enough: one interval')
  t.equal(law.recoveryMs(39, 0.5, 100), 200, 'slow start: two doublings, to 80')
  law.update({ overload: 4, inUse: 20, shed: 0 }) // limit 10, overload 4: two halvings to 1
  t.equal(law.recoveryMs(9, 1, 100), 300, 'two intervals of decay, one more')
})

const interval = fc.record({ overload: fc.oneof(fc.double({ min: 0, max: 100, noNaN: true }), fc.constant(1)), inUse: fc.nat(2000), shed: fc.nat(50) })

test('property: the limit stays within [min, max]', async (t) => {
  const result = fc.check(fc.property(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 0, max: 5000 }), fc.array(interval, { maxLength: 200 }), (min, extra, trace) => {
    const law = new ConcurrencyLimit({ min, max: min + extra })
    return trace.every((step) => { law.update(step); return law.limit >= min && law.limit <= min + extra })
  }), { seed: 17, numRuns: 300 })
  t.notOk(result.failed, JSON.stringify(result.counterexample))
})

test('property: once the signal clears, the limit climbs back to what the load asks', async (t) => {
  const result = fc.check(fc.property(fc.array(interval, { maxLength: 50 }), fc.integer({ min: 4, max: 1000 }), (trace, demand) => {
    const law = new ConcurrencyLimit(bounds)
    for (const step of trace) law.update(step)
    // Healthy from now on, with `demand` requests wanting in: shed while the limit is below it.
    for (let i = 0; i < 200; i++) law.update({ overload: 0.5, inUse: Math.min(demand, law.limit), shed: law.limit < demand ? 1 : 0 })
    return law.limit >= demand && law.overload <= 1
  }), { seed: 19, numRuns: 300 })
  t.notOk(result.failed, JSON.stringify(result.counterexample))
})
