/**
 * The TypeScript blocks of a user document (README.md, MIGRATING.md, docs/**.md),
 * tried as a user pastes them. A TypeScript block is a fenced code block in any
 * container (markdown.ts reads the document as CommonMark) whose info string
 * starts with `ts`, `typescript`, `mts` or `cts`, in any case, whatever follows
 * (`ts title="app.ts"`):
 *
 * - every block type-checks as pasted, with the repository's TypeScript and
 *   compiler options (`strict` and more, as `tsc --init` sets them; unused names
 *   allowed), 'fastify-tollgate' being this package as built in dist/;
 * - each one then runs as pasted in its own process (with JWT_SECRET, PORT=0 and a
 *   REDIS_URL in the environment: a port nothing listens on, then a live
 *   redis-server, for a block that uses ioredis), its `app` is closed, and the
 *   process exits by itself with nothing on stderr.
 *
 * A block that is deliberately partial is marked by the HTML block just before its
 * fence, exactly `<!-- readme-test: compile-only -->` (type-checked, not run) or
 * `<!-- readme-test: skip -->` (not checked; blocks.test.ts allows none). What
 * cannot be checked is refused, never passed over: a `tsx` block, a ts fence that
 * GitHub shows as text (in an indented code block, or in an HTML block), a
 * `readme-test` comment that is not exactly a marker before a ts fence.
 */
import type { Test } from 'tap'
import ts from 'typescript'
import { spawn } from 'node:child_process'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { freePort, requireRedis, startRedis } from '../redis-server.js'
import { untracedEnv } from '../child-env.js'
import { ROOT } from './documents.js'
import { codeBlocks, headings, html, newlines, withoutComments, type CodeBlock } from './markdown.js'

export const SECRET = 'readme-test-secret-0123456789'

export interface Snippet {
  /** The document, from the repository's root: `README.md`, `docs/options.md`. */
  document: string
  /** The document's line of the opening fence (1-based). */
  line: number
  /** The heading the block is under. */
  section: string
  code: string
  mode: 'run' | 'compile-only' | 'skip'
  /** The file the block is written to, under the document's folder in build/. */
  file: string
}

/** A document's blocks, and where they are written: inside the package, so that 'fastify-tollgate' resolves to the package itself (dist/) as it does for a user. */
export interface DocumentBlocks {
  /** `README.md`, `docs/options.md`: from the repository's root. */
  document: string
  /** Every TypeScript block, skipped ones included. */
  blocks: Snippet[]
  /** What cannot be checked (a tsx block, a stray ts fence, a marker that is not one), as `<document>:<line>: why`. */
  refused: string[]
  /** The blocks not marked skip. */
  checked: Snippet[]
  /** Per checked block, its compile errors. */
  errors: Map<Snippet, string[]>
}

/** The file extension a fence's language is checked as (its leading letters, any case: `ts title="…"`, `TS`, `mts`). */
const EXTENSIONS = new Map([['ts', '.ts'], ['typescript', '.ts'], ['mts', '.mts'], ['cts', '.cts']])
/** TypeScript fences that cannot be checked here: refused, not skipped. */
const UNCHECKABLE = new Map([['tsx', 'a tsx block (JSX) is not checked: write it as ts, or as its own language if it is not TypeScript']])
const languageOf = (info: string): string => (/^[a-z]*/i.exec(info)?.[0] ?? '').toLowerCase()
const isTypeScript = (info: string): boolean => EXTENSIONS.has(languageOf(info)) || UNCHECKABLE.has(languageOf(info))
const MARKER = /^\s*<!--\s*readme-test:\s*(skip|compile-only)\s*-->\s*$/

/** A document's TypeScript blocks, and what it holds that cannot be checked, each refusal as `<document>:<line>: why`. */
export interface Found { blocks: Snippet[], refused: string[] }

/** The heading each line of a document is under. */
function sectionAt (markdown: string): (line: number) => string {
  const all = headings(markdown)
  return (line) => all.findLast((heading) => heading.line < line)?.text ?? ''
}

/** A line that reads as a fence, and its language. */
const FENCE_LINE = /^[ \t]*(?:`{3,}|~{3,})[ \t]*([^\s`]*)/

/**
 * The lines that read as a TypeScript fence but open none, GitHub showing them as
 * text: in an indented code block, or in an HTML block (`<details>` with no blank
 * line after it) outside its comments.
 */
function strayFences (markdown: string, blocks: CodeBlock[]): number[] {
  const texts = [
    ...blocks.filter((block) => block.info === undefined).map(({ line, content }) => ({ line, text: content })),
    ...html(markdown).filter(({ node }) => node.type === 'html_block')
      .map(({ node, line }) => ({ line, text: withoutComments(node.literal ?? '') }))
  ]
  return texts.flatMap(({ line, text }) => text.split('\n').flatMap((one, i) => {
    const fence = FENCE_LINE.exec(one)
    return fence !== null && isTypeScript(fence[1] ?? '') ? [line + i] : []
  }))
}

/** The `readme-test` comments of a document that are not markers (those at `markers`), each as its line. */
const strayMarkers = (markdown: string, markers: Set<number>): number[] => html(markdown).flatMap(({ node, line }) => {
  const at = /<!--\s*readme-test/.exec(node.literal ?? '')
  return at === null || markers.has(line) ? [] : [line + newlines((node.literal ?? '').slice(0, at.index))]
})

/** Every TypeScript block of a markdown text, with the mode its marker (if any) gives it; written as `<out>/<prefix>-line-<n>.<ext>`. */
export function snippets (markdown: string, out: string, prefix: string, document = `${prefix}.md`): Found {
  const section = sectionAt(markdown)
  const found: Found = { blocks: [], refused: [] }
  const refuse = (line: number, why: string): void => { found.refused.push(`${document}:${line}: ${why}`) }
  const markers = new Set<number>()
  const blocks = codeBlocks(markdown)
  for (const block of blocks) {
    const marker = MARKER.exec(block.before?.node.literal ?? '')
    if (marker !== null && block.before !== undefined) markers.add(block.before.line)
    if (!isTypeScript(block.info ?? '')) {
      if (marker !== null) refuse(block.before?.line ?? block.line, `a marker before a ${block.language || 'plain'} block: markers are for ts blocks`)
      continue
    }
    const extension = EXTENSIONS.get(languageOf(block.info ?? ''))
    if (extension === undefined) { refuse(block.line, UNCHECKABLE.get(languageOf(block.info ?? '')) ?? ''); continue }
    found.blocks.push({
      document,
      line: block.line,
      section: section(block.line),
      code: block.content,
      mode: (marker?.[1] as Snippet['mode'] | undefined) ?? 'run',
      file: join(out, `${prefix}-line-${block.line}${extension}`)
    })
  }
  for (const line of strayMarkers(markdown, markers)) {
    refuse(line, 'not a marker: <!-- readme-test: compile-only --> (or skip), alone on the line before a ts fence')
  }
  for (const line of strayFences(markdown, blocks)) {
    refuse(line, 'a ts fence in an indented code block or an HTML block: GitHub shows it as text; unindent it, or leave a blank line after the tag')
  }
  return found
}

/** A block that declares a top-level `app` also exports it, so that it can be closed (and driven) once it has run. */
const declaresApp = (code: string): boolean => /^(?:const|let|var) app\b/m.test(code)

/** Writes the blocks under `out`, type-checks them as one program and emits their JavaScript; returns the errors of each, as `<document>:<line>: TS…`. */
function compile (blocks: Snippet[], out: string): Map<Snippet, string[]> {
  rmSync(out, { recursive: true, force: true })
  mkdirSync(out, { recursive: true })
  for (const block of blocks) writeFileSync(block.file, `${block.code}\n${declaresApp(block.code) ? 'export { app }' : 'export {}'}\n`)
  const base = ts.readConfigFile(join(ROOT, 'tsconfig.base.json'), (file) => ts.sys.readFile(file))
  const { options } = ts.parseJsonConfigFileContent(base.config, ts.sys, ROOT)
  const program = ts.createProgram(blocks.map((block) => block.file), {
    ...options, noUnusedLocals: false, noUnusedParameters: false, sourceMap: false, rootDir: out, outDir: out
  })
  // Not the package's code: kept out of the coverage figures (tap's coverage-exclude only knows the files present when it starts).
  program.emit(undefined, (file, text) => { ts.sys.writeFile(file, `/* c8 ignore start */\n${text}`) })
  const errors = new Map(blocks.map((block) => [block, [] as string[]]))
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const block = blocks.find((b) => b.file === diagnostic.file?.fileName)
    const at = diagnostic.file !== undefined && diagnostic.start !== undefined
      ? diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start).line + 1
      : 0
    const where = block === undefined ? `${diagnostic.file?.fileName ?? '?'}:?` : `${block.document}:${block.line + at}`
    const message = `${where}: TS${diagnostic.code}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`
    if (block !== undefined) errors.get(block)?.push(message)
    else errors.forEach((list) => list.push(message))
  }
  return errors
}

/**
 * The blocks of several documents (`docs/options.md`, …), written under
 * build/`folder`/ (each file named after its document) and compiled as one
 * program: one type-check for all, each document's errors its own.
 */
export function documentsBlocks (documents: string[], folder: string): DocumentBlocks[] {
  const out = join(ROOT, 'build', folder)
  const found = documents.map((document) => {
    const prefix = document.replace(/\.md$/, '').replace(/[^\w-]/g, '-')
    const { blocks, refused } = snippets(readFileSync(join(ROOT, document), 'utf8'), out, prefix, document)
    return { document, blocks, refused, checked: blocks.filter((block) => block.mode !== 'skip') }
  })
  const errors = compile(found.flatMap(({ checked }) => checked), out)
  return found.map((page) => ({ ...page, errors }))
}

/** The JavaScript emitted for a block. */
export const emitted = (block: Snippet): string => block.file.replace(/\.([mc]?)ts$/, '.$1js')

interface Ran { code: number | null, stderr: string, timedOut: boolean }

/**
 * Runs a block's JavaScript in its own process, then closes its `app`; waits for the process to exit by itself.
 * `timeoutMs`: a process left open never exits; one that starts slowly on a busy machine (four blocks run at once) does.
 */
async function runAlone (block: Snippet, env: NodeJS.ProcessEnv, timeoutMs = 30_000): Promise<Ran> {
  const script = `const m = await import(${JSON.stringify(pathToFileURL(emitted(block)).href)})
if (m.app !== undefined) { await m.app.ready(); await m.app.close() }`
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, env: untracedEnv(env), stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += String(chunk) })
  let timedOut = false
  const timer = setTimeout(() => { timedOut = true; child.kill('SIGKILL') }, timeoutMs)
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
  clearTimeout(timer)
  return { code, stderr, timedOut }
}

/** The two tests every document gets: its blocks (at least `atLeast` checked ones: some were found) compile, and the complete ones run as pasted. */
export function testBlocks (t: Test, { document, blocks, refused, checked, errors }: DocumentBlocks, atLeast: number): void {
  const name = document.replace(/\.md$/, '')
  t.test(`${name}: every ts block compiles under strict as pasted`, async (t) => {
    t.same(refused, [], `${document}: every TypeScript block can be checked`)
    t.ok(checked.length >= atLeast, `${checked.length} blocks to check (${blocks.length - checked.length} marked skip)`)
    for (const block of checked) t.same(errors.get(block), [], `${document}:${block.line} (${block.section}) compiles`)
  })

  // Four blocks at a time: each runs in its own process (and on its own Redis).
  t.test(`${name}: every complete ts block runs as pasted, closes, and the process exits with nothing on stderr`, { jobs: 4 }, async (t) => {
    const runs = checked.filter((block) => block.mode === 'run')
    const usesRedis = (block: Snippet): boolean => block.code.includes('ioredis')
    const check = async (t: Test, block: Snippet, env: NodeJS.ProcessEnv, what: string): Promise<void> => {
      const ran = await runAlone(block, { JWT_SECRET: SECRET, PORT: '0', ...env })
      t.notOk(ran.timedOut, `${document}:${block.line} (${block.section}) ${what}: exits by itself once its app is closed (nothing left open)`)
      t.equal(ran.code, 0, `${document}:${block.line} ${what}: exit code`)
      t.equal(ran.stderr, '', `${document}:${block.line} ${what}: nothing on stderr`)
    }
    for (const block of runs) {
      void t.test(`${document}:${block.line} (${block.section})`, async (t) => {
        if (!usesRedis(block)) return check(t, block, {}, 'run')
        // Redis away: a port nothing listens on. The store decides by failMode, and the client's errors are handled.
        // Both runs at once: the first mostly waits for its client to give up.
        const away = check(t, block, { REDIS_URL: `redis://127.0.0.1:${await freePort()}` }, 'with Redis away')
        if (requireRedis(t)) await check(t, block, { REDIS_URL: `redis://127.0.0.1:${(await startRedis(t)).port}` }, 'on a live Redis')
        await away
      })
    }
  })
}
