// npm run bench:redis-scripts [-- options]: the Redis store's scripts' own cost inside
// Redis, next to @fastify/rate-limit's script, on one private redis-server (a free
// port, started and stopped here). Each shape calls a script with the arguments the
// store sends (lib/stores/redis/consume-script.ts, settle-script.ts) many times;
// after each, INFO commandstats gives the µs per EVALSHA (the script and the
// commands it runs: Redis times the outer call across them) and the commands it ran.
// The shapes and the sources run in rounds, interleaved, so that the machine's load
// falls on all alike; a figure is the median of the rounds, with min–max.
//
// Options (each also takes --name=value):
//   --rounds R      rounds (default 5)
//   --calls N       calls per shape, source and round (default 20000)
//   --ref REF       also measures the scripts of git revision REF (e.g. main), side by side
//   --dir L=PATH    also measures the scripts in folder PATH, labelled L (repeatable)
//   --shapes a,b    only these shapes (default: all)
//   --callgrind     runs redis-server under valgrind's callgrind and adds the instructions
//                   per request inside the server (the whole EVALSHA: protocol, script, its
//                   commands): unlike µs, a count the machine's load does not move
import { execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, URL } from 'node:url'
import { parseArgs } from 'node:util'
import { Redis } from 'ioredis'
import { RedisServer, freePort } from '../build/test/redis-server.js'

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const SCRIPTS = 'lib/stores/redis/scripts'
/** Calls in flight at once: enough to keep the server busy, so the run is short. */
const IN_FLIGHT = 32
const KEYS = 1000

/**
 * The sources of the scripts: the working tree, and each git revision of `refs`
 * and folder of `dirs` (`label=path`); each with its consume and settle scripts.
 */
export function sources (refs = [], dirs = []) {
  const list = [{ label: 'work', read: (name) => readFileSync(join(ROOT, SCRIPTS, `${name}.lua`), 'utf8') }]
  for (const ref of refs) {
    list.push({ label: ref, read: (name) => execFileSync('git', ['show', `${ref}:${SCRIPTS}/${name}.lua`], { cwd: ROOT, encoding: 'utf8' }) })
  }
  for (const entry of dirs) {
    const [label, path] = entry.split('=')
    // A folder without settle.lua runs its consume.lua for the settle shapes too (bench/redis-floor).
    const file = (name) => join(path, `${name}.lua`)
    list.push({ label, read: (name) => readFileSync(name === 'settle' && !existsSync(file(name)) ? file('consume') : file(name), 'utf8') })
  }
  return list.map(({ label, read }) => {
    const consume = read('helpers') + read('consume')
    // `packed`: the consume script takes its numbers as one JSON array (lib/stores/redis/consume-script.ts).
    return { label, consume, settle: read('helpers') + read('settle'), packed: consume.includes('cjson.decode(') }
  })
}

// @fastify/rate-limit's script, as its RedisStore defines it (read from its source, not copied).
const frlSource = readFileSync(join(ROOT, 'node_modules/@fastify/rate-limit/store/RedisStore.js'), 'utf8')
export const FRL = /const lua = `([\s\S]*?)`/.exec(frlSource)[1]

// The store's argument head: now '' (Redis TIME), never-full TTL, fixed-TTL flag '0'.
const HEAD = ['', 86_400_000, '0']
/** A bucket that stays present and never refuses (its TTL outlasts a run): its key is read and written on every call. */
export const ROOMY = [1e9, 0.001]
/** A bucket of one token that refills 10 an hour: every call after a key's first refuses. */
const FLOOD = [1, 10 / 3600]

/**
 * The consume script's arguments for `decisions` decisions of `buckets` buckets each, one policy per bucket
 * position; call `i` takes the next keys of a space of `space` identities. In the script's layout: its numbers
 * as one JSON array (`packed`, the store's), or, for the scripts of a revision before that, one argument each.
 */
export function consumeArgs (prefix, i, decisions, buckets, policy, space = KEYS, packed = true) {
  const keys = []
  const per = []
  for (let d = 0; d < decisions; d++) {
    per.push(buckets)
    for (let b = 0; b < buckets; b++) {
      keys.push(`${prefix}{user:${(i * decisions + d) % space}}:${b}`)
      per.push(b + 1, 1)
    }
  }
  const policies = Array.from({ length: buckets }, () => policy).flat()
  if (packed) return [keys.length, ...keys, JSON.stringify([null, HEAD[1], 0, decisions, 0, buckets, ...policies, ...per])]
  return [keys.length, ...keys, ...HEAD, decisions, 0, buckets, ...policies, ...per]
}

/** The settle script's arguments for `buckets` edge buckets, each spent 5 and asked 5 more; keys as `consumeArgs`'s. */
export function settleArgs (prefix, i, buckets, space = KEYS) {
  const keys = Array.from({ length: buckets }, (_, b) => `${prefix}{ip:${(i * buckets + b) % space}}:edge`)
  const per = keys.flatMap(() => [...ROOMY, 5, 5])
  return [keys.length, ...keys, ...HEAD, buckets, 0, '0', ...per]
}

/** Each shape: which script, its arguments for call i, and how many requests a call stands for. */
const SHAPES = {
  'consume 1 bucket': { script: 'consume', perCall: 1, args: (p, i, packed) => consumeArgs(p, i, 1, 1, ROOMY, KEYS, packed) },
  'consume 2 buckets': { script: 'consume', perCall: 1, args: (p, i, packed) => consumeArgs(p, i, 1, 2, ROOMY, KEYS, packed) },
  'consume 10×1 batch': { script: 'consume', perCall: 10, args: (p, i, packed) => consumeArgs(p, i, 10, 1, ROOMY, KEYS, packed) },
  'consume refused': { script: 'consume', perCall: 1, args: (p, i, packed) => consumeArgs(p, i, 1, 1, FLOOD, KEYS, packed) },
  'settle 1 bucket': { script: 'settle', perCall: 1, args: (p, i) => settleArgs(p, i, 1) },
  'settle 10 buckets': { script: 'settle', perCall: 10, args: (p, i) => settleArgs(p, i, 10) },
  'frl': { script: 'frl', perCall: 1, args: (p, i) => [1, `${p}frl-${i % KEYS}`, 3_600_000, 1e9, 'false', 'false'] }
}

/**
 * A private redis-server under callgrind, instrumentation off until `start`; `stop`
 * dumps the instructions since `start`. The client retries until the server answers.
 */
async function callgrindServer () {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-callgrind-'))
  const port = await freePort()
  const child = spawn('valgrind', ['--tool=callgrind', `--callgrind-out-file=${join(dir, 'cg.out')}`, '--instr-atstart=no',
    'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' })
  const control = (...args) => execFileSync('callgrind_control', [...args, String(child.pid)], { stdio: 'ignore' })
  const dumps = () => readdirSync(dir).filter((f) => f.startsWith('cg.out.'))
  return {
    port,
    start () { control('-z'); control('-i', 'on') },
    stop () {
      control('-i', 'off')
      const before = new Set(dumps())
      control('-d')
      const file = dumps().find((f) => !before.has(f))
      return Number(/^totals: (\d+)/m.exec(readFileSync(join(dir, file), 'utf8'))[1])
    },
    async close () {
      const exited = new Promise((resolve) => child.once('exit', resolve))
      child.kill('SIGKILL')
      await exited
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

async function commandStats (client) {
  const stats = {}
  for (const m of (await client.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    if (m[1] !== 'info' && !m[1].startsWith('config')) stats[m[1]] = { calls: Number(m[2]), usec: Number(m[3]) }
  }
  return stats
}

/** Calls `sha` `calls` times with the shape's arguments; returns the µs per request and the commands per request. */
async function measure (client, instruments, { sha, shape, packed }, prefix, calls) {
  const warm = KEYS * 2 // every key written twice: the measured calls find them present
  const run = async (from, to) => {
    let next = from
    await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
      while (next < to) await client.evalsha(sha, ...shape.args(prefix, next++, packed))
    }))
  }
  await run(0, warm) // and the flood's buckets spent
  await client.config('RESETSTAT')
  instruments?.start()
  await run(warm, warm + calls)
  const instructions = instruments?.stop()
  const stats = await commandStats(client)
  const requests = calls * shape.perCall
  const inner = Object.entries(stats).filter(([name]) => name !== 'evalsha')
  return {
    usec: stats.evalsha.usec / requests,
    instructions: instructions === undefined ? NaN : instructions / requests,
    commands: Object.values(stats).reduce((sum, s) => sum + s.calls, 0) / requests,
    inner: Object.fromEntries(inner.map(([name, s]) => [name, s.usec / s.calls]))
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const fix = (x, d = 2) => x.toFixed(d)

async function main () {
  const { values: options } = parseArgs({
    options: {
      rounds: { type: 'string', default: '5' },
      calls: { type: 'string', default: '20000' },
      ref: { type: 'string', multiple: true, default: [] },
      dir: { type: 'string', multiple: true, default: [] },
      shapes: { type: 'string' },
      callgrind: { type: 'boolean', default: false }
    }
  })
  const ROUNDS = Number(options.rounds)
  const CALLS = Number(options.calls)
  const instruments = options.callgrind ? await callgrindServer() : undefined
  const server = instruments ?? await new RedisServer(await freePort()).start()
  const client = new Redis({ port: server.port, host: '127.0.0.1', retryStrategy: () => 200 })
  client.on('error', () => {})
  await new Promise((resolve) => client.once('ready', resolve))
  try {
    const version = /^redis_version:(.*)$/m.exec(await client.info('server'))[1].trim()
    const all = sources(options.ref, options.dir)
    const shapes = Object.entries(SHAPES).filter(([name]) => options.shapes === undefined || options.shapes.split(',').includes(name))
    const runs = [] // { shape, label, sha }
    const frlSha = await client.script('LOAD', FRL)
    for (const [name, shape] of shapes) {
      if (shape.script === 'frl') runs.push({ name, shape, label: 'frl', sha: frlSha })
      else for (const source of all) runs.push({ name, shape, label: source.label, packed: source.packed, sha: await client.script('LOAD', source[shape.script]) })
    }
    const results = new Map(runs.map((r) => [r, []]))
    for (let round = 0; round < ROUNDS; round++) {
      for (const [index, r] of runs.entries()) {
        // Each run on an empty keyspace (this server is ours): a run that took the key count past a power of two
        // paid for Redis's rehash of its dictionary (about 3k instructions a call at 8 192 keys).
        await client.flushall()
        results.get(r).push(await measure(client, instruments, r, `r${index}:`, CALLS))
      }
      process.stderr.write(`round ${round + 1}/${ROUNDS}\n`)
    }
    console.log(`redis-server ${version}; ${ROUNDS} rounds of ${CALLS} calls per shape; µs inside Redis per request (EVALSHA, its commands included)\n`)
    const counted = instruments === undefined ? '' : ' instructions / request, median (min–max) |'
    console.log(`| shape | scripts | µs / request (median) | min–max | commands / request | inner commands (µs per call, median) |${counted}`)
    console.log(`|---|---|---:|---:|---:|---|${instruments === undefined ? '' : '---:|'}`)
    for (const r of runs) {
      const list = results.get(r)
      const usecs = list.map((m) => m.usec)
      const names = Object.keys(list[0].inner)
      const inner = names.map((n) => `${n} ${fix(median(list.map((m) => m.inner[n] ?? NaN)))}`).join(', ')
      const counts = list.map((m) => m.instructions / 1000)
      const count = instruments === undefined ? '' : ` ${fix(median(counts), 1)}k (${fix(Math.min(...counts), 1)}–${fix(Math.max(...counts), 1)}) |`
      console.log(`| ${r.name} | ${r.label} | ${fix(median(usecs))} | ${fix(Math.min(...usecs))}–${fix(Math.max(...usecs))} | ${fix(list[0].commands, 1)} | ${inner} |${count}`)
    }
  } finally {
    client.disconnect()
    await (instruments === undefined ? server.stop() : instruments.close())
  }
}

// Run as a script (npm run bench:redis-scripts); imported (bench/sizing.js), only its helpers.
if (process.argv[1] === fileURLToPath(import.meta.url)) await main()
