/**
 * Capacity protection's priorities (engine/priority-levels.ts): the shares, what
 * each level counts, the limit in use, and a property (fast-check): whenever a
 * lower priority is admitted, every higher one is.
 */
import { test } from 'tap'
import fc from 'fast-check'
import { PriorityLevels, type Level } from '../../lib/engine/priority-levels.js'

test('level i of n has the share (n − i) / n: critical routes the whole limit', async (t) => {
  t.same(new PriorityLevels(4).levels.map((level) => level.share), [1, 0.75, 0.5, 0.25])
  t.same(new PriorityLevels(1).levels, [{ index: 0, share: 1 }])
})

test('a level counts its own requests in flight and those of higher levels, never lower ones', async (t) => {
  const p = new PriorityLevels(4)
  const [critical, vip, standard, anonymous] = p.levels as [Level, Level, Level, Level]
  for (let i = 0; i < 5; i++) p.enter(anonymous)
  t.notOk(p.admits(anonymous, 20), 'anonymous: 5 of 20 × 1/4')
  t.ok(p.admits(standard, 20), 'default does not count the anonymous ones')
  for (let i = 0; i < 9; i++) p.enter(standard)
  t.ok(p.admits(standard, 20), '9 < 10')
  p.enter(standard)
  t.notOk(p.admits(standard, 20))
  t.ok(p.admits(vip, 20))
  for (let i = 0; i < 15; i++) p.enter(vip)
  t.notOk(p.admits(vip, 20))
  t.ok(p.admits(critical, 20))
  t.equal(p.total, 30)
  t.equal(p.countUpTo(standard), 25)
  p.leave(vip)
  t.ok(p.admits(vip, 20))
})

test('the limit in use: the least limit under which every request in flight would be admitted', async (t) => {
  const p = new PriorityLevels(4)
  const [, vip, , anonymous] = p.levels as [Level, Level, Level, Level]
  t.equal(p.inUse(), 0)
  t.equal(p.enter(anonymous), 4, 'one anonymous needs a limit of 4')
  t.equal(p.enter(anonymous), 8)
  t.equal(p.enter(vip), 4 / 3)
  t.equal(p.inUse(), 12, 'the anonymous ones count the vip one too: 3 / (1/4)')
  p.leave(anonymous)
  t.equal(p.inUse(), 8)
})

test('property: whenever a lower priority is admitted, every higher one is', async (t) => {
  const step = fc.record({ level: fc.nat(3), enter: fc.boolean() })
  const result = fc.check(fc.property(fc.array(step, { maxLength: 300 }), fc.double({ min: 1, max: 200, noNaN: true }), (steps, limit) => {
    const p = new PriorityLevels(4)
    const inside = [0, 0, 0, 0]
    for (const { level, enter } of steps) {
      const at = p.levels[level] as Level
      const count = inside[level] as number
      if (enter) { p.enter(at); inside[level] = count + 1 } else if (count > 0) { p.leave(at); inside[level] = count - 1 }
      const admitted = p.levels.map((candidate) => p.admits(candidate, limit))
      if (admitted.some((yes, i) => yes && admitted.slice(0, i).some((higher) => !higher))) return false
    }
    return p.total === inside.reduce((a, b) => a + b, 0)
  }), { seed: 21, numRuns: 300 })
  t.notOk(result.failed, JSON.stringify(result.counterexample))
})
