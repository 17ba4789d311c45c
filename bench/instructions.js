// npm run bench:instructions [scenario ...]: instructions per request, counted by
// valgrind's callgrind, for a few scenarios. Unlike req/s on a shared machine, an
// instruction count repeats (same scenario, two runs: within 0.3%), so it can tell
// a change of a few percent; it cannot see waiting, and JIT choices move it by a few
// percent between configurations. Needs valgrind; Redis scenarios are not supported.
//
// Each scenario: the server starts under callgrind with instrumentation off,
// takes WARMUP requests, then instrumentation goes on for MEASURED requests.
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { once } from 'node:events'
import autocannon from 'autocannon'
import { freePort } from '../build/test/redis-server.js'

const WARMUP = 3000
const MEASURED = 3000
const scenarios = process.argv.slice(2).length > 0
  ? process.argv.slice(2)
  : ['bare', 'floor', 'frl:all:memory', 'rlf:all:memory', 'tollgate:edge:memory', 'tollgate:both:memory', 'rlf:flood:memory', 'tollgate:flood:memory']

const control = (pid, ...args) => execFileSync('callgrind_control', [...args, String(pid)], { stdio: 'ignore' })

async function measure (scenario) {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-callgrind-'))
  const port = await freePort()
  const child = spawn('valgrind', [
    '--tool=callgrind', '--instr-atstart=no', '--smc-check=all-non-file', `--callgrind-out-file=${join(dir, 'out')}`,
    process.execPath, 'bench/server.js', scenario, String(port), '0'
  ], { stdio: ['ignore', 'pipe', 'ignore'] })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  const deadline = Date.now() + 180_000
  while (!output.includes('ready')) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${scenario} did not start under valgrind`)
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  const url = `http://127.0.0.1:${port}/`
  await autocannon({ url, connections: 10, amount: WARMUP })
  control(child.pid, '-i', 'on')
  await autocannon({ url, connections: 10, amount: MEASURED })
  control(child.pid, '-i', 'off')
  control(child.pid, '-d')
  const exited = once(child, 'exit')
  child.kill('SIGTERM')
  await exited
  let instructions = 0
  for (const file of readdirSync(dir)) {
    const totals = /^totals: (\d+)/m.exec(readFileSync(join(dir, file), 'utf8'))
    if (totals !== null) instructions = Math.max(instructions, Number(totals[1]))
  }
  rmSync(dir, { recursive: true, force: true })
  return instructions / MEASURED
}

const results = []
for (const scenario of scenarios) {
  process.stderr.write(`${scenario} under callgrind ... `)
  const perRequest = await measure(scenario)
  results.push({ scenario, perRequest })
  process.stderr.write(`${Math.round(perRequest).toLocaleString('en')} instructions / request\n`)
}
const bare = results.find((r) => r.scenario === 'bare')
process.stdout.write('\n| scenario | instructions / request | × bare |\n|---|---:|---:|\n')
for (const { scenario, perRequest } of results) {
  process.stdout.write(`| ${scenario} | ${Math.round(perRequest).toLocaleString('en')} | ${bare === undefined ? '' : (perRequest / bare.perRequest).toFixed(3)} |\n`)
}
