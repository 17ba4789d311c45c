/**
 * `npm run demo -- pool [--svg <file>]`: a PostgreSQL pool of 10 connections
 * (each request holds one ~20 ms: about 500 requests a second) behind the
 * plugin, driven by open-loop load generators on loopback, in about 75 s:
 * the unloaded latency, one abusive client without and with the plugin, a
 * crowd of clients each under its limits with static limits only, and the
 * same crowd with capacity protection. Prints a summary table and writes the
 * SVG (build/demo/pool.svg unless `--svg` says where).
 */
import { writeFileSync } from 'node:fs'
import { FULL, phases, TRICKLE, recoveryMs, runPhase, WARM_MS, type PhaseResult } from './acts.js'
import { POOL } from './config.js'
import { phaseFigures, phaseTable, summaryTable, windowSeries } from './report.js'
import { poolSvg } from './svg.js'
import { paint, sparkline } from '../chart.js'
import { addCounts, type LoadRun } from './load.js'

const print = (line = ''): void => { process.stdout.write(`${line}\n`) }
const p = paint(process.stdout.isTTY)

/** A line per class: its admitted requests per 0.5 s as a sparkline, so far. */
function progress (run: LoadRun): void {
  if (!process.stdout.isTTY) return
  const lines = run.classes.map((one) => `  ${one.spec.name.padEnd(22)} ${p.green(sparkline(windowSeries(one, run.windowMs).admitted, 600))}`)
  process.stdout.write(`${lines.map((line) => `\x1b[2K${line}`).join('\n')}\n\x1b[${lines.length}A`)
}

async function phase (make: () => ReturnType<typeof runPhase>, results: PhaseResult[]): Promise<PhaseResult> {
  const result = await make()
  results.push(result)
  if (process.stdout.isTTY) process.stdout.write('\x1b[J') // clears the progress lines
  print(phaseTable(result).join('\n'))
  return result
}

const check = (ok: boolean, text: string): string => `  ${ok ? p.green('✓') : p.red('✗')} ${text}`

/** Runs the acts; resolves with the process's exit code (1 when act 3 could not run). */
export async function runPoolDemo (svgFile: string): Promise<number> {
  const started = performance.now()
  const results: PhaseResult[] = []
  print(p.bold('The pool scenario: a pg.Pool of 10 connections, each request holding one for SELECT pg_sleep(0.02)'))
  print(p.dim(`Capacity about 500 requests/s; a request that waits ${POOL.connectionTimeoutMillis} ms for a connection gets 500 POOL_TIMEOUT. Open-loop load on loopback; the API runs in a child process.`))
  print(p.dim('Plugin: edge 50 at once then 25/s per address; tiers vip 40 then 20/s, default 20 then 10/s, anonymous 10 then 3/s.'))
  print(p.dim(`Act 3 adds protect: { gauge: pool.waitingCount, target 2; priorities vip, default, anonymous; minConcurrency ${POOL.max + 2} }.`))
  const trickle = TRICKLE.clients * TRICKLE.perClientPerSecond
  print(p.dim(`  In act 3 the crowd floods for ${FULL.floodMs / 1000} s; then, for ${FULL.tailMs / 1000} s, ${TRICKLE.clients} of its addresses go on (${TRICKLE.name}, ${trickle}/s in all) beside fair and vip users, and the sheds must stop.`))
  print(p.dim(`Each phase: a fresh API process, its code warmed ${WARM_MS / 1000} s on a twin with a stand-in pool, its connections open.`))
  print()
  const base = await phase(async () => await runPhase(phases.baseline(FULL), process.env, progress), results)
  const unloaded = Math.max(...phaseFigures(base).map((f) => f.p99))
  print(p.dim(`  unloaded p99: ${unloaded.toFixed(1)} ms`))
  print()
  await phase(async () => await runPhase(phases.abuserWithout(FULL), process.env, progress), results)
  const act1 = phaseFigures(await phase(async () => await runPhase(phases.abuserWith(FULL), process.env, progress), results))
  const fair = act1[1]!
  print(check(fair.p99 <= 3 * unloaded, `fair users' p99 ${fair.p99.toFixed(1)} ms ≤ 3 × unloaded (${(3 * unloaded).toFixed(1)} ms)`))
  print(check(act1.every((f) => f.poolTimeouts + f.noAnswer + f.otherErrors === 0), 'no pool timeout, no 5xx, every request answered'))
  print(check(act1[0]!.tooMany > 0 && act1[0]!.tooManyBare === 0, `the abuser got ${act1[0]!.tooMany} 429s, each with Retry-After`))
  print()
  await phase(async () => await runPhase(phases.crowdStatic(FULL), process.env, progress), results)
  print()
  let code = 0
  try {
    const act3 = await phase(async () => await runPhase(phases.crowdProtected(FULL), process.env, progress), results)
    act3Checks(act3, unloaded)
  } catch (error) {
    print(p.red(`  Act 3 could not run: ${error instanceof Error ? error.message : String(error)} (capacity protection, the protect option, is needed)`))
    code = 1
  }
  print()
  print(p.bold('Summary'))
  for (const line of summaryTable(results)) print(line)
  writeFileSync(svgFile, poolSvg(results))
  print(p.dim(`Wrote ${svgFile}`))
  print(p.bold(`Done in ${((performance.now() - started) / 1000).toFixed(1)} s.`))
  return code
}

function act3Checks (act3: PhaseResult, unloaded: number): void {
  const figures = phaseFigures(act3)
  const vip = figures.find((f) => f.name === 'vip users')!
  const crowd = addCounts(act3.run.classes.filter((one) => one.spec.name.startsWith('anonymous')).map((one) => one.total))
  const failed = figures.reduce((sum, f) => sum + f.poolTimeouts + f.noAnswer + f.otherErrors, 0)
  const recovery = recoveryMs(act3, FULL.floodMs)
  print(check(vip.p99 <= 3 * unloaded, `vip p99 ${vip.p99.toFixed(1)} ms ≤ 3 × unloaded (${(3 * unloaded).toFixed(1)} ms)`))
  const vipSheds = act3.run.classes.find((one) => one.spec.name === 'vip users')?.windows
    .flatMap((counts, i) => counts.shed > 0 ? [`${counts.shed} at ${(i * act3.run.windowMs / 1000).toFixed(1)} s`] : []) ?? []
  print(check(vip.shed + vip.tooMany + vip.poolTimeouts + vip.noAnswer + vip.otherErrors === 0, `no vip request refused or failed${vipSheds.length > 0 ? ` (vip shed: ${vipSheds.join(', ')})` : ''}`))
  print(check(failed === 0, `no pool timeout, no 5xx but the sheds (${failed})`))
  print(check(crowd.shed >= vip.shed, `the sheds fall on the anonymous tier: ${crowd.shed} anonymous, ${figures.find((f) => f.name === 'fair users')?.shed ?? 0} default, ${vip.shed} vip`))
  const tail = addCounts(act3.run.classes.flatMap((one) => one.windows.slice(FULL.floodMs / act3.run.windowMs))).shed
  print(check(recovery <= 10_000, `no more sheds ${(recovery / 1000).toFixed(1)} s after the flood stopped (≤ 10 s; ${tail} shed after it)`))
}
