// node bench/profile.js <scenario> [base scenario] [options]: where the instructions
// of a scenario go, per request, by function (callgrind, as bench/instructions.js
// counts them, plus V8's --perf-basic-prof map to name JIT-compiled JavaScript and
// --interpreted-frames-native-stack to give each interpreted function its own
// entry). With a base scenario, the functions are ranked by how many more
// instructions per request they take in <scenario> than in <base>.
//
// Options: --connections (default 1), --warmup (15000), --measured (4000) in --windows (4),
// of which those where V8 compiled or deoptimized are left out,
// --top N (40), --match REGEX (only functions whose name matches, e.g. dist/),
// --callees REGEX (what the matching functions call, with the cost of each call),
// --callers REGEX (what calls the matching functions, with the cost of each call),
// --keep (leave the callgrind files and print where they are).
// "self" counts the instructions in a function; "incl" adds what it calls
// (callgrind's call costs; a recursive function counts its recursion twice).
import { readFileSync, rmSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { measure, NODE_FLAGS, k, startRedis, stopRedis } from './instructions.js'

/** JIT code ranges from V8's perf map: sorted [start, end, name]. */
function perfMap (pid) {
  let text
  try { text = readFileSync(`/tmp/perf-${pid}.map`, 'utf8') } catch { return [] }
  const ranges = []
  for (const line of text.split('\n')) {
    const m = /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(line)
    if (m !== null) ranges.push([parseInt(m[1], 16), parseInt(m[1], 16) + parseInt(m[2], 16), m[3]])
  }
  return ranges.sort((a, b) => a[0] - b[0])
}

function resolver (ranges) {
  return (name) => {
    // callgrind names code without a symbol by its address, with 'N for a recursion depth.
    const m = /^0x([0-9a-f]+)('\d+)?$/.exec(name)
    if (m === null) return name
    const address = parseInt(m[1], 16)
    let lo = 0
    let hi = ranges.length - 1
    let found
    while (lo <= hi) {
      const mid = (lo + hi) >> 1
      if (ranges[mid][0] <= address) { found = ranges[mid]; lo = mid + 1 } else hi = mid - 1
    }
    // A map can list a range twice (code moved or replaced): the last one wins, which is right for code alive at the end.
    return (found !== undefined && address < found[1] ? found[2] : `(code at ${name})`) + (m[2] ?? '')
  }
}

/** A call that leaves the function for other JavaScript: a JS function, or a builtin that calls one. */
const callsOut = (name) => name.startsWith('JS:') ||
  /^Builtins_(Call(?!ApiCallback)|Construct|JSEntry|InterpreterEntryTrampoline|BaselineOutOfLinePrologue|FunctionPrototype(Call|Apply)|ReflectApply|ReflectConstruct|CompileLazy)/.test(name)

/**
 * Per function name in one callgrind output file: self (its own instructions),
 * incl (with everything it calls), and own: incl less its calls to other
 * JavaScript, i.e. its code and the builtins, runtime and regular expressions it
 * uses. `own` keeps a hook's cost apart from the rest of the request, which a
 * synchronous `done()` runs inside the hook.
 */
function costsByFunction (file, resolve) {
  const names = new Map()
  const self = new Map()
  const incl = new Map()
  const out = new Map()
  const edges = new Map()
  let fn = ''
  let callee = ''
  let callLine = false
  const named = (id, rest) => {
    if (rest !== undefined && rest !== '') names.set(id, rest)
    return names.get(id) ?? rest ?? id
  }
  const add = (map, key, value) => map.set(key, (map.get(key) ?? 0) + value)
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (line.startsWith('fn=')) {
      const m = /^fn=(\(\d+\))?\s*(.*)$/.exec(line)
      fn = resolve(m[1] === undefined ? m[2] : named(m[1], m[2]))
    } else if (line.startsWith('cfn=')) {
      const m = /^cfn=(\(\d+\))?\s*(.*)$/.exec(line)
      callee = resolve(m[1] === undefined ? m[2] : named(m[1], m[2]))
    } else if (line.startsWith('calls=')) {
      callLine = true
    } else if (/^[+\-*0-9]/.test(line)) {
      const parts = line.trim().split(/\s+/)
      const cost = Number(parts[1] ?? 0)
      if (callLine) {
        add(incl, fn, cost)
        add(edges, `${fn}\t${callee}`, cost)
        if (callsOut(callee)) add(out, fn, cost)
        callLine = false
      } else {
        add(self, fn, cost)
        add(incl, fn, cost)
      }
    }
  }
  const own = new Map([...incl].map(([name, value]) => [name, value - (out.get(name) ?? 0)]))
  return { self, incl, own, edges }
}

/** Costs per function over the clean windows of one run (those without a compile or a deoptimization). */
async function profile (scenario, settings) {
  const result = await measure(scenario, { ...settings, keep: true, nodeFlags: [...NODE_FLAGS, '--perf-basic-prof', '--interpreted-frames-native-stack', '--no-logfile-per-isolate', '--logfile=/dev/null'] })
  const resolve = resolver(perfMap(result.pid))
  const totals = { self: new Map(), incl: new Map(), own: new Map(), edges: new Map() }
  const clean = result.events.map((e, w) => e.compiled.length + e.deoptimized.length === 0 ? w + 1 : 0).filter((w) => w > 0)
  for (const w of clean) {
    const costs = costsByFunction(`${result.dir}/out.${w}`, resolve)
    for (const kind of ['self', 'incl', 'own', 'edges']) {
      for (const [name, value] of costs[kind]) totals[kind].set(name, (totals[kind].get(name) ?? 0) + value)
    }
  }
  if (settings.keep) process.stderr.write(`${scenario}: ${result.dir}/out.{${clean.join(',')}} and /tmp/perf-${result.pid}.map\n`)
  else { rmSync(result.dir, { recursive: true, force: true }); rmSync(`/tmp/perf-${result.pid}.map`, { force: true }) }
  return { perRequest: result.perRequest, requests: clean.length * Math.floor(settings.measured / settings.windows), costs: totals }
}

const { values: options, positionals: [scenario, base] } = parseArgs({
  allowPositionals: true,
  options: {
    connections: { type: 'string', default: '1' },
    warmup: { type: 'string', default: '15000' },
    measured: { type: 'string', default: '4000' },
    windows: { type: 'string', default: '4' },
    top: { type: 'string', default: '40' },
    match: { type: 'string' },
    callees: { type: 'string' },
    callers: { type: 'string' },
    keep: { type: 'boolean', default: false }
  }
})
const settings = { connections: Number(options.connections), warmup: Number(options.warmup), measured: Number(options.measured), windows: Number(options.windows), keep: options.keep }
// Scenarios ending in :redis run against a private redis-server, as in bench/instructions.js.
const redis = await startRedis([scenario, base])
let a, b
try {
  a = await profile(scenario, { ...settings, redis })
  b = base === undefined ? undefined : await profile(base, { ...settings, redis })
} finally {
  await stopRedis(redis)
}
const names = new Set([...a.costs.self.keys(), ...(b?.costs.self.keys() ?? [])])
const per = (run, kind, name) => (run.costs[kind].get(name) ?? 0) / run.requests
const rows = [...names].map((name) => {
  const row = { name, self: per(a, 'self', name), own: per(a, 'own', name) }
  if (b !== undefined) {
    row.selfDiff = row.self - per(b, 'self', name)
    row.ownDiff = row.own - per(b, 'own', name)
  }
  return row
})
const top = Number(options.top)
if (options.match !== undefined) {
  // Only the functions whose names match, e.g. --match dist/ for this plugin's own code.
  const re = new RegExp(options.match)
  rows.splice(0, rows.length, ...rows.filter((r) => re.test(r.name)))
}
const fmt = (n) => (n >= 0 ? '+' : '−') + Math.abs(n).toFixed(0)
const table = (title, header, sortKey, cells) => {
  process.stdout.write(`\n${title}\n\n${header}\n`)
  // "own" is a JavaScript function's measure: a native frame's own cost would count the whole request below it.
  const listed = sortKey.startsWith('own') ? rows.filter((r) => r.name.startsWith('JS:')) : rows
  for (const r of [...listed].sort((x, y) => Math.abs(y[sortKey]) - Math.abs(x[sortKey])).slice(0, top)) process.stdout.write(`| ${cells(r).join(' | ')} |\n`)
}
process.stdout.write(`${scenario}: ${k(a.perRequest)} instructions / request${b === undefined ? '' : `; ${base}: ${k(b.perRequest)} (difference ${fmt(a.perRequest - b.perRequest)})`}\n`)
process.stdout.write('(self: in the function; own: with the builtins, runtime and regular expressions it calls, not other JavaScript)\n')
if (b === undefined) {
  table('By own cost:', '| own / req | self / req | function |\n|---:|---:|---|', 'own', (r) => [r.own.toFixed(0), r.self.toFixed(0), r.name])
  table('By self cost:', '| self / req | own / req | function |\n|---:|---:|---|', 'self', (r) => [r.self.toFixed(0), r.own.toFixed(0), r.name])
} else {
  table('By own difference:', `| own Δ / req | self Δ / req | own / req in ${scenario} | function |\n|---:|---:|---:|---|`, 'ownDiff', (r) => [fmt(r.ownDiff), fmt(r.selfDiff), r.own.toFixed(0), r.name])
  table('By self difference:', `| self Δ / req | own Δ / req | self / req in ${scenario} | function |\n|---:|---:|---:|---|`, 'selfDiff', (r) => [fmt(r.selfDiff), fmt(r.ownDiff), r.self.toFixed(0), r.name])
}

/**
 * The calls of the functions matching `pattern`, per such function: `side` 0 lists
 * what each calls (--callees), 1 what calls each (--callers); instructions per request,
 * callee included.
 */
function calls (pattern, side) {
  const re = new RegExp(pattern)
  for (const [name, data] of b === undefined ? [[scenario, a]] : [[scenario, a], [base, b]]) {
    const byMatch = new Map()
    for (const [edge, cost] of data.costs.edges) {
      const ends = edge.split('\t')
      if (!re.test(ends[side])) continue
      if (!byMatch.has(ends[side])) byMatch.set(ends[side], [])
      byMatch.get(ends[side]).push([ends[1 - side], cost / data.requests])
    }
    for (const [fn, list] of byMatch) {
      const [verb, other] = side === 0 ? ['calls', 'callee'] : ['is called by', 'caller']
      process.stdout.write(`\n${name}: ${fn} (self ${per(data, 'self', fn).toFixed(0)}, own ${per(data, 'own', fn).toFixed(0)} / req) ${verb}:\n\n| incl / req | ${other} |\n|---:|---|\n`)
      for (const [end, cost] of list.sort((x, y) => y[1] - x[1]).slice(0, top)) process.stdout.write(`| ${cost.toFixed(0)} | ${end} |\n`)
    }
  }
}
// Where a function's own cost goes: its calls, by callee.
if (options.callees !== undefined) calls(options.callees, 0)
// Who makes a builtin's cost (WeakMap lookups, string adds…): its callers.
if (options.callers !== undefined) calls(options.callers, 1)
