/**
 * lib/'s coverage for `npm test` (test/tap.ts), from tap's json-summary report. tap's 100% rule
 * reads only the files in that report, and a module that no test imports is not in it: its lines
 * are counted nowhere. So a module of lib/ with code (its JavaScript in build/lib/ more than the
 * `export {};` tsc writes for a file of types only) that the report does not name counts as
 * below 100%, like a line no test runs.
 */
import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs'
import { join, relative } from 'node:path'

/** tap's json-summary report, under the project's folder. */
export const COVERAGE_SUMMARY = '.tap/report/coverage-summary.json'

export interface Coverage { full: boolean, text: string }

const KINDS = ['statements', 'branches', 'functions', 'lines'] as const

/** Whether compiled JavaScript does anything: more than `export {};` and comments. */
export function hasCode (js: string): boolean {
  return js.replace(/\/\*[^]*?\*\//g, '').replace(/\/\/.*$/gm, '').trim() !== 'export {};'
}

/** The modules of lib/ under `root` (as `lib/….ts`) whose JavaScript in build/lib/ has code; one not built counts as having some. */
export function modulesWithCode (root: string): string[] {
  const sources = readdirSync(join(root, 'lib'), { recursive: true }).map(String)
    .filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts'))
  return sources.filter((file) => {
    const js = join(root, 'build', 'lib', file.replace(/\.ts$/, '.js'))
    return !existsSync(js) || hasCode(readFileSync(js, 'utf8'))
  }).map((file) => `lib/${file}`).sort()
}

/** lib/'s coverage from the json-summary report under `root` (the project's folder), if there is one. */
export function readCoverage (root: string): Coverage | undefined {
  const path = join(root, COVERAGE_SUMMARY)
  if (!existsSync(path)) return undefined
  const report = JSON.parse(readFileSync(path, 'utf8')) as Record<string, Record<string, { pct: number } | undefined>>
  const total = report.total ?? {}
  const below = KINDS.filter((kind) => (total[kind]?.pct ?? 0) < 100).map((kind) => `${kind} ${total[kind]?.pct ?? 0}%`)
  // The report names files by their absolute path, the real one.
  const reported = new Set(Object.keys(report).map((file) => relative(realpathSync(root), file)))
  const absent = modulesWithCode(root).filter((file) => !reported.has(file))
  const problems = [
    ...(below.length > 0 ? [below.join(', ')] : []),
    ...(absent.length > 0 ? [`not in the report, no test imports them: ${absent.join(', ')}`] : [])
  ]
  return {
    full: problems.length === 0,
    text: problems.length === 0 ? '100% of lib/ (statements, branches, functions, lines)' : `BELOW 100%: ${problems.join('; ')}`
  }
}
