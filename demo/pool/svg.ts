/**
 * The pool scenario as an SVG: a panel per phase, with on the left the
 * requests admitted per second by class (solid), the pool timeouts and other
 * failures per second (red) and the shed requests per second (orange, dashed),
 * and on the right the p99 latency of each class's 2xx answers per window, on a
 * log scale.
 */
import { escapeXml } from '../chart.js'
import type { PhaseResult } from './acts.js'
import { capacityPerSecond } from './config.js'
import { addCounts } from './load.js'
import { phaseFigures, windowSeries } from './report.js'

/** A colour per class, the same in every panel. */
const CLASS_COLOURS: Record<string, string> = {
  'fair users': '#4e79a7', 'vip users': '#b07aa1', 'abuser (1 address)': '#9c755f', 'anonymous crowd': '#76b7b2', 'anonymous trickle': '#59a14f'
}
const ERROR_COLOUR = '#e15759'
const SHED_COLOUR = '#f28e2b'
const WIDTH = 880
const PANEL = { height: 190, top: 36, bottom: 44 }
const LEFT = { x: 60, width: 420 }
const RIGHT = { x: 560, width: 150 }
const LATENCY = { min: 10, max: 5000 }

type Polyline = (values: readonly number[], colour: string, width: number, dash?: string) => string

/** A polyline over the windows' middles; NaN values break it into pieces. */
function polyline (x: (i: number) => number, y: (v: number) => number): Polyline {
  return (values, colour, width, dash = '') => {
    const pieces: string[][] = [[]]
    values.forEach((v, i) => {
      if (Number.isNaN(v)) pieces.push([])
      else pieces.at(-1)?.push(`${x(i).toFixed(1)},${y(v).toFixed(1)}`)
    })
    return pieces.filter((points) => points.length > 0).map((points) =>
      `<polyline fill="none" stroke="${colour}" stroke-width="${width}"${dash === '' ? '' : ` stroke-dasharray="${dash}"`} points="${points.join(' ')}"/>`).join('\n')
  }
}

/** The rate axis's tick step: the smallest of 1, 2, 2.5, 5 × 10ⁿ that reaches `top` in at most 6 steps. */
function tickStep (top: number): number {
  const power = 10 ** Math.floor(Math.log10(top / 6))
  return [1, 2, 2.5, 5].map((m) => m * power).find((step) => step * 6 >= top) ?? 10 * power
}

/** `peak` is the highest value drawn: the axis ends at the first tick 5% above it, and never cuts a line. */
function rateAxis (top: number, peak: number, seconds: number, bins: number, capacity: number): { parts: string[], line: Polyline } {
  const step = tickStep(peak * 1.05)
  const max = Math.ceil(peak * 1.05 / step) * step
  const x = (i: number): number => LEFT.x + ((i + 0.5) / bins) * LEFT.width
  const y = (v: number): number => top + PANEL.height - (v / max) * PANEL.height
  const parts: string[] = []
  for (let value = 0; value <= max; value += step) {
    parts.push(`<line x1="${LEFT.x}" x2="${LEFT.x + LEFT.width}" y1="${y(value)}" y2="${y(value)}" stroke="#e5e5e5"/>`,
      `<text x="${LEFT.x - 6}" y="${y(value) + 4}" text-anchor="end" fill="#666">${value}/s</text>`)
  }
  for (let second = 0; second <= seconds; second += seconds > 12 ? 2 : 1) {
    parts.push(`<text x="${LEFT.x + (second / seconds) * LEFT.width}" y="${top + PANEL.height + 14}" text-anchor="middle" fill="#666">${second}</text>`)
  }
  parts.push(`<text x="${LEFT.x + LEFT.width / 2}" y="${top + PANEL.height + 30}" text-anchor="middle">seconds: answers per second, by the time the request was sent</text>`,
    `<line x1="${LEFT.x}" x2="${LEFT.x + LEFT.width}" y1="${y(capacity)}" y2="${y(capacity)}" stroke="#222" stroke-dasharray="2 3"/>`,
    `<text x="${LEFT.x + LEFT.width - 4}" y="${y(capacity) - 4}" text-anchor="end" fill="#222">pool capacity ≈ ${Math.round(capacity)}/s</text>`)
  return { parts, line: polyline(x, y) }
}

function latencyAxis (top: number, bins: number): { parts: string[], line: Polyline } {
  const span = Math.log10(LATENCY.max / LATENCY.min)
  const x = (i: number): number => RIGHT.x + ((i + 0.5) / bins) * RIGHT.width
  const y = (v: number): number => top + PANEL.height - (Math.log10(Math.min(LATENCY.max, Math.max(LATENCY.min, v)) / LATENCY.min) / span) * PANEL.height
  const parts: string[] = []
  for (const value of [10, 100, 1000]) {
    parts.push(`<line x1="${RIGHT.x}" x2="${RIGHT.x + RIGHT.width}" y1="${y(value)}" y2="${y(value)}" stroke="#e5e5e5"/>`,
      `<text x="${RIGHT.x - 6}" y="${y(value) + 4}" text-anchor="end" fill="#666">${value} ms</text>`)
  }
  parts.push(`<text x="${RIGHT.x + RIGHT.width / 2}" y="${top + PANEL.height + 30}" text-anchor="middle">p99 of the 2xx, per 0.5 s</text>`,
    `<rect x="${RIGHT.x}" y="${top}" width="${RIGHT.width}" height="${PANEL.height}" fill="none" stroke="#ccc"/>`)
  return { parts, line: polyline(x, y) }
}

/** A legend entry: a line in its colour, a label, and a second line of figures. */
function legendEntry (label: string, figures: string, colour: string, dash: string, x: number, y: number): string[] {
  return [
    `<line x1="${x}" x2="${x + 18}" y1="${y}" y2="${y}" stroke="${colour}" stroke-width="3"${dash === '' ? '' : ` stroke-dasharray="${dash}"`}/>`,
    `<text x="${x + 24}" y="${y + 4}" font-size="11">${escapeXml(label)}</text>`,
    `<text x="${x + 24}" y="${y + 16}" font-size="10" fill="#666">${escapeXml(figures)}</text>`
  ]
}

const classColour = (name: string): string => CLASS_COLOURS[name] ?? '#222'

function panel (result: PhaseResult, index: number): string[] {
  const top = index * (PANEL.height + PANEL.top + PANEL.bottom) + PANEL.top
  const { windowMs, durationMs, classes } = result.run
  const bins = classes[0]?.windows.length ?? 0
  const series = classes.map((one) => windowSeries(one, windowMs))
  const all = windowSeries({ spec: classes[0]!.spec, total: addCounts([]), windows: Array.from({ length: bins }, (_, i) => addCounts(classes.map((one) => one.windows[i]!))) }, windowMs)
  const capacity = capacityPerSecond(result.phase.config.holdMs)
  // The axis fits every line drawn on it: how far failures and sheds go past the capacity is what acts 1a to 3 show.
  const peak = Math.max(capacity, ...series.flatMap((s) => s.admitted), ...all.errors, ...all.shed)
  const rate = rateAxis(top, peak, durationMs / 1000, bins, capacity)
  const latency = latencyAxis(top, bins)
  const figures = phaseFigures(result)
  const errors = figures.reduce((sum, f) => sum + f.poolTimeouts + f.noAnswer + f.otherErrors, 0)
  const shed = figures.reduce((sum, f) => sum + f.shed, 0)
  const parts = [
    `<text x="${LEFT.x}" y="${top - 12}" font-size="14" font-weight="bold">${escapeXml(result.phase.label)}</text>`,
    ...rate.parts, ...latency.parts,
    rate.line(all.errors, ERROR_COLOUR, 2), rate.line(all.shed, SHED_COLOUR, 2, '5 3')
  ]
  series.forEach((s, c) => {
    const colour = classColour(classes[c]!.spec.name)
    parts.push(rate.line(s.admitted, colour, 2), latency.line(s.p99, colour, 1.5))
  })
  const lx = RIGHT.x + RIGHT.width + 14
  figures.forEach((f, i) => {
    parts.push(...legendEntry(f.name, `${Math.round(f.admittedPerSecond)}/s ok, p99 ${Number.isNaN(f.p99) ? '-' : Math.round(f.p99)} ms`, classColour(f.name), '', lx, top + 4 + i * 30))
  })
  parts.push(...legendEntry('failed', `${errors} (5xx, no answer)`, ERROR_COLOUR, '', lx, top + 4 + figures.length * 30),
    ...legendEntry('shed (503)', String(shed), SHED_COLOUR, '5 3', lx, top + 4 + (figures.length + 1) * 30))
  return parts
}

/** The SVG of `results`, one panel each, top to bottom. */
export function poolSvg (results: readonly PhaseResult[]): string {
  const height = results.length * (PANEL.height + PANEL.top + PANEL.bottom)
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif" font-size="12" role="img">`,
    `<title>${escapeXml('A PostgreSQL pool of 10 connections behind fastify-tollgate: admitted requests, failures and p99 by class')}</title>`,
    `<rect width="${WIDTH}" height="${height}" fill="white"/>`,
    ...results.flatMap((result, i) => panel(result, i)),
    '</svg>'
  ].join('\n') + '\n'
}
