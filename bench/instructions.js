// npm run bench:instructions [scenario ...] [options]: instructions per request,
// counted by valgrind's callgrind, for the scenarios of bench/server.js. Unlike
// req/s on a shared machine, an instruction count does not depend on how busy the
// machine is, so it can judge a change of a few percent. Needs valgrind.
//
// Each run: a fresh server process under callgrind, instrumentation off, takes
// --warmup requests; then instrumentation goes on for --measured requests, dumped
// in --windows equal windows; then the process is stopped. What makes it repeat
// (each measured; bench/results/instructions.md has five runs of every scenario):
// - One set of keep-alive connections for warm-up and measurement. A new
//   connection deoptimizes code specialised on the first one's objects (V8:
//   "wrong map" in Readable, Socket, parserOnIncoming…) and the recompiles land in
//   the measured requests: with a fresh connection per phase (autocannon) the
//   count was 250k instead of 53k for bare Fastify, and edge − floor 19k instead of 4k.
// - V8 flags (NODE_FLAGS): --single-threaded, so a compile happens at the same
//   request in every run instead of when a background thread finishes; a fixed
//   young generation (16 MB semi-spaces), so scavenges come at the same allocation.
//   Not --predictable-gc-schedule: with it, the memory store's 32 MB of typed arrays
//   made V8 mark-compact every ~2 000 requests (none without it).
// - A warm-up of 15 000 requests: optimizing compiles go on until about 14 000
//   (clientAddress and consume near 11 000, a Fastify getter near 13 000).
// - A window in which V8 compiled or deoptimized is left out (the server runs with
//   --trace-opt --trace-deopt, which print only at such events). Some events depend
//   on wall time, which valgrind stretches: the memory store's first sweep (60 s)
//   deoptimizes consumeOne, @fastify/rate-limit's window reset (60 s) deoptimizes
//   applyRateLimit. A run with every window left out fails.
// - A run's figure is the median of its kept windows. On a busy machine a window
//   can also take work that V8's trace does not show (a wall-clock timer that
//   fires inside it, a full collection): 136k to 205k against 63k in some windows
//   of a run under load, on every scenario, the peers' too. The mean let one such
//   window move a run by 30%; the median of six (the gate: three, five on Redis) leaves it out.
// With these, five runs of each scenario spread by at most 0.7% (1 connection) and
// 1% (10 connections; the two shapes measure within 0.5% of each other).
//
// Options (each also takes --name=value):
//   --runs N          runs per scenario and load shape (default 5); prints min/median/max
//   --connections L   load shapes, a comma list (default 1,10)
//   --warmup N        requests before counting (default 15000)
//   --measured N      requests counted (default 6000)
//   --windows K       windows the measured requests are split into (default 6)
//   --jobs J          runs at once (default 1); the counts do not change with it
//   --node-flags "…"  replaces NODE_FLAGS (to test what moves the count)
//   --trace           prints, per window, V8's compiles, deoptimizations and collections
//   --all-windows     keeps the windows in which V8 compiled or deoptimized
//   --reconnect       measures over new connections (as separate autocannon runs did)
//   --out PATH        also writes PATH.md and PATH.json
// Scenarios ending in :redis run against a private redis-server on a free port
// (one run at a time); the table adds the Redis server's own cost per request from
// the deltas of INFO commandstats over the measured requests: commands per request
// and µs per request (wall time inside Redis: it varies with the machine's load).
import { execFile, spawn } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { once } from 'node:events'
import { parseArgs, promisify } from 'node:util'
import { createConnection } from 'node:net'
import { startOnFreePort, freePort } from '../build/test/redis-server.js'

export const NODE_FLAGS = [
  '--single-threaded', // V8: no concurrent compiles, no background GC tasks
  '--min-semi-space-size=16', '--max-semi-space-size=16' // a fixed young generation (MB per semi-space)
]
export const ALL_MEMORY = ['bare', 'floor', 'floor:flood', 'frl:all:memory', 'rlf:all:memory', 'tollgate:edge:memory', 'tollgate:both:memory', 'rlf:flood:memory', 'tollgate:flood:memory']

const run = promisify(execFile)
const control = (pid, ...args) => run('callgrind_control', [...args, String(pid)])

/** Sum of the `totals:` (or `summary:`) line of a callgrind output file. */
function totalsOf (file) {
  const text = readFileSync(file, 'utf8')
  const match = /^totals: (\d+)/m.exec(text) ?? /^summary: (\d+)/m.exec(text)
  return match === null ? 0 : Number(match[1])
}

/**
 * V8 prints each optimizing compile and each deoptimization (a few lines per event,
 * none in the steady state): a measured window in which one happened is not the
 * steady state, and is left out (see `measure`). --trace adds a line per GC.
 */
const JIT_FLAGS = ['--trace-opt', '--trace-deopt']
const TRACE_FLAGS = ['--trace-gc']

/** What V8 reported in one window: functions compiled, deoptimizations with their reasons, collections. */
function traceEvents (text) {
  const lines = text.split('\n')
  const fn = (l) => /<JSFunction ([^ >]*)/.exec(l)?.[1] ?? '?'
  return {
    compiled: lines.filter((l) => /completed (compiling|optimizing)/.test(l)).map(fn),
    deoptimized: lines.filter((l) => /bailout \(kind/.test(l)).map((l) => `${fn(l)} (${/reason: ([^)]*)\)/.exec(l)?.[1] ?? '?'})`),
    scavenges: lines.filter((l) => /: Scavenge/.test(l)).length,
    markCompacts: lines.filter((l) => /: Mark-Compact/.test(l)).length
  }
}

/**
 * Command calls, script calls and µs (INFO commandstats), less INFO itself. A script's
 * own commands count as commands; its µs are the script call's, which Redis times
 * across the commands it runs (their own µs would count them twice), so with script
 * calls the µs are the script calls' alone.
 */
async function commandStats (client) {
  const info = await client.info('commandstats')
  let calls = 0
  let scripts = 0
  let usec = 0
  let scriptUsec = 0
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    if (m[1] === 'info') continue
    calls += Number(m[2])
    usec += Number(m[3])
    if (m[1] === 'evalsha' || m[1] === 'eval' || m[1] === 'fcall') {
      scripts += Number(m[2])
      scriptUsec += Number(m[3])
    }
  }
  return { calls, scripts, usec: scripts > 0 ? scriptUsec : usec }
}

const REQUEST = Buffer.from('GET / HTTP/1.1\r\nHost: localhost\r\n\r\n')

/**
 * `connections` keep-alive connections to the server, each with one request in
 * flight at a time. The same connections serve the warm-up and the measured
 * requests: a new connection deoptimizes code specialised on the first one's
 * objects (V8: "wrong map" in Readable, Socket, parserOnIncoming), and those
 * recompiles would land in the measured window.
 */
export async function connect (port, connections) {
  const sockets = await Promise.all(Array.from({ length: connections }, () => new Promise((resolve, reject) => {
    const socket = createConnection({ port, host: '127.0.0.1' }, () => { resolve(socket) })
    socket.once('error', reject)
    socket.setNoDelay(true)
  })))
  return {
    /** Sends `amount` requests over the connections; resolves with how many were answered, and with 2xx. */
    send (amount) {
      let sent = 0
      const counts = { ok: 0, total: 0 }
      return new Promise((resolve, reject) => {
        for (const socket of sockets) {
          let buffer = Buffer.alloc(0)
          const next = () => {
            if (sent < amount) { sent++; socket.write(REQUEST) }
          }
          const onData = (chunk) => {
            buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk])
            for (;;) {
              const end = buffer.indexOf('\r\n\r\n')
              if (end === -1) return
              const head = buffer.subarray(0, end).toString('latin1')
              const length = /\r\ncontent-length: *(\d+)/i.exec(head)
              if (length === null) { reject(new Error(`a response without content-length: ${head}`)); return }
              const size = end + 4 + Number(length[1])
              if (buffer.length < size) return
              buffer = buffer.subarray(size)
              counts.total++
              if (head.startsWith('HTTP/1.1 2')) counts.ok++
              if (counts.total === amount) {
                for (const s of sockets) { s.removeAllListeners('data'); s.removeAllListeners('close') }
                resolve(counts)
                return
              }
              next()
            }
          }
          socket.on('data', onData)
          socket.once('close', () => { reject(new Error('the server closed a connection')) })
          next()
        }
      })
    },
    close () { for (const socket of sockets) socket.destroy() }
  }
}

/**
 * One run of `scenario` under callgrind: instructions per request in each window,
 * and for a Redis scenario the Redis server's commands and µs per request.
 */
export async function measure (scenario, { connections, warmup, measured, windows = 1, nodeFlags = NODE_FLAGS, redis, keep = false, trace = false, reconnect = false, allWindows = false }) {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-callgrind-'))
  const port = await freePort()
  const child = spawn('valgrind', [
    '--tool=callgrind', '--instr-atstart=no', '--smc-check=all-non-file', `--callgrind-out-file=${join(dir, 'out')}`,
    process.execPath, ...nodeFlags, ...JIT_FLAGS, ...(trace ? TRACE_FLAGS : []), 'bench/server.js', scenario, String(port), String(redis?.port ?? 0)
  ], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, BENCH_UNDER_VALGRIND: '1' } })
  let output = ''
  let errors = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { errors += chunk })
  const exited = once(child, 'exit')
  try {
    const deadline = Date.now() + 600_000
    while (!output.includes('ready')) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${scenario} did not start under valgrind:\n${errors.slice(-2000)}`)
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
    let client = await connect(port, connections)
    const load = (amount) => client.send(amount)
    if (redis !== undefined) await redis.client.flushall()
    if (warmup > 0) await load(warmup)
    if (reconnect) { client.close(); client = await connect(port, connections) }
    const per = Math.floor(measured / windows)
    const before = redis === undefined ? undefined : await commandStats(redis.client)
    await control(child.pid, '-i', 'on')
    let answered = { ok: 0, total: 0 }
    const marks = [output.length]
    for (let w = 0; w < windows; w++) {
      const result = await load(per)
      answered = { ok: answered.ok + result.ok, total: answered.total + result.total }
      await control(child.pid, '-d')
      marks.push(output.length)
    }
    await control(child.pid, '-i', 'off')
    const after = redis === undefined ? undefined : await commandStats(redis.client)
    client.close()
    child.kill('SIGTERM')
    await exited
    // out.1 … out.K: one dump per window (out itself holds what ran after, uncounted).
    const totals = readdirSync(dir)
      .map((file) => /^out\.(\d+)$/.exec(file))
      .filter((m) => m !== null)
      .sort((a, b) => Number(a[1]) - Number(b[1]))
      .map((m) => totalsOf(join(dir, m[0])))
    const events = marks.slice(1).map((end, w) => traceEvents(output.slice(marks[w], end)))
    const clean = totals.filter((_, w) => allWindows || (events[w].compiled.length === 0 && events[w].deoptimized.length === 0))
    if (clean.length === 0) throw new Error(`${scenario}: V8 compiled or deoptimized in every measured window: ${JSON.stringify(events)}`)
    const out = {
      perRequest: median(clean) / per,
      windows: totals.map((t) => t / per),
      events,
      cleanWindows: clean.length,
      okShare: answered.ok / answered.total
    }
    if (before !== undefined) {
      const served = per * windows
      out.redisCommandsPerRequest = (after.calls - before.calls) / served
      out.redisScriptsPerRequest = (after.scripts - before.scripts) / served
      out.redisUsPerRequest = (after.usec - before.usec) / served
    }
    // keep: the caller reads the dumps (and V8's /tmp/perf-<pid>.map) and removes `dir`.
    if (keep) Object.assign(out, { dir, pid: child.pid })
    return out
  } finally {
    if (child.exitCode === null) { child.kill('SIGKILL'); await exited }
    if (!keep) rmSync(dir, { recursive: true, force: true })
  }
}

/**
 * A private redis-server for the scenarios ending in :redis (undefined when there is
 * none): `measure` takes it as `redis`; stop it with `stopRedis`.
 */
export async function startRedis (scenarios) {
  if (!scenarios.some((s) => s?.endsWith(':redis'))) return undefined
  const server = await startOnFreePort()
  return { server, port: server.port, client: server.client() }
}

export async function stopRedis (redis) {
  if (redis === undefined) return
  redis.client.disconnect()
  await redis.server.stop()
}

const sorted = (values) => [...values].sort((a, b) => a - b)
export const median = (values) => {
  const s = sorted(values)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2
}
export const k = (n) => Number.isFinite(n) ? `${(n / 1000).toFixed(1)}k` : '–'

/** Runs `tasks` (functions returning promises) `jobs` at a time. */
async function pool (tasks, jobs) {
  const results = new Array(tasks.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(jobs, tasks.length) }, async () => {
    while (next < tasks.length) {
      const i = next++
      results[i] = await tasks[i]()
    }
  }))
  return results
}

/** Markdown table of one load shape: min / median / max, spread, and the median over bare. */
export function renderTable (rows) {
  const bare = rows.find((r) => r.scenario === 'bare')
  const redis = rows.some((r) => r.runs[0]?.redisCommandsPerRequest !== undefined)
  let md = `| scenario | min | median | max | spread | median over bare | 2xx | windows left out |${redis ? ' Redis commands / req | script calls / req | Redis µs / req |' : ''}\n`
  md += `|---|---:|---:|---:|---:|---:|---:|---:|${redis ? '---:|---:|---:|' : ''}\n`
  for (const row of rows) {
    const values = row.runs.map((r) => r.perRequest)
    const mid = median(values)
    const spread = (Math.max(...values) - Math.min(...values)) / mid
    const over = bare === undefined || row === bare ? '' : `${mid >= median(bare.runs.map((r) => r.perRequest)) ? '+' : '−'} ${k(Math.abs(mid - median(bare.runs.map((r) => r.perRequest))))}`
    const ok = `${(100 * median(row.runs.map((r) => r.okShare))).toFixed(0)}%`
    const windows = row.runs.reduce((n, r) => n + r.windows.length, 0)
    const leftOut = windows - row.runs.reduce((n, r) => n + r.cleanWindows, 0)
    md += `| ${row.scenario} | ${k(Math.min(...values))} | ${k(mid)} | ${k(Math.max(...values))} | ${(100 * spread).toFixed(2)}% | ${over} | ${ok} | ${leftOut} of ${windows} |`
    if (redis) {
      const commands = row.runs[0]?.redisCommandsPerRequest
      md += commands === undefined ? ' | | |' : ` ${median(row.runs.map((r) => r.redisCommandsPerRequest)).toFixed(3)} | ${median(row.runs.map((r) => r.redisScriptsPerRequest)).toFixed(3)} | ${median(row.runs.map((r) => r.redisUsPerRequest)).toFixed(2)} |`
    }
    md += '\n'
  }
  return md
}

/** The whole note: how it was measured, then one table per load shape. */
export function renderMarkdown (machine, settings, shapes) {
  let md = '# Instructions per request (callgrind)\n\n'
  md += `Written by \`npm run bench:instructions\` (bench/instructions.js) on ${machine.date}: ${machine.cpus} × ${machine.cpu}, Node ${machine.node}.\n`
  md += `Server flags: \`${settings.nodeFlags.join(' ')}\`; ${settings.warmup} warm-up requests, then ${settings.measured} measured in ${settings.windows} windows`
  md += ' (a window in which V8 compiled or deoptimized is left out); a fresh server per run; the same keep-alive connections for warm-up and measurement.\n'
  md += `${settings.runs} runs per scenario and load shape${settings.jobs > 1 ? `, ${settings.jobs} at a time` : ''}. Spread: (max − min) / median.\n`
  for (const { connections, rows } of shapes) {
    md += `\n## ${connections} connection${connections === 1 ? '' : 's'}\n\n`
    md += connections === 1
      ? 'Each request has an event-loop turn of its own: the count repeats, and this is the shape the gate (bench/gate.js) uses.\n\n'
      : 'Requests share event-loop turns, and how many do depends on timing: read the minimum.\n\n'
    md += renderTable(rows)
  }
  return md
}

async function main () {
  const { values: options, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      runs: { type: 'string', default: '5' },
      connections: { type: 'string', default: '1,10' },
      warmup: { type: 'string', default: '15000' },
      measured: { type: 'string', default: '6000' },
      windows: { type: 'string', default: '6' },
      jobs: { type: 'string', default: '1' },
      'node-flags': { type: 'string' },
      trace: { type: 'boolean', default: false },
      reconnect: { type: 'boolean', default: false },
      'all-windows': { type: 'boolean', default: false },
      out: { type: 'string' }
    }
  })
  const scenarios = positionals.length > 0 ? positionals : ALL_MEMORY
  const runs = Number(options.runs)
  const shapes = options.connections.split(',').map(Number)
  const settings = {
    warmup: Number(options.warmup),
    measured: Number(options.measured),
    windows: Number(options.windows),
    trace: options.trace,
    reconnect: options.reconnect,
    allWindows: options['all-windows'],
    nodeFlags: options['node-flags'] === undefined ? NODE_FLAGS : options['node-flags'].split(/\s+/).filter(Boolean)
  }
  const redis = await startRedis(scenarios)
  const started = Date.now()
  const shapesOut = []
  try {
    for (const connections of shapes) {
      const tasks = []
      for (let r = 0; r < runs; r++) {
        for (const scenario of scenarios) {
          tasks.push(async () => {
            // Redis runs share one server and read its counters: one at a time.
            const result = await measure(scenario, { ...settings, connections, redis })
            process.stderr.write(`${connections} conn, ${scenario}, run ${r + 1}: ${k(result.perRequest)}${result.windows.length > 1 ? ` (windows ${result.windows.map(k).join(' ')})` : ''} [${Math.round((Date.now() - started) / 1000)} s]\n`)
            for (const [w, e] of result.events.entries()) {
              const jit = [...e.compiled.map((f) => `compiled ${f}`), ...e.deoptimized.map((f) => `deoptimized ${f}`)]
              if (jit.length === 0 && !settings.trace) continue
              const gc = settings.trace ? `, ${e.scavenges} scavenges, ${e.markCompacts} mark-compacts` : ''
              process.stderr.write(`  window ${w + 1}: ${k(result.windows[w])}${gc}${jit.length > 0 ? `, left out: ${jit.join(', ')}` : ''}\n`)
            }
            return { scenario, result }
          })
        }
      }
      const jobs = redis === undefined ? Number(options.jobs) : 1
      const results = await pool(tasks, jobs)
      const rows = scenarios.map((scenario) => ({ scenario, runs: results.filter((r) => r.scenario === scenario).map((r) => r.result) }))
      shapesOut.push({ connections, rows })
      process.stdout.write(`\n${connections} connection${connections === 1 ? '' : 's'}:\n\n${renderTable(rows)}`)
    }
  } finally {
    await stopRedis(redis)
  }
  if (options.out !== undefined) {
    const machine = { cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', node: process.version, date: new Date().toISOString().slice(0, 10) }
    const json = { machine, settings: { ...settings, runs, jobs: Number(options.jobs) }, shapes: shapesOut }
    writeFileSync(`${options.out}.json`, JSON.stringify(json, null, 2) + '\n')
    writeFileSync(`${options.out}.md`, renderMarkdown(machine, json.settings, shapesOut))
  }
  process.stderr.write(`done in ${Math.round((Date.now() - started) / 1000)} s\n`)
}

if (import.meta.url === `file://${process.argv[1]}`) await main()
