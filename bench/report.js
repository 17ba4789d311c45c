// Renders the bench summary: a markdown table with the targets, and an SVG bar chart.

const fmt = (n, digits = 2) => Number.isFinite(n) ? n.toFixed(digits) : '–'

/** The scenario a row is compared with: bare, or bare pipelined for pipelined rows. */
function baseline (summary, row) {
  return summary.find((s) => s.label === (row.pipelining > 1 ? 'bare pipelined' : 'bare'))
}

export function ratio (summary, row) {
  const base = baseline(summary, row)
  return base === undefined ? NaN : row.reqPerSec / base.reqPerSec
}

/** Each target of issue 4, met or not, from the medians of one run. */
export function targets (summary) {
  const get = (label) => summary.find((s) => s.label === label)
  const r = (label) => { const row = get(label); return row === undefined ? NaN : ratio(summary, row) }
  const rows = []
  const add = (name, goal, measured, met) => rows.push({ name, goal, measured, met })
  const both = get('tollgate both memory')
  if (both) {
    add('both layers, memory', '≥ 0.93 × bare and above FRL memory', `${fmt(r('tollgate both memory'))} × bare; FRL ${fmt(r('frl memory'))}, RLF ${fmt(r('rlf memory'))}`,
      r('tollgate both memory') >= 0.93 && r('tollgate both memory') > r('frl memory'))
    const bare = get('bare')
    add('p99 latency, both layers, memory', '≤ bare p99 + 1 ms', `${both.p99} ms vs bare ${bare?.p99} ms`, both.p99 <= (bare?.p99 ?? 0) + 1)
  }
  if (get('tollgate flood memory')) {
    add('flood from one client, memory', '≥ 0.85 × bare', `${fmt(r('tollgate flood memory'))} × bare; FRL ${fmt(r('frl flood memory'))}, RLF ${fmt(r('rlf flood memory'))}`, r('tollgate flood memory') >= 0.85)
  }
  const bothRedis = get('tollgate both redis')
  const frlRedis = get('frl redis')
  if (bothRedis && frlRedis) {
    const vsFrl = bothRedis.reqPerSec / frlRedis.reqPerSec
    add('both layers, Redis', '≥ 1.3 × FRL Redis (stretch ≥ 0.75 × bare)', `${fmt(vsFrl)} × FRL Redis; ${fmt(r('tollgate both redis'))} × bare (FRL ${fmt(r('frl redis'))}, RLF ${fmt(r('rlf redis'))})`, vsFrl >= 1.3)
  }
  const flood = get('tollgate flood redis')
  if (flood) {
    const refused = Math.max(1e-9, 1 - flood.ok)
    const perRefused = flood.commandsPerRequest / refused
    add('flood, Redis', '≤ 0.01 Redis commands per refused request', `${perRefused.toFixed(5)} commands (${(flood.scriptCallsPerRequest / refused).toFixed(5)} script calls); FRL ${fmt(get('frl flood redis')?.scriptCallsPerRequest ?? NaN, 3)} script calls per request`, perRefused <= 0.01)
  }
  const keys = get('tollgate 100k keys')
  const frlKeys = get('frl 100k keys')
  if (keys && frlKeys) {
    add('100k keys, memory', "RSS ≤ FRL LocalStore's", `RSS ${fmt(keys.rss / 2 ** 20, 1)} MB vs FRL ${fmt(frlKeys.rss / 2 ** 20, 1)} MB; JS heap + buffers ${fmt(keys.jsBytes / 2 ** 20, 1)} MB vs FRL ${fmt(frlKeys.jsBytes / 2 ** 20, 1)} MB`, keys.rss <= frlKeys.rss)
  }
  return rows
}

export function renderMarkdown (machine, settings, summary) {
  const lines = [
    `Machine: ${machine.cpus} × ${machine.cpu}, ${machine.memoryGiB} GiB, Node ${machine.node}; ${machine.date}.`,
    `${settings.rounds} interleaved rounds of ${settings.durationS} s per scenario (after a ${settings.warmupS} s warm-up), ${settings.connections} connections, a fresh server process per run;`,
    settings.pinned
      ? 'the server on core 0, autocannon on core 1 (taskset); Redis shares them. Medians over rounds; × bare is the ratio to bare Fastify of the same run.'
      : 'server, load generator and Redis share the cores. Medians over rounds; × bare is the ratio to bare Fastify of the same run.',
    'Server CPU / req is the server process\'s CPU time per answered request (user + system), steadier than req/s on a shared machine.',
    '',
    '| scenario | req/s | × bare | server CPU µs / req | p99 ms | 2xx | Redis script calls / req | Redis commands / req | RSS MB | JS heap + buffers MB | what |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|'
  ]
  for (const row of summary) {
    const redis = row.scenario.endsWith('redis')
    lines.push(`| ${row.label} | ${Math.round(row.reqPerSec).toLocaleString('en')} | ${fmt(ratio(summary, row))} | ${fmt(row.cpuUsPerRequest, 1)} | ${row.p99} | ${(row.ok * 100).toFixed(1)}% | ${redis ? fmt(row.scriptCallsPerRequest, 4) : ''} | ${redis ? fmt(row.commandsPerRequest, 4) : ''} | ${fmt(row.rss / 2 ** 20, 1)} | ${fmt(row.jsBytes / 2 ** 20, 1)} | ${row.about} |`)
  }
  const checks = targets(summary)
  if (checks.length > 0) {
    lines.push('', '| target | goal | measured | met |', '|---|---|---|---|')
    for (const check of checks) lines.push(`| ${check.name} | ${check.goal} | ${check.measured} | ${check.met ? 'yes' : '**no**'} |`)
  }
  lines.push('', 'Redis commands / req counts every command in `INFO commandstats`, those a script runs inside included.', '')
  return lines.join('\n')
}

const escape = (text) => String(text).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')

/** A horizontal bar per scenario: req/s as a ratio to bare. */
export function renderSvg (machine, summary) {
  const rowHeight = 24
  const left = 250
  const width = 760
  const barSpace = width - left - 70
  const top = 50
  const height = top + summary.length * rowHeight + 30
  const max = Math.max(1, ...summary.map((row) => ratio(summary, row)).filter(Number.isFinite))
  const color = (label) => label.startsWith('tollgate') ? '#2f7d4f' : label.startsWith('bare') ? '#777' : '#b86a2b'
  const bars = summary.map((row, i) => {
    const value = ratio(summary, row)
    const y = top + i * rowHeight
    const w = Number.isFinite(value) ? Math.max(1, (value / max) * barSpace) : 0
    return `<text x="${left - 8}" y="${y + 16}" text-anchor="end">${escape(row.label)}</text>` +
      `<rect x="${left}" y="${y + 4}" width="${w.toFixed(1)}" height="${rowHeight - 8}" fill="${color(row.label)}"/>` +
      `<text x="${(left + w + 6).toFixed(1)}" y="${y + 16}">${fmt(value)}</text>`
  })
  const one = left + barSpace / max
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="${left}" y="20" font-size="14" font-weight="bold">Requests per second, × bare Fastify (median of rounds)</text>
<text x="${left}" y="38" fill="#555">${escape(`${machine.cpus} × ${machine.cpu}, Node ${machine.node}, ${machine.date}; green: fastify-tollgate, orange: peers`)}</text>
<line x1="${one.toFixed(1)}" y1="${top}" x2="${one.toFixed(1)}" y2="${height - 24}" stroke="#999" stroke-dasharray="4 3"/>
${bars.join('\n')}
</svg>
`
}
