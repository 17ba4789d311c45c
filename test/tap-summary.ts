/**
 * Reads the TAP that `tap --reporter=tap` prints (one file per top-level
 * subtest, subtests indented by four spaces, a YAML block after a failure) and
 * sums it up for `npm test`: the failures with their diagnostics, the counts,
 * and each file's time, passing assertions and skips.
 */

export interface Failure {
  /** The test file (the top-level subtest's name). */
  file: string
  /** The subtests from the file down to the failing assertion or subtest, and its own name last. */
  path: string[]
  /** The YAML block after the `not ok` line, without its `---` and `...`. */
  diagnostic: string[]
}

export interface FileResult {
  file: string
  ok: boolean
  /** `# time=` of its result line, in ms (0 if absent). */
  ms: number
  /** Its assertions that passed (not skipped, not todo). */
  passed: number
  /** The names of its assertions and subtests that were skipped. */
  skipped: string[]
}

export interface TapCounts {
  pass: number
  fail: number
  skip: number
  todo: number
}

const RESULT = /^(not )?ok\b(?: \d+)?(?: - )?(.*?)(?: # (SKIP|TODO|time=)(\S*).*)?$/i

interface Open {
  /** The subtest's name (from `# Subtest:`), the result line of which closes it. */
  name: string
  /** Failures recorded inside it: a failing subtest with none gets one of its own. */
  failures: number
}

/** A streaming TAP reader: `line()` each line of tap's output, then read the results. */
export class TapSummary {
  readonly failures: Failure[] = []
  readonly files: FileResult[] = []
  readonly counts: TapCounts = { pass: 0, fail: 0, skip: 0, todo: 0 }
  bailedOut: string | undefined
  /** tap's own count at the end, `# { total: 12020, pass: 12019, fail: 1 }`, if it printed one. */
  totals: Record<string, number> | undefined
  /** Open subtests, by depth (0: the file). */
  private readonly open: Array<Open | undefined> = []
  /** The failure whose YAML block is being read, and the block's indent. */
  private yaml: { failure: Failure, indent: string } | undefined
  /** The open file's passing assertions and skips so far. */
  private tally: Pick<FileResult, 'passed' | 'skipped'> = { passed: 0, skipped: [] }

  line (text: string): void {
    if (this.yaml !== undefined) return this.readYaml(text)
    const indent = /^ */.exec(text)?.[0].length ?? 0
    const depth = Math.floor(indent / 4)
    const body = text.slice(depth * 4)
    const subtest = /^# Subtest: (.*)$/.exec(body)
    if (subtest !== null) {
      this.open.length = depth
      this.open[depth] = { name: subtest[1] as string, failures: 0 }
      if (depth === 0) this.tally = { passed: 0, skipped: [] }
      return
    }
    if (/^Bail out!/.test(body)) this.bailedOut ??= body
    const totals = depth === 0 ? /^# \{ (total: .*) \}$/.exec(body) : null
    if (totals !== null) {
      const pairs = (totals[1] as string).split(', ').map((pair): [string, number] => [pair.split(': ')[0] ?? '', Number(pair.split(': ')[1])])
      this.totals = Object.fromEntries(pairs)
    }
    const result = RESULT.exec(body)
    if (result !== null) this.result(depth, result)
  }

  private result (depth: number, [, not, name = '', directive, value = '']: RegExpExecArray): void {
    const failed = not !== undefined && !/^todo$/i.test(directive ?? '')
    const own = this.open[depth]
    const path = [...this.open.slice(0, depth).map((open) => open?.name ?? '?'), name]
    if (own !== undefined) {
      // The result line of a subtest: it closes it.
      this.open.length = depth
      const ms = directive === 'time=' ? parseFloat(value) * (value.endsWith('ms') ? 1 : 1000) : 0
      if (depth === 0) this.files.push({ file: own.name, ok: !failed, ms, ...this.tally })
      if (failed && own.failures === 0) this.fail(path)
      return
    }
    if (depth === 0) {
      // A file tap timed out: \`not ok 80 - timeout!\`, its YAML naming the file (\`expired:\`).
      this.files.push({ file: name, ok: !failed, ms: 0, passed: 0, skipped: [] })
      if (failed) this.fail([name, name])
      return
    }
    const kind = /^skip$/i.test(directive ?? '') ? 'skip' : /^todo$/i.test(directive ?? '') ? 'todo' : failed ? 'fail' : 'pass'
    this.counts[kind]++
    if (kind === 'skip') this.tally.skipped.push(name)
    if (kind === 'pass') this.tally.passed++
    if (failed) this.fail(path)
  }

  private fail (path: string[]): void {
    const failure: Failure = { file: path[0] ?? '?', path: path.slice(1), diagnostic: [] }
    // tap reports a timed-out subtest twice: once is enough.
    if (!this.failures.some((f) => f.file === failure.file && f.path.join('\0') === failure.path.join('\0'))) this.failures.push(failure)
    for (const open of this.open) if (open !== undefined) open.failures++
    this.yaml = { failure, indent: '' }
  }

  /** The YAML block right after a `not ok` line (if any): kept for the summary. */
  private readYaml (text: string): void {
    const yaml = this.yaml as { failure: Failure, indent: string }
    if (yaml.indent === '') {
      const start = /^( *)---$/.exec(text)
      this.yaml = undefined
      if (start !== null) this.yaml = { failure: yaml.failure, indent: start[1] as string }
      else this.line(text)
      return
    }
    if (text === `${yaml.indent}...`) {
      this.yaml = undefined
      const expired = yaml.indent === '  ' ? /^expired: (.*)$/m.exec(yaml.failure.diagnostic.join('\n'))?.[1] : undefined
      const file = this.files.at(-1)
      if (expired !== undefined && file !== undefined && file.file === yaml.failure.file) {
        yaml.failure.file = expired
        if (this.files.some((other) => other.file === expired)) this.files.pop()
        else file.file = expired
      }
      return
    }
    yaml.failure.diagnostic.push(text.startsWith(yaml.indent) ? text.slice(yaml.indent.length) : text)
  }
}

/** The YAML keys left out of the summary (the TAP file has them). */
const NOISE = new Set(['stack', 'source', 'at', 'test', 'fullname', 'typeName', 'tapCaught', 'jobId', 'isToplevel', 'stdio', 'cwd', 'externalID', 'command', 'args', 'env'])

/**
 * A failure's diagnostic for the summary: its YAML without the stack, the
 * source excerpt and the like, `at:` on one line; `maxLines` at most.
 */
export function shortDiagnostic (diagnostic: string[], maxLines = 24): string[] {
  const kept: string[] = []
  let key = ''
  let at: { file?: string | undefined, line?: string | undefined } | undefined
  for (const line of diagnostic) {
    const top = /^([\w-]+):/.exec(line)
    if (top !== null) key = top[1] as string
    if (key === 'at') {
      at ??= {}
      // The first fileName and lineNumber: the source's (TypeScript), not the \`generated:\` ones below them.
      const field = /^\s+(fileName|lineNumber): (.*)$/.exec(line)
      if (field?.[1] === 'fileName') at.file ??= field[2]
      if (field?.[1] === 'lineNumber') at.line ??= field[2]
    } else if (!NOISE.has(key)) {
      kept.push(line)
    }
  }
  if (at?.file !== undefined) kept.push(`at: ${at.file}${at.line === undefined ? '' : `:${at.line}`}`)
  return kept.length > maxLines ? [...kept.slice(0, maxLines), `… ${kept.length - maxLines} more lines in the TAP file`] : kept
}

/** The files listed for a run (`expected`) that gave no result in the TAP: tap never ran them, or lost them. */
export function neverRan (summary: TapSummary, expected: string[]): string[] {
  const ran = new Set(summary.files.map((file) => file.file))
  return expected.filter((file) => !ran.has(file))
}

/** The line with which Node names an uncaught error: `SyntaxError: …`, `Error [ERR_MODULE_NOT_FOUND]: …`. */
const ERROR_LINE = /^[A-Z]\w*(?: \[\w+\])?: \S/

/**
 * A test file that died before or outside its tests, from the tests' stderr (all files', interleaved):
 * the error Node printed and where, e.g. `SyntaxError: missing ) after argument list` and
 * `at build/test/x.test.js:2`. The file is found by its path, the built .js or (a source-mapped
 * stack) its .ts; the error is below a `file:line` header, above an `at` line, or the line itself.
 */
export function crashLines (stderr: string[], file: string): string[] {
  const names = [file, file.replace(/^build\//, '').replace(/\.js$/, '.ts')]
  const index = stderr.findIndex((line) => names.some((name) => line.includes(`/${name}`)))
  const found = stderr[index]
  if (found === undefined) return []
  const place = names.map((name) => new RegExp(`/(${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}):(\\d+)`).exec(found))
    .find((match): match is RegExpExecArray => match !== null)
  const isError = (line: string | undefined): boolean => line !== undefined && ERROR_LINE.test(line.trim())
  const below = stderr.slice(index, index + 8).find(isError)
  const above = stderr.slice(Math.max(0, index - 30), index).reverse().find(isError)
  const error = (isError(found) ? found : /^\s*at /.test(found) ? above : below)?.trim()
  return [
    ...(error === undefined ? [] : [error.length > 200 ? `${error.slice(0, 200)}…` : error]),
    ...(place === undefined ? [] : [`at ${place[1] ?? ''}:${place[2] ?? ''}`])
  ]
}
