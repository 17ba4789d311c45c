// npm run bench:sizing [-- options]: what one Redis node carries, measured on this
// machine, and the sizing model of docs/sizing.md computed from it. On a private
// redis-server (a free port, started and stopped here):
// 1. Floods: the store's consume script (one bucket per decision, in calls of 1 and
//    of 10 decisions, as the store sends them at 1 and at 10+ connections), its
//    settle script (10 and 100 buckets a call) and @fastify/rate-limit's script,
//    from several pipelined connections (bench/flood.js), for --seconds each. Redis's CPU time over
//    the flood (INFO cpu: the whole process, protocol and system calls included)
//    per decision is the model's input; INFO commandstats gives the time inside
//    EVALSHA alone. Redis runs one core: 1e6 / (CPU µs per decision) is a node's
//    ceiling in decisions a second.
// 2. redis-benchmark (shipped with redis-server) on the same server: SET and GET,
//    and the consume call of one decision, from C clients, as a cross-check.
// 3. Memory: keys written as the store writes them (SET key "<tokens> <last ms>"
//    PX ttl, the default prefix `tollgate:`), on a plain server and on a
//    cluster-enabled one holding every slot: used_memory before and after.
// 4. 'settle': settlement entries per request, two replicas on the edge alone, for
//    clients at a trickle and for busy ones (bench/settle-entries.js).
// 5. The model's inputs, and the model (its assumptions are the constants below).
//
// Options (each also takes --name=value):
//   --seconds S       seconds per flood (default 3)
//   --connections C   client connections of the flood (default 4)
//   --in-flight F     calls in flight per connection (default 64)
//   --keys N          keys per memory measurement (default 200000)
//   --space N         identities the floods cycle through (default 100000)
//   --no-benchmark    skip redis-benchmark
import { execFile } from 'node:child_process'
import { createHash, randomUUID } from 'node:crypto'
import { cpus, loadavg } from 'node:os'
import { parseArgs, promisify } from 'node:util'
import { Redis } from 'ioredis'
import { freePort, RedisServer, sleep, startOnFreePort } from '../build/test/redis-server.js'
import { encode, flood } from './flood.js'
import { SETTLE_SHAPES, settlementEntries } from './settle-entries.js'
import { FRL, ROOMY, consumeArgs, settleArgs, sources } from './redis-scripts.js'

const { values: options } = parseArgs({
  options: {
    seconds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '4' },
    'in-flight': { type: 'string', default: '64' },
    keys: { type: 'string', default: '200000' },
    space: { type: 'string', default: '100000' },
    'no-benchmark': { type: 'boolean', default: false }
  }
})
const SECONDS = Number(options.seconds)
const SPACE = Number(options.space)
const KEYS = Number(options.keys)

// The model's assumptions (docs/sizing.md, "Sizing Redis and the replicas").
const RATES = [10_000, 100_000, 1_000_000]
const USERS = 1_000_000 // one app bucket each (a tier of one limit, no route quota)
const CLIENTS = 1_000_000 // edge keys: one address or API key per user (no NAT sharing)
const REPLICAS = 50
const TARGET = 0.5 // of a node's core

/** The floods: which script, how many decisions (or settled buckets) a call carries, its arguments for call i. */
const FLOODS = {
  'consume, 1 decision a call': { script: 'consume', perCall: 1, args: (i) => consumeArgs('c1:', i, 1, 1, ROOMY, SPACE) },
  'consume, 10 decisions a call': { script: 'consume', perCall: 10, args: (i) => consumeArgs('c10:', i, 10, 1, ROOMY, SPACE) },
  'settle, 10 buckets a call': { script: 'settle', perCall: 10, args: (i) => settleArgs('s10:', i, 10, SPACE) },
  'settle, 100 buckets a call': { script: 'settle', perCall: 100, args: (i) => settleArgs('s100:', i, 100, SPACE) },
  'FRL, 1 request a call': { script: 'frl', perCall: 1, args: (i) => [1, `frl:${i % SPACE}`, 3_600_000, 1e9, 'false', 'false'] }
}

async function info (client, section) {
  const text = await client.info(section)
  return (name) => Number(new RegExp(`^${name}:(.*)$`, 'm').exec(text)[1])
}

/** Redis's CPU seconds so far (user + system, the whole process). */
async function cpuSeconds (client) {
  const read = await info(client, 'cpu')
  return read('used_cpu_user') + read('used_cpu_sys')
}

/** The shape's calls of `sha`, encoded once: enough to go through the identities once (at most 100 000). */
function commandsOf (sha, shape) {
  const count = Math.min(100_000, Math.ceil(SPACE / shape.perCall))
  return Array.from({ length: count }, (_, i) => encode(['EVALSHA', sha, ...shape.args(i)]))
}

/** One flood, after a warm-up that writes its keys: rates, Redis's CPU share and time per decision. */
async function measureFlood (admin, port, sha, shape) {
  const commands = commandsOf(sha, shape)
  const load = { port, connections: Number(options.connections), inFlight: Number(options['in-flight']), commands }
  const warm = await flood({ ...load, seconds: 0.5, from: 0 })
  await admin.config('RESETSTAT')
  const cpu0 = await cpuSeconds(admin)
  const node0 = process.cpuUsage()
  const t0 = performance.now()
  const calls = await flood({ ...load, seconds: SECONDS, from: warm })
  const wall = (performance.now() - t0) / 1000
  const cpu = await cpuSeconds(admin) - cpu0
  const node = process.cpuUsage(node0)
  const stats = (await admin.info('commandstats')).match(/^cmdstat_evalsha:calls=(\d+),usec=(\d+)/m)
  const decisions = calls * shape.perCall
  return {
    callsPerSecond: calls / wall,
    decisionsPerSecond: decisions / wall,
    redisCpu: cpu / wall,
    clientCpu: (node.user + node.system) / 1e6 / wall,
    cpuUsPerDecision: cpu * 1e6 / decisions,
    evalshaUsPerDecision: Number(stats[2]) / decisions
  }
}

/** redis-benchmark's requests a second, and Redis's CPU share meanwhile. */
async function redisBenchmark (admin, port, args) {
  const cpu0 = await cpuSeconds(admin)
  const t0 = performance.now()
  const { stdout } = await promisify(execFile)('redis-benchmark', ['-h', '127.0.0.1', '-p', String(port), '-q', '-c', '50', '-P', '16', ...args], { maxBuffer: 1 << 24 })
  const wall = (performance.now() - t0) / 1000
  const rate = [...stdout.matchAll(/([\d.]+) requests per second/g)].at(-1)[1]
  return { rate: Number(rate), redisCpu: (await cpuSeconds(admin) - cpu0) / wall }
}

/** A bucket's stored value as the scripts write it: tokens (up to 17 significant digits), then the time in ms with µs. */
function storedValue (i) {
  const tokens = ((i * 7919) % 60 + 1 / 3).toPrecision(17).replace(/\.?0+$/, '')
  return `${tokens} ${Date.now()}.${String(i % 1000).padStart(3, '0')}`
}

/** The kinds of key measured, as the store names them (lib/output/key-format.ts, prefix `tollgate:`). */
const KEY_KINDS = {
  'app, user id of 7 digits': (i) => `tollgate:{user:${1_000_000 + i}}:app`,
  'app, user id a UUID': () => `tollgate:{user:${randomUUID()}}:app`,
  'edge, IPv4 address': (i) => `tollgate:{ip:203.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}}:edge`,
  'edge, API key (digest)': (i) => `tollgate:{key:${createHash('sha256').update(String(i)).digest('base64url')}}:edge`
}

/** Bytes of used_memory per key for `KEYS` keys of `keyOf`, each with a TTL of up to an hour. */
async function bytesPerKey (client, keyOf) {
  await client.flushall()
  const before = (await info(client, 'memory'))('used_memory')
  for (let from = 0; from < KEYS; from += 1000) {
    const batch = client.pipeline()
    for (let i = from; i < Math.min(from + 1000, KEYS); i++) batch.set(keyOf(i), storedValue(i), 'PX', 1000 + (i * 7919) % 3_600_000)
    await batch.exec()
  }
  const bytes = ((await info(client, 'memory'))('used_memory') - before) / KEYS
  await client.flushall()
  return bytes
}

/** A cluster-enabled server holding all 16 384 slots, as a Cluster's primary holds its share of them. */
async function clusterNode () {
  const server = await startOnFreePort((port) => ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`])
  const client = new Redis({ port: server.port, host: '127.0.0.1' })
  await client.cluster('ADDSLOTSRANGE', 0, 16383)
  while (!(await client.cluster('INFO')).includes('cluster_state:ok')) await sleep(100)
  return { server, client }
}

const fix = (x, d = 1) => x.toFixed(d)
const group = (x) => Math.round(x).toLocaleString('en-US')
const print = (line = '') => console.log(line)

async function floods (admin, port, version) {
  const [work] = sources()
  const shas = { consume: await admin.script('LOAD', work.consume), settle: await admin.script('LOAD', work.settle), frl: await admin.script('LOAD', FRL) }
  const results = {}
  print(`## Floods: ${options.connections} connections × ${options['in-flight']} calls in flight, ${SECONDS} s each, ${group(SPACE)} identities`)
  print()
  print('| flood | calls/s | decisions/s | Redis CPU (of a core) | client CPU (of a core) | Redis CPU µs / decision | EVALSHA µs / decision | node ceiling, decisions/s |')
  print('|---|---:|---:|---:|---:|---:|---:|---:|')
  for (const [name, shape] of Object.entries(FLOODS)) {
    const r = await measureFlood(admin, port, shas[shape.script], shape)
    results[name] = r
    print(`| ${name} | ${group(r.callsPerSecond)} | ${group(r.decisionsPerSecond)} | ${fix(r.redisCpu * 100, 0)}% | ${fix(r.clientCpu * 100, 0)}% | ${fix(r.cpuUsPerDecision, 2)} | ${fix(r.evalshaUsPerDecision, 2)} | ${group(1e6 / r.cpuUsPerDecision)} |`)
  }
  print()
  print(`Node ceiling: 1e6 / (Redis CPU µs per decision), one core of redis-server ${version}.`)
  print()
  return { results, shas }
}

async function benchmarks (admin, port, shas) {
  const consume = consumeArgs('rb:', 0, 1, 1, ROOMY).map(String)
  consume[1] = 'rb:{user:__rand_int__}:0'
  const runs = {
    'SET (3-byte values)': ['-t', 'set', '-n', '1000000', '-r', String(SPACE)],
    'GET': ['-t', 'get', '-n', '1000000', '-r', String(SPACE)],
    'EVALSHA consume, 1 decision': ['-n', '200000', '-r', String(SPACE), 'evalsha', shas.consume, ...consume],
    'EVALSHA FRL': ['-n', '300000', '-r', String(SPACE), 'evalsha', shas.frl, '1', 'frl:__rand_int__', '3600000', '1000000000', 'false', 'false']
  }
  print('## redis-benchmark: 50 connections, pipelines of 16')
  print()
  print('| command | requests/s | Redis CPU | Redis CPU µs / request |')
  print('|---|---:|---:|---:|')
  for (const [name, args] of Object.entries(runs)) {
    const r = await redisBenchmark(admin, port, args)
    print(`| ${name} | ${group(r.rate)} | ${fix(r.redisCpu * 100, 0)}% | ${fix(r.redisCpu * 1e6 / r.rate, 2)} |`)
  }
  print()
}

/** What the consume script stores for a bucket of 100 tokens refilling 100 an hour, after two decisions. */
async function sampleValue (admin, sha) {
  const args = consumeArgs('sample:', 0, 1, 1, [100, 100 / 3600])
  await admin.evalsha(sha, ...args)
  await sleep(7)
  await admin.evalsha(sha, ...args)
  return `\`${args[1]} = "${await admin.get(args[1])}"\`, PTTL ${await admin.pttl(args[1])} ms`
}

async function memory (admin, shas) {
  const cluster = await clusterNode()
  const sizes = {}
  try {
    print(`## Memory: ${group(KEYS)} keys of each kind, used_memory after − before, per key`)
    print()
    print(`As the consume script stores a bucket: ${await sampleValue(admin, shas.consume)}.`)
    print()
    print('| key | example | bytes / key, single Redis | bytes / key, Cluster node |')
    print('|---|---|---:|---:|')
    for (const [name, keyOf] of Object.entries(KEY_KINDS)) {
      sizes[name] = { single: await bytesPerKey(admin, keyOf), cluster: await bytesPerKey(cluster.client, keyOf) }
      print(`| ${name} | \`${keyOf(1)} = "${storedValue(1)}"\` | ${fix(sizes[name].single, 0)} | ${fix(sizes[name].cluster, 0)} |`)
    }
    print()
  } finally {
    cluster.client.disconnect()
    await cluster.server.stop()
  }
  return sizes
}

/** Settlement entries per request under 'settle', for a trickle of clients and for busy ones (bench/settle-entries.js). */
async function settling (admin, port) {
  const entries = await settlementEntries(admin, port)
  print('## \'settle\': settlement entries per request (GET calls of the settle script / requests), two replicas, the edge alone')
  print()
  print('| clients | entries / request |')
  print('|---|---:|')
  for (const [name, { text }] of Object.entries(SETTLE_SHAPES)) print(`| ${name}: ${text} | ${fix(entries[name], 3)} |`)
  print()
  return entries
}

/** The model's table: Redis primaries at TARGET of a core, keys and memory per primary, for each rate and edge mode. */
function model (results, sizes, entries) {
  const consume = { unbatched: results['consume, 1 decision a call'].cpuUsPerDecision, batched: results['consume, 10 decisions a call'].cpuUsPerDecision }
  const settle = results['settle, 10 buckets a call'].cpuUsPerDecision
  const frl = results['FRL, 1 request a call'].cpuUsPerDecision
  const appBytes = sizes['app, user id of 7 digits'].cluster
  const edgeBytes = sizes['edge, IPv4 address'].cluster
  print('## The model\'s inputs (Redis CPU µs, this run)')
  print()
  print('| input | value |')
  print('|---|---:|')
  print(`| a decision, 1 a call (c1) | ${fix(consume.unbatched, 2)} µs |`)
  print(`| a decision, 10 a call (c10) | ${fix(consume.batched, 2)} µs |`)
  print(`| a settled bucket, 10 a call (s) | ${fix(settle, 2)} µs |`)
  print(`| FRL's call (one layer) | ${fix(frl, 2)} µs |`)
  print(`| an app key (7-digit user id), Cluster node | ${fix(appBytes, 0)} bytes |`)
  print(`| an edge key (IPv4), Cluster node | ${fix(edgeBytes, 0)} bytes |`)
  print(`| 'settle': entries per request, clients at a trickle (e) | ${fix(entries.trickle, 3)} |`)
  print(`| 'settle': entries per request, busy clients (e) | ${fix(entries.busy, 3)} |`)
  print()
  const modes = {
    exact: (c) => 2 * c,
    'settle, clients at a trickle': (c) => c + entries.trickle * settle,
    'settle, busy clients': (c) => c + entries.busy * settle,
    'replica-share': (c) => c
  }
  print(`## The model: ${group(USERS)} users, ${group(CLIENTS)} edge clients, ${REPLICAS} replicas, primaries at ${TARGET * 100}% of a core`)
  print()
  print('Per cell: primaries with every decision in a call of its own – with 10 decisions a call; memory per primary at the smaller count.')
  print()
  print(`| edge mode | Redis µs / request | keys | ${RATES.map((rate) => `${group(rate)} requests/s`).join(' | ')} |`)
  print(`|---|---:|---:|${RATES.map(() => '---:|').join('')}`)
  for (const [mode, perRequest] of Object.entries(modes)) {
    const us = { unbatched: perRequest(consume.unbatched), batched: perRequest(consume.batched) }
    const keys = USERS + (mode === 'replica-share' ? 0 : CLIENTS)
    const bytes = USERS * appBytes + (mode === 'replica-share' ? 0 : CLIENTS * edgeBytes)
    const cells = RATES.map((rate) => {
      const [most, least] = [us.unbatched, us.batched].map((u) => Math.ceil(rate * u / (TARGET * 1e6)))
      return `${most} – ${least}, ${fix(bytes / least / 1e6, 0)} MB`
    })
    print(`| ${mode} | ${fix(us.unbatched)} – ${fix(us.batched)} | ${group(keys)} | ${cells.join(' | ')} |`)
  }
  print()
}

const loadBefore = loadavg().map((x) => x.toFixed(2)).join(' ')
const server = await new RedisServer(await freePort()).start()
const admin = new Redis({ port: server.port, host: '127.0.0.1' })
try {
  const version = /^redis_version:(.*)$/m.exec(await admin.info('server'))[1].trim()
  print(`# bench:sizing, ${new Date().toISOString().slice(0, 16)} UTC`)
  print()
  print(`${cpus().length} × ${cpus()[0].model}, redis-server ${version}, Node.js ${process.version}; load average ${loadBefore} at the start`)
  print()
  const { results, shas } = await floods(admin, server.port, version)
  if (!options['no-benchmark']) await benchmarks(admin, server.port, shas)
  const sizes = await memory(admin, shas)
  const entries = await settling(admin, server.port)
  model(results, sizes, entries)
  print(`Load average at the end: ${loadavg().map((x) => x.toFixed(2)).join(' ')}`)
} finally {
  admin.disconnect()
  await server.stop()
}
