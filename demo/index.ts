/**
 * `npm run demo`: the token bucket, three replicas with and without a shared
 * store, a Redis outage, the two layers, and the decisions as a dashboard sees
 * them on `node:diagnostics_channel`, drawn in the terminal in about 32 s.
 * Starts a private redis-server when one is on PATH; without one, it runs the
 * memory acts. `npm run demo -- 2 3` runs some acts. Acts 2 and 5 also draw
 * their figures as SVGs, in build/demo/replicas.svg and build/demo/decisions.svg,
 * or in the files `--svg <file>` and `--decisions-svg <file>` name
 * (`npm run demo -- 2 --svg demo/replicas.svg` refreshes the README's).
 * `npm run demo -- pool` runs the PostgreSQL pool scenario instead (demo/pool/).
 */
import { writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Redis } from 'ioredis'
import type { RedisServer } from '../test/redis-server.js'
import type { DecisionsAct, ReplicaRun } from './acts.js'
import type { ReplicaSeries } from './chart.js'

const print = (line = ''): void => { process.stdout.write(`${line}\n`) }

/** Redraws a block of lines in place on a terminal; elsewhere prints only the final block. */
class Live {
  private drawn = 0
  draw (lines: string[]): void {
    if (!tty) return
    if (this.drawn > 0) process.stdout.write(`\x1b[${this.drawn}A`)
    for (const line of lines) process.stdout.write(`\x1b[2K${line}\n`)
    this.drawn = lines.length
  }

  finish (lines: string[]): void {
    if (tty) this.draw(lines)
    else for (const line of lines) print(line)
    this.drawn = 0
  }
}

const clock = (elapsedMs: number, durationMs: number): string =>
  p.dim(`${progressBar(elapsedMs / durationMs, 24)} ${(elapsedMs / 1000).toFixed(1)} / ${(durationMs / 1000).toFixed(1)} s`)

function title (number: number, text: string, about: string): void {
  print()
  print(p.bold(`Act ${number}/5 · ${text}`))
  for (const line of about.split('\n')) print(p.dim(line))
  print()
}

const USAGE = `Usage: npm run demo -- [act …] [--svg <file>] [--decisions-svg <file>]
  acts: 1 the token bucket, 2 three replicas, 3 Redis goes away, 4 the two layers, 5 watching it (default: all)
  --svg <file>: where act 2 writes its SVG (default: build/demo/replicas.svg)
  --decisions-svg <file>: where act 5 writes its SVG (default: build/demo/decisions.svg)
  pool [--svg <file>]: the PostgreSQL pool scenario alone (about 75 s; needs PostgreSQL on 127.0.0.1:5432),
    its SVG in build/demo/pool.svg unless --svg says where
`
const args = process.argv.slice(2)
if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write(USAGE)
  process.exit(0)
}
/**
 * Takes `flag <file>` out of `args`: the file, resolved where npm was called; without
 * the flag, `fallback` beside this script, under build/ (never a tracked file unless asked).
 */
function fileFlag (flag: string, fallback: string): string {
  const at = args.indexOf(flag)
  if (at === -1) return fileURLToPath(new URL(fallback, import.meta.url))
  const file = args[at + 1]
  if (file === undefined || file.startsWith('--')) {
    process.stderr.write(USAGE)
    process.exit(1)
  }
  args.splice(at, 2)
  return resolve(process.env.INIT_CWD ?? process.cwd(), file) // npm runs scripts in the package folder; INIT_CWD is where it was called
}
if (args[0] === 'pool') {
  const svg = fileFlag('--svg', 'pool.svg')
  if (args.length > 1) {
    process.stderr.write(`Unknown argument ${args.slice(1).map((arg) => `"${arg}"`).join(', ')}.\n${USAGE}`)
    process.exit(1)
  }
  const { runPoolDemo } = await import('./pool/index.js')
  process.exit(await runPoolDemo(svg))
}
const svgFile = fileFlag('--svg', 'replicas.svg')
const decisionsSvgFile = fileFlag('--decisions-svg', 'decisions.svg')
const unknown = args.filter((arg) => !['1', '2', '3', '4', '5'].includes(arg))
if (unknown.length > 0) {
  process.stderr.write(`Unknown act ${unknown.map((arg) => `"${arg}"`).join(', ')}.\n${USAGE}`)
  process.exit(1)
}
// The acts' modules (Fastify, the plugin, ioredis) once the arguments are known good: --help and a wrong
// argument answer without loading them.
const { Redis: RedisClient } = await import('ioredis')
const { RedisServer: PrivateRedis, freePort, redisAvailable } = await import('../test/redis-server.js')
const {
  bucketAct, decisionsAct, layersAct, memoryStores, perSecond, realTime, redisStores, replicaRun, steadyRate, total,
  OFFERED_PER_SECOND, OUTCOMES, REPLICA_QUOTA
} = await import('./acts.js')
const { columns, decisionsSvg, paint, progressBar, replicaSvg, secondsAxis, sparkline, stackedColumns } = await import('./chart.js')
const tty = process.stdout.isTTY
const p = paint(tty)

const acts = new Set(args.map(Number))
const wants = (act: number): boolean => acts.size === 0 || acts.has(act)
const started = performance.now()
const summary: string[] = []

// ------------------------------------------------------------ act 1
if (wants(1)) {
  title(1, 'the token bucket', 'One client, one bucket: capacity B = 20, refill R = 5/s. It sends 40 requests a second.\nThe bucket admits the burst up to B, then about R a second: a steady client gets a steady share, never a timeout.')
  const live = new Live()
  const durationMs = 4000
  const render = (elapsedMs: number, act: Awaited<ReturnType<typeof bucketAct>>): string[] => {
    return [
      ...columns(act.admitted, act.refused, 10, p),
      `      ${p.dim(secondsAxis(act.admitted.length, act.binMs))}`,
      `      ${p.green('█')} admitted   ${p.red('░')} refused (429)   per ${act.binMs} ms      ${clock(elapsedMs, durationMs)}`
    ]
  }
  const act = await bucketAct(realTime, (elapsedMs, state) => { live.draw(render(elapsedMs, state)) }, durationMs)
  live.finish(render(durationMs, act))
  const admitted = act.admitted.reduce((a, b) => a + b, 0)
  const refused = act.refused.reduce((a, b) => a + b, 0)
  const line = `Act 1: admitted ${admitted} of ${admitted + refused}: B + R × t = 20 + 5 × ${durationMs / 1000} = ${20 + 5 * durationMs / 1000}.`
  print(line)
  summary.push(line)
}

// ------------------------------------------------------------ acts 2 and 3 need Redis for their second half
let redis: RedisServer | undefined
const clients: Redis[] = []
const connect = (): Redis => {
  const client = new RedisClient({ port: redis!.port, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: (times) => Math.min(100 * times, 500) })
  client.on('error', () => {}) // the store reports outages itself
  clients.push(client)
  return client
}
const disconnectAll = (): void => { for (const client of clients.splice(0)) client.disconnect() }
if ((wants(2) || wants(3)) && redisAvailable) redis = await new PrivateRedis(await freePort()).start()

const scale = REPLICA_QUOTA.refillPerSecond * 3 * 1.2
function replicaLines (run: ReplicaRun, label: string): string[] {
  const sum = total(run)
  const rate = (values: number[]): string => `${Math.round(steadyRate(values))}/s`.padStart(7)
  return [
    ...run.replicas.map((values, i) => `  replica ${String.fromCharCode(65 + i)}  ${p.green(sparkline(values, scale).padEnd(8))}  ${rate(values)}`),
    `  ${p.bold('total    ')}  ${p.bold(sparkline(sum, scale).padEnd(8))}  ${p.bold(rate(sum))}   ${label}: ${(steadyRate(sum) / REPLICA_QUOTA.refillPerSecond).toFixed(1)} × the quota of ${REPLICA_QUOTA.refillPerSecond}/s`
  ]
}

if (wants(2)) {
  title(2, 'three replicas', `The service allows one client ${REPLICA_QUOTA.refillPerSecond} requests a second. It runs as three replicas behind a load balancer,\nand a client offers ${OFFERED_PER_SECOND}/s. With a memory store each replica counts alone: the database sees three times the quota.\nWith the Redis store they share one bucket.`)
  const panels: ReplicaSeries[] = []
  const durationMs = 4000
  for (const [label, makeStore] of [
    ['memory stores', memoryStores(realTime)],
    ...(redis === undefined ? [] : [['Redis store', redisStores(realTime, connect)]] as const)
  ] as const) {
    const live = new Live()
    print(p.bold(`  ${label}`) + p.dim(`  (admitted per second, bins of 0.5 s)`))
    const run = await replicaRun(realTime, makeStore, { durationMs, onTick: (elapsedMs, state) => { live.draw([...replicaLines(state, label), `  ${clock(elapsedMs, durationMs)}`]) } })
    live.finish(replicaLines(run, label))
    disconnectAll()
    panels.push({ title: label, replicas: run.replicas, limitPerSecond: REPLICA_QUOTA.refillPerSecond })
    summary.push(`Act 2, ${label}: ${Math.round(steadyRate(total(run)))} admitted/s in total for a quota of ${REPLICA_QUOTA.refillPerSecond}/s.`)
    print()
  }
  if (redis === undefined) print(p.yellow('  redis-server is not on PATH: the Redis half of this act is skipped (apt-get install redis-server).'))
  writeFileSync(svgFile, replicaSvg(panels, 0.5))
  print(p.dim(`  Wrote ${svgFile}`))
}

if (wants(3)) {
  title(3, 'Redis goes away', 'The same three replicas on Redis. Redis is killed at 2 s and started again at 4 s.\nEach store times out in 50 ms, opens its breaker and falls back to its local share: quota × 1.2 / 3 replicas.\nNo request fails or hangs; when Redis is back, the breaker\'s probe closes it and the quota is shared again.')
  if (redis === undefined) {
    print(p.yellow('  Skipped: redis-server is not on PATH (apt-get install redis-server).'))
  } else {
    const server = redis
    const durationMs = 7000
    const live = new Live()
    const lines = (run: ReplicaRun, elapsedMs: number): string[] => {
      const sum = total(run)
      const modes = run.mode.map((mode) => mode === 'shared' ? p.green('█') : p.yellow('▒')).join('')
      return [
        `  admitted/s  ${p.bold(sparkline(sum, scale))}`,
        `  store       ${modes}   ${p.green('█')} shared in Redis  ${p.yellow('▒')} local share`,
        `  requests that failed (5xx): ${run.errors}     ${clock(elapsedMs, durationMs)}`
      ]
    }
    const run = await replicaRun(realTime, redisStores(realTime, connect), {
      durationMs,
      events: [{ atMs: 2000, run: async () => { await server.kill() } }, { atMs: 4000, run: async () => { await server.start() } }],
      onTick: (elapsedMs, state) => { live.draw(lines(state, elapsedMs)) }
    })
    live.finish(lines(run, durationMs))
    disconnectAll()
    const sum = total(run)
    const mean = (from: number, to: number): number => Math.round(sum.slice(from, to).reduce((a, b) => a + b, 0) / Math.max(1, sum.slice(from, to).length))
    const line = `Act 3: ${mean(1, 4)}/s shared before, ${mean(5, 8)}/s on local shares during the outage, ${mean(11, 14)}/s after; ${run.errors} failed requests.`
    print(line)
    summary.push(line)
  }
}
if (redis !== undefined) await redis.stop()

// ------------------------------------------------------------ act 4
if (wants(4)) {
  title(4, 'the two layers', 'The edge (onRequest, per IP: 100, then 50/s) stops floods before authentication; the app layer (after JWT, per user:\ndefault 20 then 10/s, vip 200 then 100/s) gives each user their quota, and POST /export costs 10 tokens.')
  const live = new Live()
  const durationMs = 3000
  const table = (clients: Awaited<ReturnType<typeof layersAct>>, elapsedMs: number): string[] => [
    `  ${'client'.padEnd(52)} ${'sent'.padStart(5)} ${'admitted'.padStart(9)} ${'refused by edge'.padStart(16)} ${'by app'.padStart(7)}`,
    ...clients.map((c) => `  ${c.label.padEnd(52)} ${String(c.sent).padStart(5)} ${p.green(String(c.admitted).padStart(9))} ${p.red(String(c.edge).padStart(16))} ${p.red(String(c.app).padStart(7))}  ${p.green('█'.repeat(Math.round((c.admitted / Math.max(1, c.sent)) * 20)))}${p.red('░'.repeat(20 - Math.round((c.admitted / Math.max(1, c.sent)) * 20)))}`),
    `  ${clock(elapsedMs, durationMs)}`
  ]
  const clients = await layersAct(realTime, (elapsedMs, state) => { live.draw(table(state, elapsedMs)) }, durationMs)
  live.finish(table(clients, durationMs).slice(0, -1))
  summary.push(`Act 4: ${clients.map((c) => `${c.label.split(',')[0]}: ${c.admitted}/${c.sent}`).join('; ')}.`)
}

// ------------------------------------------------------------ act 5
if (wants(5)) {
  title(5, 'watching it', 'The plugin publishes each decision on node:diagnostics_channel (DECISION_CHANNEL). A subscriber counts them by outcome,\nas a dashboard would. One client floods an edge of B = 20, R = 10/s per IP at 50 requests a second for 4 s, then backs off\nto 5 a second. near-limit: passed with 20% of the bucket or less left.')
  const live = new Live()
  const durationMs = 7000
  const render = (elapsedMs: number, act: DecisionsAct): string[] => {
    const bins = act.sent.length
    const floodBins = act.floodMs / act.binMs
    return [
      ...stackedColumns([
        { values: act.outcomes.allowed, cell: p.green('██') },
        { values: act.outcomes['near-limit'], cell: p.yellow('▓▓') },
        { values: act.outcomes.refused, cell: p.red('░░') }
      ], 10),
      `      ${p.dim(secondsAxis(bins, act.binMs))}`,
      `      ${p.dim(`├ flood, ${act.floodPerSecond}/s`.padEnd(floodBins * 2))}${p.dim(`├ back-off, ${act.backOffPerSecond}/s`)}`,
      `      ${p.green('█')} allowed   ${p.yellow('▓')} near-limit   ${p.red('░')} refused   decisions per ${act.binMs} ms, counted on the channel      ${clock(elapsedMs, durationMs)}`
    ]
  }
  // Redrawn every 100 ms: the act ticks every 20 ms.
  const act = await decisionsAct(realTime, (elapsedMs, state) => { if (elapsedMs % 100 === 0) live.draw(render(elapsedMs, state)) }, durationMs)
  live.finish(render(durationMs, act))
  const totals = OUTCOMES.map((outcome) => [outcome, act.outcomes[outcome].reduce((a, b) => a + b, 0)] as const)
  const decisions = totals.reduce((sum, [, count]) => sum + count, 0)
  const sent = act.sent.reduce((a, b) => a + b, 0)
  const refused = act.outcomes.refused
  print(`  ${totals.map(([outcome, count]) => `${count} ${outcome}`).join(' + ')} = ${decisions} decisions, for ${sent} requests sent (${act.tooMany} answered 429).`)
  print(p.dim(`  Mean storeMs (the store's time to answer): ${(act.storeMs / Math.max(1, decisions)).toFixed(3)} ms.`))
  writeFileSync(decisionsSvgFile, decisionsSvg(act))
  print(p.dim(`  Wrote ${decisionsSvgFile}`))
  const refusedAfter = refused.slice(act.floodMs / act.binMs).reduce((a, b) => a + b, 0)
  const line = `Act 5: ${decisions} decisions on the channel for ${sent} requests; ${perSecond(refused, act.binMs, 1000, act.floodMs)} refused/s in the flood after its first second (${act.floodPerSecond} offered − R ${act.refillPerSecond}), ${refusedAfter} after the back-off.`
  print(line)
  summary.push(line)
}

print()
print(p.bold(`Done in ${((performance.now() - started) / 1000).toFixed(1)} s.`))
for (const line of summary) print(p.dim(line))
