/**
 * The short fault suite of `npm test`: a few cases, once each, in tap; every
 * case asserts its bound and the answers it may give. The same cases run three
 * times in `npm run faults` (run.ts), with a report.
 */
import type { Test } from 'tap'
import { requireRedis } from '../redis-server.js'
import { SLACK } from './bounds.js'
import type { FaultCase } from './cases.js'
import { runCase, type StartupGate } from './harness.js'

/** Each case: about 8–13 s of window, plus startup and teardown. */
const CASE_TIMEOUT_MS = 40_000
/** A case's startup, at most (Redis, three replicas, a heartbeat that counts them) on a busy machine. */
const STARTUP_MS = 30_000

/** One startup at a time: the next case starts once the one before counts its replicas. */
function oneAtATime (): StartupGate {
  let previous: Promise<unknown> = Promise.resolve()
  return (startup) => {
    const started = previous.then(startup)
    previous = started.catch(() => {})
    return started
  }
}

export function shortSuite (t: Test, cases: FaultCase[]): void {
  if (!requireRedis(t)) return
  // The cases side by side, started one at a time: each has its own Redis, replicas and load, and mostly waits for its window to pass.
  t.jobs = cases.length
  const gate = oneAtATime()
  for (const [i, faultCase] of cases.entries()) {
    // Its timeout counts the startups before its own too.
    t.test(`fault ${faultCase.id}: at most ${faultCase.bound} admitted`, { timeout: CASE_TIMEOUT_MS + i * STARTUP_MS }, async (t) => {
      const result = await runCase(faultCase, gate)
      const { t: seconds, d, k } = result.input
      t.ok(result.counted, 'every replica counted 3 live replicas before the load began')
      t.ok(result.admitted <= result.bound + SLACK,
        `admitted ${result.admitted} ≤ ${result.formula} = ${result.bound.toFixed(1)} (+${SLACK}) (t=${seconds.toFixed(2)} s, d=${d.toFixed(2)} s, k=${k})`)
      t.same(result.unexpected, {}, `answers only ${faultCase.failMode === 'closed' ? '200, 429 and 503' : '200 and 429'} (all: ${JSON.stringify(result.statuses)})`)
      t.comment(`recovery ${result.recoveryMs === undefined ? 'never' : `${result.recoveryMs.toFixed(0)} ms`}, failovers ${result.failovers}`)
    })
  }
}
