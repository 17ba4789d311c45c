/**
 * Terminal charts for the demo (sparklines, stacked columns, a progress bar;
 * ANSI colours only on a TTY) and the SVGs of the replica act and of act 5's decisions.
 */
import { NEAR_LIMIT_LEFT, type DecisionOutcome } from 'fastify-tollgate'
import type { DecisionsAct } from './acts.js'

export interface Paint { green: (s: string) => string, red: (s: string) => string, dim: (s: string) => string, bold: (s: string) => string, yellow: (s: string) => string }

export function paint (colour: boolean): Paint {
  const wrap = (code: number) => (s: string): string => colour ? `\x1b[${code}m${s}\x1b[0m` : s
  return { green: wrap(32), red: wrap(31), dim: wrap(2), bold: wrap(1), yellow: wrap(33) }
}

const SPARKS = ' ▁▂▃▄▅▆▇█'

/** One character per value, scaled to `max` (a value of 0 is a space). */
export function sparkline (values: readonly number[], max: number): string {
  return values.map((v) => SPARKS[max <= 0 || v <= 0 ? 0 : Math.max(1, Math.min(8, Math.round((v / max) * 8)))]).join('')
}

/** One series of `stackedColumns`: its values per bin, and how a cell of it is drawn. */
export interface Stack {
  values: readonly number[]
  /** Two characters, already painted, e.g. `p.green('██')`. */
  cell: string
}

/**
 * Stacked columns two characters wide, time left to right, the first series at the bottom;
 * `height` rows, scaled to the tallest column; a y-axis in the values' unit (per bin).
 * A cell shows the series whose part of the column covers the cell's middle.
 */
export function stackedColumns (stacks: readonly Stack[], height: number): string[] {
  const bins = stacks[0]?.values.length ?? 0
  // tops[i][s]: the top of series s in column i (the sum of series 0 to s).
  const tops = Array.from({ length: bins }, (_, i) => {
    let sum = 0
    return stacks.map((stack) => (sum += stack.values[i] ?? 0))
  })
  const max = Math.max(1, ...tops.map((column) => column.at(-1) ?? 0))
  const rows: string[] = []
  for (let row = height; row >= 1; row--) {
    const top = (row / height) * max
    const bottom = ((row - 1) / height) * max
    const mid = (top + bottom) / 2
    const cells = tops.map((column) => {
      const s = column.findIndex((value) => value > bottom && value >= mid)
      return s === -1 ? '  ' : (stacks[s] as Stack).cell
    })
    const label = row === height ? String(Math.round(max)).padStart(4) : row === 1 ? '   0' : '    '
    rows.push(`${label} ┤${cells.join('')}`)
  }
  rows.push(`     └${'─'.repeat(bins * 2)}`)
  return rows
}

/** `admitted` (█, green) under `refused` (░, red): see `stackedColumns`. */
export function columns (admitted: readonly number[], refused: readonly number[], height: number, p: Paint): string[] {
  return stackedColumns([{ values: admitted, cell: p.green('██') }, { values: refused, cell: p.red('░░') }], height)
}

/** Labels under `stackedColumns` of `bins` bins of `binMs` ms: `0s`, `1s`, … under each whole second. */
export function secondsAxis (bins: number, binMs: number): string {
  return Array.from({ length: bins }, (_, i) => (i * binMs) % 1000 === 0 ? `${(i * binMs) / 1000}s`.padEnd(2 * (1000 / binMs)) : '').join('')
}

/** `[#####-----] label`, `width` cells. */
export function progressBar (fraction: number, width: number): string {
  const filled = Math.round(Math.max(0, Math.min(1, fraction)) * width)
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}]`
}

export interface ReplicaSeries {
  /** e.g. 'memory stores' or 'Redis store'. */
  title: string
  /** Admitted per second, per bin, one array per replica. */
  replicas: number[][]
  /** The quota the service is meant to have, per second. */
  limitPerSecond: number
}

/** The replica act as an SVG: one panel per store, a line per replica, the total, and the limit. */
export function replicaSvg (panels: readonly ReplicaSeries[], binSeconds: number): string {
  const width = 760
  const panelHeight = 220
  const margin = { left: 56, right: 150, top: 34, bottom: 34 }
  const height = panels.length * (panelHeight + margin.top + margin.bottom)
  const totals = panels.map((panel) => (panel.replicas[0] ?? []).map((_, i) => panel.replicas.reduce((sum, r) => sum + (r[i] ?? 0), 0)))
  const max = Math.ceil((Math.max(...totals.flat(), ...panels.map((p) => p.limitPerSecond)) * 1.1) / 50) * 50
  const colours = ['#4e79a7', '#f28e2b', '#59a14f']
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`
  ]
  panels.forEach((panel, index) => {
    const top = index * (panelHeight + margin.top + margin.bottom) + margin.top
    const plotWidth = width - margin.left - margin.right
    const bins = totals[index]?.length ?? 0
    const x = (i: number): number => margin.left + (bins <= 1 ? 0 : (i / (bins - 1)) * plotWidth)
    const y = (v: number): number => top + panelHeight - (v / max) * panelHeight
    const line = (values: readonly number[], colour: string, widthPx: number, dash = ''): string =>
      `<polyline fill="none" stroke="${colour}" stroke-width="${widthPx}"${dash === '' ? '' : ` stroke-dasharray="${dash}"`} points="${values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' ')}"/>`
    const total = totals[index] ?? []
    // After the first bin, which holds the initial burst.
    const mean = (values: readonly number[]): number => values.slice(1).reduce((a, b) => a + b, 0) / Math.max(1, values.length - 1)
    parts.push(`<text x="${margin.left}" y="${top - 12}" font-size="14" font-weight="bold">Three replicas, ${escapeXml(panel.title)}: ${Math.round(mean(total))} admitted/s for a quota of ${panel.limitPerSecond}/s</text>`)
    for (const tick of [0, 0.5, 1]) {
      const value = Math.round(max * tick)
      parts.push(`<line x1="${margin.left}" x2="${margin.left + plotWidth}" y1="${y(value)}" y2="${y(value)}" stroke="#ddd"/>`, `<text x="${margin.left - 6}" y="${y(value) + 4}" text-anchor="end">${value}/s</text>`)
    }
    parts.push(`<text x="${margin.left + plotWidth / 2}" y="${top + panelHeight + 24}" text-anchor="middle">seconds (bins of ${binSeconds} s)</text>`)
    for (let i = 0; i < bins; i += Math.max(1, Math.round(1 / binSeconds))) {
      parts.push(`<text x="${x(i)}" y="${top + panelHeight + 12}" text-anchor="middle" fill="#666">${(i * binSeconds).toFixed(0)}</text>`)
    }
    parts.push(line(new Array<number>(bins).fill(panel.limitPerSecond), '#e15759', 2, '6 4'))
    panel.replicas.forEach((series, r) => parts.push(line(series, colours[r % colours.length] as string, 1.5)))
    parts.push(line(total, '#222', 3))
    const legend: Array<[string, string, string]> = [
      ['total', '#222', ''],
      ...panel.replicas.map((_, r): [string, string, string] => [`replica ${String.fromCharCode(65 + r)}`, colours[r % colours.length] as string, '']),
      ['quota', '#e15759', '6 4']
    ]
    legend.forEach(([label, colour, dash], i) => {
      const ly = top + 10 + i * 18
      const lx = margin.left + plotWidth + 16
      parts.push(`<line x1="${lx}" x2="${lx + 24}" y1="${ly}" y2="${ly}" stroke="${colour}" stroke-width="3"${dash === '' ? '' : ` stroke-dasharray="${dash}"`}/>`, `<text x="${lx + 30}" y="${ly + 4}">${label}</text>`)
    })
  })
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}

/** Colours by outcome (Tableau 10), readable on white, in the order they are stacked (bottom first). */
const OUTCOME_COLOURS: Record<DecisionOutcome, string> = {
  allowed: '#59a14f', 'near-limit': '#f28e2b', refused: '#e15759', 'would-refuse': '#b07aa1', unavailable: '#79706e'
}

/**
 * Act 5 as an SVG: decisions per second by outcome over time, as stacked steps (so
 * the top edge is the requests offered), with the refill rate and the back-off
 * marked. Outcomes with no decision are left out, of the chart and of the legend.
 */
export function decisionsSvg (act: DecisionsAct): string {
  const binSeconds = act.binMs / 1000
  const shown = (Object.keys(OUTCOME_COLOURS) as DecisionOutcome[])
    .map((outcome) => ({ outcome, perSecond: act.outcomes[outcome].map((count) => count / binSeconds), total: act.outcomes[outcome].reduce((a, b) => a + b, 0) }))
    .filter((one) => one.total > 0)
  const title = 'Decisions per second by outcome, counted on DECISION_CHANNEL'
  const subtitle = `One client: ${act.floodPerSecond} requests/s for ${act.floodMs / 1000} s, then ${act.backOffPerSecond}/s. Edge bucket per IP: B = ${act.capacity}, R = ${act.refillPerSecond}/s.`
  const { refillPerSecond } = act
  const backOffAtSeconds = act.floodMs / 1000
  const width = 760
  const height = 350
  const margin = { left: 64, right: 160, top: 64, bottom: 48 }
  const plotWidth = width - margin.left - margin.right
  const plotHeight = height - margin.top - margin.bottom
  const bins = act.sent.length
  const seconds = bins * binSeconds
  // tops[s][i]: the top of series s in bin i (the sum of series 0 to s).
  const tops: number[][] = []
  shown.forEach((one, s) => { tops.push(one.perSecond.map((value, i) => value + (tops[s - 1]?.[i] ?? 0))) })
  const peak = Math.max(refillPerSecond, ...(tops.at(-1) ?? []))
  const step = 10 * Math.ceil(peak / 60)
  const max = Math.ceil((peak * 1.1) / step) * step
  const x = (atSeconds: number): number => margin.left + (atSeconds / seconds) * plotWidth
  const y = (value: number): number => margin.top + plotHeight - (value / max) * plotHeight
  const xy = (atSeconds: number, value: number): string => `${x(atSeconds).toFixed(1)},${y(value).toFixed(1)}`
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12" role="img">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${margin.left}" y="24" font-size="15" font-weight="bold">${escapeXml(title)}</text>`,
    `<text x="${margin.left}" y="42" fill="#444">${escapeXml(subtitle)}</text>`
  ]
  for (let value = 0; value <= max; value += step) {
    parts.push(`<line x1="${margin.left}" x2="${margin.left + plotWidth}" y1="${y(value)}" y2="${y(value)}" stroke="#e5e5e5"/>`,
      `<text x="${margin.left - 6}" y="${y(value) + 4}" text-anchor="end" fill="#666">${value}</text>`)
  }
  // Each series as steps: its top edge left to right, then the one below it right to left.
  shown.forEach((one, s) => {
    const upper = tops[s] as number[]
    const lower = tops[s - 1] ?? upper.map(() => 0)
    const points = [
      ...upper.flatMap((value, i) => [xy(i * binSeconds, value), xy((i + 1) * binSeconds, value)]),
      ...lower.map((value, i) => [xy((i + 1) * binSeconds, value), xy(i * binSeconds, value)]).reverse().flat()
    ]
    parts.push(`<polygon fill="${OUTCOME_COLOURS[one.outcome]}" fill-opacity="0.85" points="${points.join(' ')}"/>`)
  })
  parts.push(
    `<line x1="${margin.left}" x2="${margin.left + plotWidth}" y1="${y(refillPerSecond)}" y2="${y(refillPerSecond)}" stroke="#222" stroke-width="1.5" stroke-dasharray="6 4"/>`,
    `<text x="${margin.left + plotWidth - 4}" y="${y(refillPerSecond) - 5}" text-anchor="end">refill R = ${refillPerSecond}/s</text>`,
    `<line x1="${x(backOffAtSeconds)}" x2="${x(backOffAtSeconds)}" y1="${margin.top}" y2="${margin.top + plotHeight}" stroke="#222" stroke-dasharray="3 3"/>`,
    `<text x="${x(backOffAtSeconds) + 5}" y="${margin.top + 12}">back-off</text>`,
    `<line x1="${margin.left}" x2="${margin.left}" y1="${margin.top}" y2="${margin.top + plotHeight}" stroke="#222"/>`,
    `<line x1="${margin.left}" x2="${margin.left + plotWidth}" y1="${margin.top + plotHeight}" y2="${margin.top + plotHeight}" stroke="#222"/>`
  )
  for (let second = 0; second <= seconds; second++) {
    parts.push(`<text x="${x(second)}" y="${margin.top + plotHeight + 16}" text-anchor="middle" fill="#666">${second}</text>`)
  }
  parts.push(
    `<text x="${margin.left + plotWidth / 2}" y="${height - 8}" text-anchor="middle">seconds (bins of ${binSeconds} s)</text>`,
    `<text transform="translate(16 ${margin.top + plotHeight / 2}) rotate(-90)" text-anchor="middle">decisions per second</text>`
  )
  const legend = [...shown].reverse() // top to bottom, as the series are stacked
  legend.forEach((one, i) => {
    const lx = margin.left + plotWidth + 20
    const ly = margin.top + 8 + i * 22
    parts.push(`<rect x="${lx}" y="${ly - 10}" width="14" height="14" fill="${OUTCOME_COLOURS[one.outcome]}"/>`,
      `<text x="${lx + 22}" y="${ly + 2}">${escapeXml(one.outcome)} (${one.total})</text>`)
  })
  const noteY = margin.top + 8 + legend.length * 22 + 8
  parts.push(`<text x="${margin.left + plotWidth + 20}" y="${noteY}" fill="#666" font-size="11">near-limit: passed, with</text>`,
    `<text x="${margin.left + plotWidth + 20}" y="${noteY + 14}" fill="#666" font-size="11">${NEAR_LIMIT_LEFT * 100}% of B or less left</text>`)
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}

export function escapeXml (text: string): string {
  return text.replace(/[<>&"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;' })[c] as string)
}
