/**
 * What `npm test` runs after the build: tap over every test file, `JOBS` files
 * at a time (most of them wait on Redis, timers or child processes more than
 * they compute). The full TAP goes to test-results/tap.txt, the tests' stderr
 * to test-results/stderr.txt; the output ends with a short summary (failures
 * with their diagnostics, then the totals and the coverage verdict), the
 * coverage table only when lib/ is below 100%. A file that died shows the
 * error Node printed for it on stderr; a listed file with no result in the
 * TAP (tap never ran it) counts as failed, and so does a file in which no
 * assertion passed ("no test ran": no tests, only skips or todos, a plan of
 * 0, an exit before its tests), unless its skip is the Redis suites' in a run
 * that skips them.
 *
 * tap's 100% coverage rule on lib/ needs the Redis suites. Without redis-server
 * on PATH outside CI they are skipped, so coverage is reported but not
 * enforced, and the summary says why. A module of lib/ that no test imports
 * is missing from tap's report: it counts as below 100% (tap-coverage.ts).
 *
 * `--quick` (npm run test:quick): the engine, memory store, layers and config
 * tests, without Redis and without coverage, for the edit loop.
 *
 * Other arguments go to tap: test files to run only those, `--jobs=<n>`, ...
 */
import { spawn, spawnSync } from 'node:child_process'
import { createWriteStream, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs'
import { posix } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { inCI, redisAvailable, REDIS_SKIPPED } from './redis-server.js'
import { crashLines, neverRan, shortDiagnostic, TapSummary, type Failure, type FileResult } from './tap-summary.js'
import { COVERAGE_SUMMARY, readCoverage, type Coverage } from './tap-coverage.js'

export const RESULTS = 'test-results'
export const TAP_FILE = `${RESULTS}/tap.txt`
export const STDERR_FILE = `${RESULTS}/stderr.txt`
/** tap as npm scripts find it, also when this file is run with node directly. */
const TAP_BIN = fileURLToPath(new URL('../../node_modules/.bin/tap', import.meta.url))
const tapCommand = (): string => existsSync(TAP_BIN) ? TAP_BIN : 'tap'

/**
 * Test files at once. On 2 cores most files wait (Redis round trips, timers,
 * child processes): on a quiet 2-core machine 6 took the tests from 245 s to
 * 218 s against 4, every file passing; on a machine busy with other work,
 * fewer (`--jobs=4`) keep the files that compute within their wall-time timeouts.
 */
export const JOBS = 6

/**
 * Test files a full run runs on their own, after the others: the pool scenario
 * (test/demo/pool.test.ts) drives a PostgreSQL pool at hundreds of requests a
 * second from load generators on the same two cores, and its latency bounds are
 * about the service, not about five other test files computing beside it. Without
 * coverage (they run the plugin in child processes).
 */
export const ALONE = ['build/test/demo/pool.test.js']

/** What `--quick` runs: no Redis (skipped), no coverage. */
export const QUICK = ['build/test/engine', 'build/test/stores/memory.test.js', 'build/test/layers', 'build/test/config']

/** The environment variable with which `--quick` skips the Redis suites quietly (test/redis-server.ts). */
export const NO_REDIS = 'TOLLGATE_TEST_NO_REDIS'

/** tap's extra arguments: `--allow-incomplete-coverage` only when Redis is missing outside CI. */
export function coverageArgs (redis: boolean, ci: boolean): string[] {
  return redis || ci ? [] : ['--allow-incomplete-coverage']
}

export interface Plan {
  quick: boolean
  /** Arguments for tap. */
  args: string[]
  /** Whether coverage is measured and enforced. */
  coverage: 'enforced' | 'not enforced' | 'off'
  /** Whether the Redis suites run, or are skipped (test:quick, or no redis-server outside CI). */
  redis: 'run' | 'skipped'
}

/** The tap command line for this script's arguments. */
export function plan (argv: string[], redis: boolean, ci: boolean): Plan {
  const quick = argv.includes('--quick')
  const rest = argv.filter((arg) => arg !== '--quick')
  const jobs = rest.some((arg) => /^(--jobs|-j)/.test(arg)) ? [] : [`--jobs=${JOBS}`]
  const files = quick && !rest.some((arg) => !arg.startsWith('-')) ? QUICK : []
  const suites = !quick && (redis || ci) ? 'run' : 'skipped'
  if (quick) return { quick, args: ['--reporter=tap', ...jobs, '--disable-coverage', ...rest, ...files], coverage: 'off', redis: suites }
  if (rest.includes('--disable-coverage')) return { quick, args: ['--reporter=tap', ...jobs, ...rest], coverage: 'off', redis: suites }
  const relax = coverageArgs(redis, ci)
  return {
    quick,
    args: ['--reporter=tap', ...jobs, '--coverage-report=json-summary', ...relax, ...rest],
    coverage: relax.length > 0 ? 'not enforced' : 'enforced',
    redis: suites
  }
}

/**
 * The test files a run lists, as tap names them: the .js files and folders among `args`
 * (a listed file that does not exist too: it never runs), or every file under build/test/.
 */
export function listedFiles (args: string[]): string[] {
  const given = args.filter((arg) => !arg.startsWith('-') && (arg.endsWith('.js') || existsSync(arg)))
  return (given.length > 0 ? given : ['build/test']).map((arg) => posix.normalize(arg)).flatMap((root) =>
    existsSync(root) && statSync(root).isDirectory()
      ? readdirSync(root, { recursive: true }).map(String).filter((name) => name.endsWith('.test.js')).map((name) => posix.join(root, name))
      : [root]).sort()
}

/** Why a file tap passed counts as failed. */
export const NO_TEST_RAN = 'no test ran: not one assertion passed (no tests, only skips or todos, a plan of 0, or an exit before them)'

/** Whether `file` passed in tap without a passing assertion (see the header): it counts as failed. */
export function ranNoTest (file: FileResult, thePlan: Plan): boolean {
  const redisSkip = thePlan.redis === 'skipped' && file.skipped.some((name) => name.startsWith(REDIS_SKIPPED))
  return file.ok && file.passed === 0 && !redisSkip
}

/** The files `args` leaves to a run of their own: `ALONE`'s, in a full run (no file named, not --quick). */
export function aloneFiles (thePlan: Plan): string[] {
  const named = thePlan.args.some((arg) => !arg.startsWith('-'))
  return thePlan.quick || named ? [] : ALONE
}

/**
 * Runs tap with `args`, the TAP to `TAP_FILE` (appended to with `append`) and read
 * on the way into `summary`; a dot per file that passed, F per file that failed.
 */
async function runTap (thePlan: Plan, args: string[], env: NodeJS.ProcessEnv, summary: TapSummary, append = false): Promise<number> {
  const flags = append ? 'a' : 'w'
  const tapOut = createWriteStream(TAP_FILE, { flags })
  const errOut = createWriteStream(STDERR_FILE, { flags })
  const child = spawn(tapCommand(), args, { env, stdio: ['ignore', 'pipe', 'pipe'] })
  child.on('error', (error) => { errOut.write(`${String(error)}\n`) })
  child.stderr.pipe(errOut)
  let files = summary.files.length
  createInterface({ input: child.stdout }).on('line', (line) => {
    tapOut.write(`${line}\n`)
    summary.line(line)
    if (summary.files.length > files) {
      files = summary.files.length
      const file = summary.files.at(-1)
      process.stdout.write(file?.ok === true && !ranNoTest(file, thePlan) ? '.' : 'F')
    }
  })
  const code = await new Promise<number>((resolve) => child.once('close', (status) => { resolve(status ?? 1) }))
  await Promise.all([tapOut, errOut].map((stream) => new Promise((resolve) => stream.end(resolve))))
  if (files > 0) process.stdout.write('\n')
  return code
}

/** tap's counts of two runs, added. */
export function sumTotals (a: Record<string, number> | undefined, b: Record<string, number> | undefined): Record<string, number> | undefined {
  if (a === undefined || b === undefined) return a ?? b
  const sum: Record<string, number> = { ...a }
  for (const [key, value] of Object.entries(b)) sum[key] = (sum[key] ?? 0) + value
  return sum
}

const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`

/** The failures with their diagnostics; a file that died, also its error from the tests' stderr. */
function failureLines (failures: Failure[], stderr: string[], max = 20): string[] {
  const lines: string[] = []
  let file = ''
  for (const failure of failures.slice(0, max)) {
    if (failure.file !== file) lines.push(`FAILED ${failure.file}`)
    file = failure.file
    lines.push(`  ✗ ${failure.path.join(' › ') || '(the file itself)'}`)
    for (const line of shortDiagnostic(failure.diagnostic)) lines.push(`      ${line}`)
    if (failure.path.length === 0) for (const line of crashLines(stderr, failure.file)) lines.push(`      ${line}`)
  }
  if (failures.length > max) lines.push(`  … and ${failures.length - max} more failures: see ${TAP_FILE}`)
  return lines
}

/** What `report` needs of a run besides the TAP. */
export interface Run {
  code: number
  ms: number
  plan: Plan
  coverage: Coverage | undefined
  /** The tests' stderr, by line. */
  stderr: string[]
  /** The test files the run lists (`listedFiles`): one with no result in the TAP failed. */
  expected: string[]
}

/** The summary the output ends with; returns whether the run passed. */
export function report (summary: TapSummary, run: Run): { ok: boolean, lines: string[] } {
  const missing = neverRan(summary, run.expected)
  const empty = summary.files.filter((file) => ranNoTest(file, run.plan))
  const failures = [
    ...summary.failures,
    ...missing.map((file): Failure => ({ file, path: [], diagnostic: ['never ran: no result from it in the TAP'] })),
    ...empty.map(({ file, skipped }): Failure => ({ file, path: [], diagnostic: [NO_TEST_RAN, ...skipped.map((name) => `skipped: ${name}`)] }))
  ]
  const files = [
    ...summary.files.map((file) => empty.includes(file) ? { ...file, ok: false } : file),
    ...missing.map((file) => ({ file, ok: false, ms: 0 }))
  ]
  const failedFiles = files.filter((file) => !file.ok).length
  const stderrLines = run.stderr.filter((line) => line.trim() !== '').length
  const counts = summary.totals ?? { total: summary.counts.pass + summary.counts.fail + summary.counts.skip + summary.counts.todo, ...summary.counts }
  const slowest = [...files].sort((a, b) => b.ms - a.ms).slice(0, 5).map((file) => `${file.file.replace(/^build\/test\//, '')} ${seconds(file.ms)}`)
  const coverageOk = run.plan.coverage !== 'enforced' || run.coverage?.full === true
  const ok = run.code === 0 && failures.length === 0 && failedFiles === 0 && summary.bailedOut === undefined && coverageOk
  const coverageLine = run.plan.coverage === 'off'
    ? `not measured (${run.plan.quick ? '--quick' : '--disable-coverage'})`
    : `${run.coverage?.text ?? 'no coverage report'}${run.plan.coverage === 'not enforced' ? ' — NOT enforced: the Redis suites were skipped (no redis-server on PATH, CI not set)' : ''}`
  const lines = [
    '',
    `──── ${run.plan.quick ? 'npm run test:quick' : 'npm test'}: ${ok ? 'PASSED' : 'FAILED'} ────`,
    ...failureLines(failures, run.stderr),
    ...(summary.bailedOut === undefined ? [] : [summary.bailedOut]),
    ...(failures.length > 0 || summary.bailedOut !== undefined ? [''] : []),
    `Files:    ${files.length} (${files.length - failedFiles} passed, ${failedFiles} failed); slowest: ${slowest.join(', ')}`,
    `Asserts:  ${counts.total ?? 0} (${counts.pass ?? 0} pass, ${counts.fail ?? 0} fail, ${counts.skip ?? 0} skip, ${counts.todo ?? 0} todo)`,
    `Duration: ${seconds(run.ms)}`,
    `Coverage: ${coverageLine}`,
    `TAP:      ${TAP_FILE}${stderrLines > 0 ? `; the tests' stderr (${stderrLines} lines): ${STDERR_FILE}` : ''}`,
    ...(run.code !== 0 && ok === false && failures.length === 0 && coverageOk ? [`tap exited with ${run.code}: see ${TAP_FILE} and ${STDERR_FILE}`] : [])
  ]
  return { ok, lines }
}

async function main (): Promise<void> {
  const started = Date.now()
  const thePlan = plan(process.argv.slice(2), redisAvailable, inCI)
  mkdirSync(RESULTS, { recursive: true })
  rmSync(COVERAGE_SUMMARY, { force: true })
  const env = thePlan.quick ? { ...process.env, [NO_REDIS]: '1' } : process.env
  process.stdout.write(`${thePlan.quick ? 'Quick tests' : 'Tests'}: tap ${thePlan.args.join(' ')}\nFull TAP: ${TAP_FILE}\n`)
  const summary = new TapSummary()
  const alone = aloneFiles(thePlan)
  let code = await runTap(thePlan, [...thePlan.args, ...alone.map((file) => `--exclude=${file}`)], env, summary)
  // Read before the files run alone: their run measures no coverage.
  const coverage = thePlan.coverage === 'off' ? undefined : readCoverage(process.cwd())
  if (alone.length > 0) {
    const before = summary.totals
    summary.totals = undefined
    process.stdout.write(`Alone: ${alone.join(' ')}\n`)
    const aloneCode = await runTap(thePlan, ['--reporter=tap', '--jobs=1', '--disable-coverage', ...alone], env, summary, true)
    if (code === 0) code = aloneCode
    summary.totals = sumTotals(before, summary.totals)
  }
  if (coverage !== undefined && !coverage.full) spawnSync(tapCommand(), ['report', 'text'], { stdio: 'inherit' })
  const stderr = readFileSync(STDERR_FILE, 'utf8').split('\n')
  const expected = listedFiles(thePlan.args)
  const { ok, lines } = report(summary, { code, ms: Date.now() - started, plan: thePlan, coverage, stderr, expected })
  process.stdout.write(`${lines.join('\n')}\n`)
  process.exit(ok ? 0 : code === 0 ? 1 : code)
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main()
