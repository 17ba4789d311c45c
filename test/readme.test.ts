/**
 * What a new user tries first, tried as they would:
 *
 * - every ```ts block of README.md type-checks as pasted, with the repository's
 *   TypeScript and compiler options (`strict` and more, as `tsc --init` sets them;
 *   unused names allowed), 'fastify-tollgate' being this package as built in dist/;
 * - each one then runs as pasted in its own process (with JWT_SECRET, PORT=0 and a
 *   REDIS_URL in the environment), its `app` is closed, and the process exits by
 *   itself with nothing on stderr.
 *
 * A block that is deliberately partial is marked on the line before its fence with
 * `<!-- readme-test: skip -->` (not checked) or `<!-- readme-test: compile-only -->`
 * (type-checked, not run).
 */
import t, { type Test } from 'tap'
import ts from 'typescript'
import { spawn } from 'node:child_process'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { freePort, requireRedis, startRedis } from './redis-server.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
/** Inside the package, so that 'fastify-tollgate' resolves to the package itself (dist/) as it does for a user. */
const OUT = join(ROOT, 'build', 'readme')

// ------------------------------------------------------------ README snippets

interface Snippet {
  /** The README line of the opening fence (1-based). */
  line: number
  /** The heading the block is under. */
  section: string
  code: string
  mode: 'run' | 'compile-only' | 'skip'
  /** The file the block is written to, under build/readme/. */
  file: string
}

/** Every ```ts block of a markdown text, with the mode its marker (if any) gives it. */
function snippets (markdown: string): Snippet[] {
  const lines = markdown.split('\n')
  const found: Snippet[] = []
  let section = ''
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string
    const heading = /^#{1,6} (.*)/.exec(line)
    if (heading !== null) section = heading[1] as string
    const fence = /^```(\S*)\s*$/.exec(line)
    if (fence === null) continue
    let end = i + 1
    while (end < lines.length && !/^```\s*$/.test(lines[end] as string)) end++
    if (fence[1] === 'ts' || fence[1] === 'typescript') {
      const before = lines.slice(0, i).findLast((l) => l.trim() !== '') ?? ''
      const marker = /^<!--\s*readme-test:\s*(skip|compile-only)\b.*-->\s*$/.exec(before)
      found.push({
        line: i + 1,
        section,
        code: lines.slice(i + 1, end).join('\n'),
        mode: (marker?.[1] as Snippet['mode'] | undefined) ?? 'run',
        file: join(OUT, `readme-line-${i + 1}.ts`)
      })
    }
    i = end
  }
  return found
}

/** A block that declares a top-level `app` also exports it, so that it can be closed (and driven) once it has run. */
const declaresApp = (code: string): boolean => /^(?:const|let|var) app\b/m.test(code)

/** Writes the blocks under build/readme/, type-checks them as one program and emits their JavaScript; returns the errors of each. */
function compile (blocks: Snippet[]): Map<Snippet, string[]> {
  rmSync(OUT, { recursive: true, force: true })
  mkdirSync(OUT, { recursive: true })
  for (const block of blocks) writeFileSync(block.file, `${block.code}\n${declaresApp(block.code) ? 'export { app }' : 'export {}'}\n`)
  const base = ts.readConfigFile(join(ROOT, 'tsconfig.base.json'), (file) => ts.sys.readFile(file))
  const { options } = ts.parseJsonConfigFileContent(base.config, ts.sys, ROOT)
  const program = ts.createProgram(blocks.map((block) => block.file), {
    ...options, noUnusedLocals: false, noUnusedParameters: false, sourceMap: false, rootDir: OUT, outDir: OUT
  })
  program.emit()
  const errors = new Map(blocks.map((block) => [block, [] as string[]]))
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const block = blocks.find((b) => b.file === diagnostic.file?.fileName)
    const at = diagnostic.file !== undefined && diagnostic.start !== undefined
      ? diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start).line + 1
      : 0
    const message = `README.md:${block === undefined ? '?' : block.line + at}: TS${diagnostic.code}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`
    if (block !== undefined) errors.get(block)?.push(message)
    else errors.forEach((list) => list.push(message))
  }
  return errors
}

/** The JavaScript emitted for a block. */
const emitted = (block: Snippet): string => block.file.replace(/\.ts$/, '.js')

interface Ran { code: number | null, stderr: string, timedOut: boolean }

/** Runs a block's JavaScript in its own process, then closes its `app`; waits for the process to exit by itself. */
async function runAlone (block: Snippet, env: NodeJS.ProcessEnv, timeoutMs = 10_000): Promise<Ran> {
  const script = `const m = await import(${JSON.stringify(pathToFileURL(emitted(block)).href)})
if (m.app !== undefined) { await m.app.ready(); await m.app.close() }`
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += String(chunk) })
  let timedOut = false
  const timer = setTimeout(() => { timedOut = true; child.kill('SIGKILL') }, timeoutMs)
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
  clearTimeout(timer)
  return { code, stderr, timedOut }
}

// Child processes and a TypeScript program of their own: more than tap's 30 s on a busy machine.
t.setTimeout(240_000)

const blocks = snippets(readFileSync(join(ROOT, 'README.md'), 'utf8'))
const checked = blocks.filter((block) => block.mode !== 'skip')
const errors = compile(checked)
const SECRET = 'readme-test-secret-0123456789'

t.test('README: every ts block compiles under strict as pasted', async (t) => {
  t.ok(checked.length >= 2, `${checked.length} blocks to check (${blocks.length - checked.length} marked skip)`)
  for (const block of checked) t.same(errors.get(block), [], `README.md:${block.line} (${block.section}) compiles`)
})

t.test('README: every complete ts block runs as pasted, closes, and the process exits with nothing on stderr', async (t) => {
  const runs = checked.filter((block) => block.mode === 'run')
  const usesRedis = (block: Snippet): boolean => block.code.includes('ioredis')
  const check = async (t: Test, block: Snippet, env: NodeJS.ProcessEnv, what: string): Promise<void> => {
    const ran = await runAlone(block, { JWT_SECRET: SECRET, PORT: '0', ...env })
    t.notOk(ran.timedOut, `README.md:${block.line} (${block.section}) ${what}: exits by itself once its app is closed (nothing left open)`)
    t.equal(ran.code, 0, `README.md:${block.line} ${what}: exit code`)
    t.equal(ran.stderr, '', `README.md:${block.line} ${what}: nothing on stderr`)
  }
  for (const block of runs) {
    await t.test(`README.md:${block.line} (${block.section})`, async (t) => {
      if (!usesRedis(block)) return check(t, block, {}, 'run')
      // Redis away: a port nothing listens on. The store decides by failMode, and the client's errors are handled.
      await check(t, block, { REDIS_URL: `redis://127.0.0.1:${await freePort()}` }, 'with Redis away')
      if (!requireRedis(t)) return
      await check(t, block, { REDIS_URL: `redis://127.0.0.1:${(await startRedis(t)).port}` }, 'on a live Redis')
    })
  }
})

t.test('README usage: one VIP user alone on an address meets their own quota, not the edge', async (t) => {
  const usage = checked.find((block) => block.section === 'Usage')
  if (usage === undefined) return t.fail('README has a Usage block')
  process.env.JWT_SECRET ??= SECRET
  process.env.PORT ??= '0'
  const { app } = await import(pathToFileURL(emitted(usage)).href) as { app: FastifyInstance }
  t.teardown(() => app.close())
  const authorization = `Bearer ${app.jwt.sign({ sub: 'victor', tier: 'vip' })}`
  let passed = 0
  let refused
  for (let i = 0; i < 1000 && refused === undefined; i++) {
    const response = await app.inject({ url: '/', headers: { authorization } })
    if (response.statusCode === 200) passed++
    else refused = response
  }
  if (refused === undefined) return t.fail('the VIP tier refuses at some point')
  t.equal(refused.statusCode, 429)
  t.match(refused.headers['ratelimit'], /"app";r=0;/, `the refusal is the VIP's own bucket: ${String(refused.headers['ratelimit'])}`)
  t.notMatch(refused.headers['ratelimit'], /"edge";r=0;/, 'not the edge')
  const vip = /"app";q=(\d+)/.exec(String(refused.headers['ratelimit-policy']))
  t.ok(passed >= Number(vip?.[1]), `the VIP's whole burst passed first (${passed}, capacity ${String(vip?.[1])})`)
})
