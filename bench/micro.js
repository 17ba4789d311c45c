// npm run bench:micro: engine and memory-store decisions per second, and memory per
// idle key at 1M keys next to @fastify/rate-limit's LocalStore filled the same way.
// Run with --expose-gc (the npm script does). Medians of 5 runs.
import { createRequire } from 'node:module'
import { consume, memoryStore } from 'fastify-tollgate'

const require = createRequire(import.meta.url)
const LocalStore = require('@fastify/rate-limit/store/LocalStore.js')

const RUNS = 5
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]

function perSecond (iterations, body) {
  const rates = []
  for (let run = 0; run < RUNS; run++) {
    const started = process.hrtime.bigint()
    body(iterations)
    rates.push(iterations / (Number(process.hrtime.bigint() - started) / 1e9))
  }
  return median(rates)
}

const policy = { capacity: 1e9, refillPerSecond: 1e9 }
const engine = perSecond(5_000_000, (n) => {
  const state = { tokens: 1e9, lastMs: 0 }
  const states = [state]
  const policies = [policy]
  const costs = [1]
  for (let i = 0; i < n; i++) {
    const decision = consume(states, policies, costs, i)
    state.tokens = decision.tokens[0]
    state.lastMs = i
  }
})

const store = memoryStore()
const keys = Array.from({ length: 10_000 }, (_, i) => `{ip:10.0.${i >> 8}.${i & 255}}:edge`)
const memory = perSecond(2_000_000, (n) => {
  for (let i = 0; i < n; i++) store.consume([{ key: keys[i % keys.length], policy, cost: 1 }])
})
store.close()

const frlStore = new LocalStore(false, false, 10_000)
const frl = perSecond(2_000_000, (n) => {
  for (let i = 0; i < n; i++) frlStore.incr(keys[i % keys.length], () => {}, 60_000, 1e9)
})

/** Bytes held per key after filling `count` keys (heap plus array buffers), measured after GC. */
function bytesPerKey (count, fill) {
  globalThis.gc()
  const before = process.memoryUsage()
  const holder = fill(count)
  globalThis.gc()
  const after = process.memoryUsage()
  const heap = (after.heapUsed - before.heapUsed) / count
  const buffers = (after.arrayBuffers - before.arrayBuffers) / count
  return { holder, heap, buffers, total: heap + buffers }
}

const MILLION = 1_000_000
const keyOf = (i) => `{key:api-key-${i}}:edge`
const ours = bytesPerKey(MILLION, (count) => {
  const s = memoryStore({ maxKeys: count })
  const p = { capacity: 100, refillPerSecond: 1 }
  for (let i = 0; i < count; i++) s.consume([{ key: keyOf(i), policy: p, cost: 1 }])
  return s
})
const theirs = bytesPerKey(MILLION, (count) => {
  const s = new LocalStore(false, false, count)
  for (let i = 0; i < count; i++) s.incr(keyOf(i), () => {}, 60_000, 100)
  return s
})
if (ours.holder.size !== MILLION) throw new Error('the memory store did not keep every key')

const rows = [
  ['engine decisions / s (consume, one bucket)', Math.round(engine).toLocaleString('en'), ''],
  ['memoryStore decisions / s (10k keys, one bucket)', Math.round(memory).toLocaleString('en'), `FRL LocalStore incr: ${Math.round(frl).toLocaleString('en')} / s`],
  ['bytes per idle key at 1M keys (heap + array buffers)', `${ours.total.toFixed(0)} (${ours.heap.toFixed(0)} + ${ours.buffers.toFixed(0)})`, `FRL LocalStore: ${theirs.total.toFixed(0)} (${theirs.heap.toFixed(0)} + ${theirs.buffers.toFixed(0)})`]
]
process.stdout.write(`Node ${process.version}, medians of ${RUNS} runs; keys like "${keyOf(1)}"\n\n| measure | fastify-tollgate | peer |\n|---|---:|---|\n`)
for (const [measure, value, peer] of rows) process.stdout.write(`| ${measure} | ${value} | ${peer} |\n`)
