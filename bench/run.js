// npm run bench: every scenario as a fresh server process on loopback, loaded by
// autocannon, in interleaved rounds (A B C … A B C …); medians and ratios to bare
// Fastify from the same run. Writes bench/results/results.{md,json,svg}.
//
// BENCH_ROUNDS (default 3), BENCH_DURATION seconds per run (default 3, after a
// 1 s warm-up), BENCH_ONLY (substrings of the scenario names to run, comma-separated;
// bare always runs), BENCH_PIN=0 to let the server and the load share both cores (by default,
// where taskset exists, the server runs on core 0 and autocannon on core 1).
import { execFileSync, spawn } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, totalmem } from 'node:os'
import { once } from 'node:events'
import autocannon from 'autocannon'
import { RedisServer, freePort, commandCalls } from '../build/test/redis-server.js'
import { renderMarkdown, renderSvg } from './report.js'

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const DURATION = Number(process.env.BENCH_DURATION ?? 3)
const CONNECTIONS = 100
const KEYS = 100_000
const WARMUP = 1

function hasTaskset () {
  try { execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' }); return true } catch { return false }
}
const PIN = process.env.BENCH_PIN !== '0' && cpus().length >= 2 && hasTaskset()
if (PIN) execFileSync('taskset', ['-p', '-c', '1', String(process.pid)], { stdio: 'ignore' })

/** [label, server scenario, pipelining, what it is] */
const SCENARIOS = [
  ['bare', 'bare', 1, 'bare Fastify: the ceiling'],
  ['frl memory', 'frl:all:memory', 1, '@fastify/rate-limit, LocalStore'],
  ['rlf memory', 'rlf:all:memory', 1, 'rate-limiter-flexible RateLimiterMemory in onRequest'],
  ['tollgate edge memory', 'tollgate:edge:memory', 1, 'edge layer, memoryStore'],
  ['tollgate both memory', 'tollgate:both:memory', 1, 'edge + app layers, memoryStore'],
  ['floor for two layers (memory)', 'floor', 1, 'no limiter: the two hooks and four header members alone'],
  ['floor for Redis', 'floor:redis', 1, 'no limiter: one EVALSHA of a trivial script per request and the two headers'],
  ['frl redis', 'frl:all:redis', 1, '@fastify/rate-limit, RedisStore'],
  ['rlf redis', 'rlf:all:redis', 1, 'rate-limiter-flexible RateLimiterRedis'],
  ['tollgate edge redis', 'tollgate:edge:redis', 1, 'edge layer, redisStore'],
  ['tollgate both redis', 'tollgate:both:redis', 1, 'edge + app layers, redisStore'],
  ['tollgate both redis, edge settle', 'tollgate:both-settle:redis', 1, "edge + app layers, redisStore, edge.mode 'settle'"],
  ['tollgate both redis, edge share', 'tollgate:both-share:redis', 1, "edge + app layers, redisStore, edge.mode 'replica-share'"],
  ['frl flood memory', 'frl:flood:memory', 1, 'one client over its quota: mostly 429'],
  ['rlf flood memory', 'rlf:flood:memory', 1, 'one client over its quota: mostly 429'],
  ['tollgate flood memory', 'tollgate:flood:memory', 1, 'one client over its quota: mostly 429'],
  ['frl flood redis', 'frl:flood:redis', 1, 'one client over its quota: mostly 429'],
  ['rlf flood redis', 'rlf:flood:redis', 1, 'one client over its quota: mostly 429'],
  ['tollgate flood redis', 'tollgate:flood:redis', 1, 'one client over its quota: mostly 429'],
  ['tollgate flood redis, edge settle', 'tollgate:flood-settle:redis', 1, "one client over its quota: mostly 429, edge.mode 'settle'"],
  ['frl 100k keys', 'frl:keys:memory', 1, `${KEYS / 1000}k distinct API keys, LocalStore cache ${KEYS}`],
  ['tollgate 100k keys', 'tollgate:keys:memory', 1, `${KEYS / 1000}k distinct API keys, edge keyed by API key`],
  ['bare pipelined', 'bare', 10, 'pipelining 10'],
  ['frl memory pipelined', 'frl:all:memory', 10, 'pipelining 10'],
  ['rlf memory pipelined', 'rlf:all:memory', 10, 'pipelining 10'],
  ['tollgate both memory pipelined', 'tollgate:both:memory', 10, 'pipelining 10']
].map(([label, scenario, pipelining, about]) => ({ label, scenario, pipelining, about }))

const only = process.env.BENCH_ONLY?.split(',')
const chosen = SCENARIOS.filter((s) => only === undefined || s.label.startsWith('bare') || only.some((part) => s.label.includes(part)))

async function startServer (scenario, port, redisPort) {
  const command = [process.execPath, '--expose-gc', 'bench/server.js', scenario, String(port), String(redisPort)]
  const child = PIN
    ? spawn('taskset', ['-c', '0', ...command], { stdio: ['pipe', 'pipe', 'inherit'] })
    : spawn(command[0], command.slice(1), { stdio: ['pipe', 'pipe', 'inherit'] })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  const deadline = Date.now() + 15_000
  while (!output.includes('ready')) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${scenario} did not start: ${output}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return {
    mark () { child.stdin.write('mark\n') },
    async stop () {
      const exited = once(child, 'exit')
      child.kill('SIGTERM')
      await exited
      const line = output.split('\n').find((l) => l.startsWith('{'))
      return line === undefined ? {} : JSON.parse(line)
    }
  }
}

let counter = 0
/** Loads the server for `duration` seconds, or for `amount` requests. */
function load (port, { pipelining, label }, duration, amount) {
  const keyed = label.includes('keys')
  return autocannon({
    url: `http://127.0.0.1:${port}/`,
    connections: CONNECTIONS,
    pipelining,
    ...(amount === undefined ? { duration } : { amount }),
    requests: keyed ? [{ setupRequest: (request) => ({ ...request, headers: { ...request.headers, 'x-api-key': `key-${counter++ % KEYS}` } }) }] : undefined
  })
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

const redisServer = await new RedisServer(await freePort()).start()
const inspector = redisServer.client()
const runs = []
const total = ROUNDS * chosen.length
const started = Date.now()
try {
  for (let round = 1; round <= ROUNDS; round++) {
    for (const s of chosen) {
      const done = runs.length
      const eta = done === 0 ? '' : ` (about ${Math.ceil(((Date.now() - started) / done) * (total - done) / 1000)} s left)`
      process.stderr.write(`[${done + 1}/${total}] round ${round}: ${s.label}${eta} ... `)
      await inspector.flushall()
      const port = await freePort()
      const server = await startServer(s.scenario, port, redisServer.port)
      // A keyed scenario warms up with every key once, so each limiter holds all KEYS
      // keys when its RSS is read, however fast it ran.
      counter = 0
      if (s.label.includes('keys')) await load(port, s, undefined, KEYS)
      else await load(port, s, WARMUP)
      server.mark()
      const before = await commandCalls(inspector)
      const result = await load(port, s, DURATION)
      const after = await commandCalls(inspector)
      const memory = await server.stop()
      const delta = (c) => (after[c] ?? 0) - (before[c] ?? 0)
      const requests = result.requests.total
      const commands = Object.keys(after).reduce((sum, c) => sum + delta(c), 0) - 1 // less the INFO
      runs.push({
        label: s.label,
        round,
        reqPerSec: result.requests.average,
        p99: result.latency.p99,
        ok: result['2xx'] / Math.max(1, requests),
        scriptCallsPerRequest: (delta('evalsha') + delta('eval')) / Math.max(1, requests),
        commandsPerRequest: commands / Math.max(1, requests),
        rss: memory.rss,
        // What the process holds in JS after a full GC: heap plus ArrayBuffers (the memory store's typed arrays).
        jsBytes: memory.heapUsed + memory.arrayBuffers,
        cpuUsPerRequest: memory.cpuUs / Math.max(1, requests),
        errors: result.errors + result.timeouts
      })
      process.stderr.write(`${Math.round(result.requests.average).toLocaleString('en')} req/s, p99 ${result.latency.p99} ms\n`)
    }
  }
} finally {
  inspector.disconnect()
  await redisServer.stop()
}

const summary = chosen.map((s) => {
  const mine = runs.filter((r) => r.label === s.label)
  const pick = (field) => median(mine.map((r) => r[field]))
  return { ...s, reqPerSec: pick('reqPerSec'), p99: pick('p99'), cpuUsPerRequest: pick('cpuUsPerRequest'), ok: pick('ok'), scriptCallsPerRequest: pick('scriptCallsPerRequest'), commandsPerRequest: pick('commandsPerRequest'), rss: pick('rss'), jsBytes: pick('jsBytes'), errors: mine.reduce((sum, r) => sum + r.errors, 0) }
})
const machine = { cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version, date: new Date().toISOString().slice(0, 10) }
const settings = { rounds: ROUNDS, durationS: DURATION, warmupS: WARMUP, connections: CONNECTIONS, pinned: PIN }
mkdirSync('bench/results', { recursive: true })
writeFileSync('bench/results/results.json', JSON.stringify({ machine, settings, summary, runs }, null, 2) + '\n')
writeFileSync('bench/results/results.md', renderMarkdown(machine, settings, summary))
writeFileSync('bench/results/results.svg', renderSvg(machine, summary))
process.stdout.write(renderMarkdown(machine, settings, summary))
process.stderr.write(`\nWrote bench/results/results.md, results.json and results.svg in ${Math.round((Date.now() - started) / 1000)} s\n`)
