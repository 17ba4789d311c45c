/**
 * `npm run faults`: every fault case, three runs each (FAULTS_RUNS to change),
 * written to docs/faults.md; exits 1 if any run broke its bound. FAULTS_ONLY=<text>
 * runs only the cases whose id contains it.
 */
import { execFileSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { ALL_CASES, type FaultCase } from './cases.js'
import { runCase } from './harness.js'
import { report, type CaseResults } from './report.js'

const RUNS = Number(process.env.FAULTS_RUNS ?? 3)
const OUTPUT = process.env.FAULTS_OUTPUT ?? 'docs/faults.md'

function libVersion (): string {
  try {
    return execFileSync('git', ['log', '-1', '--format=%h (%cs)', '--', 'lib'], { encoding: 'utf8' }).trim()
  } catch {
    return 'unknown'
  }
}

async function runAll (cases: FaultCase[]): Promise<CaseResults[]> {
  const results: CaseResults[] = []
  for (const [i, faultCase] of cases.entries()) {
    const entry: CaseResults = { faultCase, runs: [] }
    results.push(entry)
    for (let run = 1; run <= RUNS; run++) {
      try {
        const result = await runCase(faultCase)
        entry.runs.push(result)
        const other = Object.keys(result.unexpected).length === 0 ? '' : ` other answers ${JSON.stringify(result.unexpected)}`
        console.log(`[${i + 1}/${cases.length}] ${faultCase.id} run ${run}: admitted ${result.admitted} / bound ${result.bound.toFixed(1)} ${result.passed ? 'ok' : 'BROKEN'}${other}` +
          ` recovery ${result.recoveryMs === undefined ? 'never' : `${result.recoveryMs.toFixed(0)} ms`} failovers ${result.failovers}${result.counted ? '' : ' (replicas not all counted before the load)'}`)
      } catch (error) {
        entry.error = error instanceof Error ? error.message : String(error)
        console.log(`[${i + 1}/${cases.length}] ${faultCase.id} run ${run}: ERROR ${entry.error}`)
      }
    }
  }
  return results
}

// Ctrl-C: exit, so that cleanup.ts kills what the run started.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130))

const started = performance.now()
const notes: string[] = []
const only = process.env.FAULTS_ONLY
const cases = ALL_CASES.filter((faultCase) => only === undefined || faultCase.id.includes(only))
const results = await runAll(cases)
const minutes = (performance.now() - started) / 60_000
writeFileSync(OUTPUT, report(results, { date: new Date().toISOString(), minutes, lib: libVersion(), notes }))
const broken = results.filter(({ runs, error }) => error !== undefined || runs.some((run) => !run.passed))
console.log(`${OUTPUT} written in ${minutes.toFixed(1)} minutes; ${broken.length} of ${results.length} cases broke a bound or failed`)
process.exitCode = broken.length === 0 ? 0 : 1
