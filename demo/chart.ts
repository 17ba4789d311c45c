/**
 * Terminal charts for the demo (sparklines, stacked columns, a progress bar;
 * ANSI colours only on a TTY) and the SVG of the replica act.
 */

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

/**
 * Stacked columns two characters wide, time left to right: `admitted` (█, green) under `refused` (░, red),
 * `height` rows, scaled to the tallest column; a y-axis in requests per bin.
 */
export function columns (admitted: readonly number[], refused: readonly number[], height: number, p: Paint): string[] {
  const max = Math.max(1, ...admitted.map((a, i) => a + (refused[i] ?? 0)))
  const rows: string[] = []
  for (let row = height; row >= 1; row--) {
    const top = (row / height) * max
    const bottom = ((row - 1) / height) * max
    const cells = admitted.map((a, i) => {
      const total = a + (refused[i] ?? 0)
      const mid = (top + bottom) / 2
      if (a > bottom && a >= mid) return p.green('██')
      if (total > bottom && total >= mid) return p.red('░░')
      return '  '
    })
    const label = row === height ? String(Math.round(max)).padStart(4) : row === 1 ? '   0' : '    '
    rows.push(`${label} ┤${cells.join('')}`)
  }
  rows.push(`     └${'─'.repeat(admitted.length * 2)}`)
  return rows
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

function escapeXml (text: string): string {
  return text.replace(/[<>&"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;' })[c] as string)
}
