/**
 * The pool scenario (demo/pool/) on the real PostgreSQL pool, in shortened acts:
 * one abusive client beside fair users with both layers, a crowd of clients each
 * under its limits with static limits only, and the same crowd with capacity
 * protection. Latency bounds are relative to the unloaded p99 measured first in
 * this same test, plus a margin for a shared machine. About 45 s.
 */
import t from 'tap'
import pg from 'pg'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { loadavg } from 'node:os'
import { fileURLToPath } from 'node:url'
import { CROWD, phases, recoveryMs, runPhase, type PhaseResult, type Plan } from '../../demo/pool/acts.js'
import { addCounts } from '../../demo/pool/load.js'
import { phaseFigures, type ClassFigures } from '../../demo/pool/report.js'
import { untracedEnv } from '../child-env.js'
import { inCI } from '../redis-server.js'

// About 35 s of acts in real time, plus the servers' starts.
t.setTimeout(90_000)

/**
 * Shorter acts, and each request holding its connection 50 ms instead of the demo's 20: the same
 * scenario at 2/5 of the rates (a capacity of about 200/s; the abuser at 1 000/s, the crowd at
 * 600/s), so that the test's two processes need less CPU than the demo's on a shared machine.
 * POOL_HOLD_MS=20 runs it at the demo's rates.
 */
const SHORT: Plan = { baselineMs: 3000, act1Ms: 5000, act2Ms: 4000, floodMs: 5000, tailMs: 11_000, holdMs: Number(process.env.POOL_HOLD_MS ?? 50) }
/** Absolute slack on top of 3 × the unloaded p99: the machine is shared with other work. */
const MARGIN_MS = 30

async function postgresUp (): Promise<boolean> {
  const client = new pg.Client({ host: process.env.PGHOST ?? '127.0.0.1', port: Number(process.env.PGPORT ?? 5432), user: process.env.PGUSER ?? 'postgres', database: process.env.PGDATABASE ?? 'test', connectionTimeoutMillis: 2000 })
  try {
    await client.connect()
    await client.query('SELECT 1')
    return true
  } catch {
    return false
  } finally {
    await client.end().catch(() => {})
  }
}

const byName = (figures: ClassFigures[], name: string): ClassFigures => {
  const found = figures.find((f) => f.name === name)
  if (found === undefined) throw new Error(`no class ${name}`)
  return found
}
const failed = (f: ClassFigures): number => f.poolTimeouts + f.noAnswer + f.otherErrors
const machine = (result: PhaseResult): string =>
  `server CPU ${result.serverCpuMs.toFixed(0)} ms, event loop p99 ${result.serverEventLoopDelayP99Ms.toFixed(1)} ms; load generator CPU ${result.run.cpuMs.toFixed(0)} ms, event loop p99 ${result.run.eventLoopDelayP99Ms.toFixed(1)} ms; load average ${loadavg().map((n) => n.toFixed(2)).join(' ')}`
const summary = (figures: ClassFigures[]): string => figures.map((f) =>
  `${f.name}: ${f.sent} sent, ${f.admittedPerSecond.toFixed(0)}/s, p50 ${f.p50.toFixed(1)} ms, p99 ${f.p99.toFixed(1)} ms, ${f.tooMany} 429, ${f.shed} 503, ${f.poolTimeouts} pool timeouts, ${f.noAnswer} no answer, ${f.otherErrors} other`).join('; ')

t.test('npm run demo -- pool: a wrong argument fails with the usage, running nothing', async (t) => {
  const demo = fileURLToPath(new URL('../../demo/index.js', import.meta.url))
  const child = spawn(process.execPath, [demo, 'pool', '--fast'], { env: untracedEnv(), stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => { output += String(chunk) })
  child.stderr.on('data', (chunk: Buffer) => { output += String(chunk) })
  const [code] = await once(child, 'close') as [number | null]
  t.equal(code, 1)
  t.match(output, /^Unknown argument "--fast"\.\nUsage: npm run demo -- .*\n[^]*pool \[--svg <file>\]: the PostgreSQL pool scenario/)
  t.notMatch(output, /The pool scenario/, 'no act ran')
})

t.test('the pool scenario on PostgreSQL', async (t) => {
  if (!await postgresUp()) {
    if (inCI) t.fail('PostgreSQL must answer on 127.0.0.1:5432 (user postgres, database test) in CI')
    else t.pass('SKIPPED: no PostgreSQL on 127.0.0.1:5432 (user postgres, database test)', { skip: true })
    return
  }
  const env = untracedEnv()
  const baseline = await runPhase(phases.baseline(SHORT), env)
  const base = phaseFigures(baseline)
  const unloaded = Math.max(...base.map((f) => f.p99))
  const bound = 3 * unloaded + MARGIN_MS
  t.ok(base.every((f) => failed(f) === 0 && f.tooMany === 0), 'unloaded: every request answered 2xx')
  t.comment(`unloaded p99 ${unloaded.toFixed(1)} ms: latency bound ${bound.toFixed(1)} ms; ${machine(baseline)}`)

  await t.test('act 1: one abusive client beside fair users, both layers', async (t) => {
    const result = await runPhase(phases.abuserWith(SHORT), env)
    const figures = phaseFigures(result)
    const abuser = byName(figures, 'abuser (1 address)')
    const fair = byName(figures, 'fair users')
    t.ok(fair.p99 <= bound, `fair users' p99 ${fair.p99.toFixed(1)} ms ≤ ${bound.toFixed(1)} ms`)
    t.equal(fair.tooMany + fair.shed, 0, 'no fair request refused')
    t.equal(figures.reduce((sum, f) => sum + f.poolTimeouts, 0), 0, 'no pool timeout')
    t.equal(figures.reduce((sum, f) => sum + failed(f), 0), 0, 'no 5xx, no request without an answer')
    t.ok(abuser.tooMany > abuser.sent * 0.9, `the abuser is refused: ${abuser.tooMany} 429s of ${abuser.sent}`)
    t.equal(abuser.tooManyBare, 0, 'each 429 with Retry-After')
    t.comment(`${summary(figures)}; ${machine(result)}`)
  })

  await t.test('act 2: a crowd of clients under their limits, static limits only', async (t) => {
    const result = await runPhase(phases.crowdStatic(SHORT), env)
    const figures = phaseFigures(result)
    const timeouts = figures.reduce((sum, f) => sum + f.poolTimeouts, 0)
    t.ok(timeouts > 0, `pool timeouts: ${timeouts}`)
    t.ok(result.serverPoolTimeouts >= timeouts, `as many or more counted by the server (${result.serverPoolTimeouts}: some answered after the client gave up)`)
    t.equal(figures.reduce((sum, f) => sum + f.tooMany, 0), 0, 'no client was over its limits')
    t.comment(`${summary(figures)}; ${machine(result)}`)
  })

  await t.test('act 3: the same crowd with capacity protection', async (t) => {
    const result = await runPhase(phases.crowdProtected(SHORT), env)
    const figures = phaseFigures(result)
    const vip = byName(figures, 'vip users')
    const anonymous = addCounts(result.run.classes.filter((one) => one.spec.addressBase === CROWD.addressBase).map((one) => one.total))
    t.ok(vip.p99 <= bound, `vip p99 ${vip.p99.toFixed(1)} ms ≤ ${bound.toFixed(1)} ms`)
    t.equal(vip.tooMany + failed(vip), 0, 'no vip request refused by a limit or failed')
    // A tier counts its own requests in flight and higher tiers', never the crowd's: the crowd cannot crowd vip out.
    t.equal(vip.shed, 0, 'no vip request shed')
    t.equal(figures.reduce((sum, f) => sum + f.poolTimeouts, 0), 0, 'no pool timeout')
    t.equal(figures.reduce((sum, f) => sum + failed(f), 0), 0, 'no 5xx but the shed 503s')
    t.ok(anonymous.shed > 0, `the anonymous crowd is shed: ${anonymous.shed}`)
    t.ok(anonymous.shed >= vip.shed, 'the lowest tier before vip')
    t.equal(figures.reduce((sum, f) => sum + f.shedBare, 0), 0, 'each 503 with Retry-After')
    const recovery = recoveryMs(result, SHORT.floodMs)
    t.ok(recovery <= 10_000, `no more sheds ${(recovery / 1000).toFixed(1)} s after the flood stopped`)
    t.comment(`${summary(figures)}; recovery ${recovery} ms; ${machine(result)}`)
  })
})
