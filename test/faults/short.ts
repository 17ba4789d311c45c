/**
 * The short fault suite of `npm test`: a few cases, once each, in tap; every
 * case asserts its bound and the answers it may give. The same cases run three
 * times in `npm run faults` (run.ts), with a report.
 */
import type { Test } from 'tap'
import { requireRedis } from '../redis-server.js'
import { SLACK } from './bounds.js'
import type { FaultCase } from './cases.js'
import { runCase } from './harness.js'

/** Each case: about 8–13 s of window, plus startup and teardown. */
const CASE_TIMEOUT_MS = 40_000

export function shortSuite (t: Test, cases: FaultCase[]): void {
  if (!requireRedis(t)) return
  for (const faultCase of cases) {
    t.test(`fault ${faultCase.id}: at most ${faultCase.bound} admitted`, { timeout: CASE_TIMEOUT_MS }, async (t) => {
      const result = await runCase(faultCase)
      const { t: seconds, d, k } = result.input
      t.ok(result.counted, 'every replica counted 3 live replicas before the load began')
      t.ok(result.admitted <= result.bound + SLACK,
        `admitted ${result.admitted} ≤ ${result.formula} = ${result.bound.toFixed(1)} (+${SLACK}) (t=${seconds.toFixed(2)} s, d=${d.toFixed(2)} s, k=${k})`)
      t.same(result.unexpected, {}, `answers only ${faultCase.failMode === 'closed' ? '200, 429 and 503' : '200 and 429'} (all: ${JSON.stringify(result.statuses)})`)
      t.comment(`recovery ${result.recoveryMs === undefined ? 'never' : `${result.recoveryMs.toFixed(0)} ms`}, failovers ${result.failovers}`)
    })
  }
}
