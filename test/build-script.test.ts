/**
 * scripts/build.js, the build behind `npm run build`, `build:test`, `start`, `example`, `demo`
 * and the benches, run on a small project in a temporary folder (never on this repository's
 * dist/ and build/, which the other test files are running from): incremental (a second run
 * rewrites nothing), no stale output after a source is deleted or renamed, a hand-deleted
 * output rebuilt, nothing the untyped `run` target wrote surviving the next tsc build, `run`
 * writing the bytes tsc writes, `pack` building dist/ from nothing, and of lib/'s other files
 * only the Lua copied, whenever its bytes differ from the copy's.
 *
 * Every tsc build costs CPU (about half a second each), so the cases share one project and
 * follow each other, each starting from the state the one before left: run them in order.
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import {
  copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync
} from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { untracedEnv } from './child-env.js'

// About a dozen tsc builds on a shared 2-core machine.
t.setTimeout(180_000)

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const ENV = untracedEnv()

const project = mkdtempSync(join(tmpdir(), 'tollgate-build-'))
t.teardown(() => { rmSync(project, { recursive: true, force: true }) })

/** Writes a file of the small project. */
function put (path: string, text: string): void {
  mkdirSync(dirname(join(project, path)), { recursive: true })
  writeFileSync(join(project, path), text)
}

// The repository's script and configs. The base one without Node's types and without TypeScript's library (parsing
// it was a third of each build's CPU): the few global types tsc needs are declared in lib/globals.d.ts, a
// declaration file as a project may hold (it has no output).
mkdirSync(join(project, 'scripts'))
copyFileSync(join(ROOT, 'scripts', 'build.js'), join(project, 'scripts', 'build.js'))
for (const config of ['tsconfig.build.json', 'tsconfig.json']) copyFileSync(join(ROOT, config), join(project, config))
symlinkSync(join(ROOT, 'node_modules'), join(project, 'node_modules'))
put('package.json', JSON.stringify({ name: 'small', type: 'module' }))
put('tsconfig.base.json', readFileSync(join(ROOT, 'tsconfig.base.json'), 'utf8').replace('"types": ["node"]', '"types": []')
  .replace(/"lib": \[[^\]]*\]/, '"noLib": true'))
put('lib/globals.d.ts', ['Array<T>', 'Boolean', 'CallableFunction', 'Function', 'IArguments', 'NewableFunction', 'Number', 'Object', 'RegExp']
  .map((name) => `interface ${name} {}\n`).join('') + 'interface String { readonly length: number }\n')
put('lib/types/shape.ts', 'export interface Shape { readonly sides: number }\nexport type Named = Shape & { name: string }\n')
put('lib/square.ts', "import type { Shape } from './types/shape.js'\nexport const square = { sides: 4 } satisfies Shape\nexport class Box<T> { constructor (readonly value: T) {} }\n")
put('lib/index.ts', "export { square, Box } from './square.js'\nexport type { Shape, Named } from './types/shape.js'\nexport const area = (side: number): number => side ** 2\n")
put('lib/stores/scripts/one.lua', 'return 1\n')
put('lib/stores/scripts/NOTES.txt', 'notes, not part of the package\n')
put('test/index.test.ts', "import { area } from '../lib/index.js'\nexport const four: number = area(2)\n")
put('test/redis-server.ts', 'export const port = 0\n')
put('examples/example.ts', "import { port } from '../test/redis-server.js'\nexport const url = `http://127.0.0.1:${port}`\n")
put('demo/index.ts', "import { url } from '../examples/example.js'\nexport const shown = url.length\n")

interface Ran { code: number, output: string }

/** Runs `node scripts/build.js <args>` in the small project. */
function build (...args: string[]): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['scripts/build.js', ...args], { cwd: project, env: ENV }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, output: stdout + stderr })
    })
  })
}

/** Every file under dist/ and build/, by path, with its modification time. */
function outputs (): Map<string, number> {
  return new Map(['dist', 'build'].flatMap((dir) => existsSync(join(project, dir))
    ? readdirSync(join(project, dir), { recursive: true, withFileTypes: true }).filter((entry) => entry.isFile())
      .map((entry) => join(entry.parentPath, entry.name).slice(project.length + 1))
      .map((path): [string, number] => [path, statSync(join(project, path)).mtimeMs])
    : []))
}

const read = (path: string): string => readFileSync(join(project, path), 'utf8')

t.test('build:test: dist/ with .js and .d.ts only, build/ with .js and maps, the Lua (and no other file of lib/) copied to both', async (t) => {
  const ran = await build('test')
  t.equal(ran.code, 0, 'builds', { output: ran.output })
  const files = [...outputs().keys()].sort()
  t.same(files.filter((file) => file.startsWith('dist/')), [
    'dist/.tsbuildinfo', 'dist/index.d.ts', 'dist/index.js', 'dist/square.d.ts', 'dist/square.js',
    'dist/stores/scripts/one.lua', 'dist/types/shape.d.ts', 'dist/types/shape.js'
  ], 'no source map, no source in dist/')
  t.ok(files.includes('build/test/index.test.js') && files.includes('build/test/index.test.js.map'), 'the tests compiled, with maps')
  t.ok(files.includes('build/lib/stores/scripts/one.lua'), 'the Lua beside the tests\' copy of lib/')
  t.same(files.filter((file) => file.includes('NOTES')), [], 'lib/\'s note copied nowhere (dist/ ships whole)')
  t.ok(files.includes('build/examples/example.js') && files.includes('build/demo/index.js'), 'the examples and the demo')
})

t.test('a second run with nothing changed rewrites nothing, for every target', async (t) => {
  const before = outputs()
  for (const target of ['dist', 'test', 'run']) {
    const ran = await build(target)
    t.equal(ran.code, 0, target, { output: ran.output })
  }
  t.same(outputs(), before, 'every output as it was, to the millisecond')
})

t.test('a Lua script put back with its older modification time (cp -p, mv, rsync -a) is copied again: by bytes', async (t) => {
  const lua = 'lib/stores/scripts/one.lua'
  const copies = ['dist/stores/scripts/one.lua', 'build/lib/stores/scripts/one.lua']
  const original = read(lua)
  const { atime, mtime } = statSync(join(project, lua))
  put(lua, `${original}-- edited\n`)
  const edited = await build('test')
  t.equal(edited.code, 0, 'builds the edit', { output: edited.output })
  t.same(copies.filter((file) => read(file) !== `${original}-- edited\n`), [], 'the edit copied to dist/ and build/lib/')
  put(lua, original)
  utimesSync(join(project, lua), atime, mtime)
  const reverted = await build('test')
  t.equal(reverted.code, 0, 'builds the source put back', { output: reverted.output })
  t.same(copies.filter((file) => read(file) !== original), [], 'both copies are the source again, though it is older than they are')
})

t.test('run does not check types; what it wrote does not survive the next tsc build, though the source is back as tsc last saw it', async (t) => {
  const fromTsc = read('dist/index.js')
  const example = ['build/examples/example.js', 'build/examples/example.js.map']
  const exampleFromTsc = new Map(example.map((file) => [file, read(file)]))
  const edits = new Map([['lib/index.ts', 'export const edited = 1\n'], ['examples/example.ts', 'export const wrong: number = \'text\'\n']])
  const original = new Map([...edits.keys()].map((source) => [source, read(source)]))
  for (const [source, edit] of edits) put(source, `${original.get(source) ?? ''}${edit}`)
  const ran = await build('run')
  t.equal(ran.code, 0, 'run does not check types', { output: ran.output })
  t.match(read('dist/index.js'), /export const edited = 1/, 'run wrote the edit into dist/')
  t.match(read('build/examples/example.js'), /export const wrong = 'text'/, 'and the ill-typed one into build/')
  for (const source of edits.keys()) put(source, original.get(source) ?? '')
  const built = await build('dist')
  t.equal(built.code, 0, 'dist builds', { output: built.output })
  t.equal(read('dist/index.js'), fromTsc, 'dist/index.js is tsc\'s output of the source as it is, not run\'s of the edit')
  const builtTest = await build('test')
  t.equal(builtTest.code, 0, 'build:test builds', { output: builtTest.output })
  t.same(example.filter((file) => read(file) !== exampleFromTsc.get(file)), [], 'so is the example in build/, with its map')
})

t.test('a deleted or renamed source leaves no output behind; a new one is built', async (t) => {
  renameSync(join(project, 'lib/square.ts'), join(project, 'lib/quad.ts'))
  put('lib/index.ts', read('lib/index.ts').replace('./square.js', './quad.js'))
  renameSync(join(project, 'test/index.test.ts'), join(project, 'test/area.test.ts'))
  rmSync(join(project, 'lib/stores/scripts/one.lua'))
  put('lib/stores/scripts/two.lua', 'return 2\n')
  put('build/demo/chart.svg', '<svg/>')
  const ran = await build('test')
  t.equal(ran.code, 0, 'builds', { output: ran.output })
  const files = [...outputs().keys()]
  t.same(files.filter((file) => /square|index\.test|one\.lua/.test(file)), [], 'nothing of the old names in dist/ or build/')
  for (const file of ['dist/quad.js', 'dist/quad.d.ts', 'build/lib/quad.js', 'build/test/area.test.js', 'dist/stores/scripts/two.lua', 'build/lib/stores/scripts/two.lua']) {
    t.ok(files.includes(file), `${file} built`)
  }
  t.ok(files.includes('build/demo/chart.svg'), 'a file build/ holds that no compiler wrote stays')
  t.notOk(existsSync(join(project, 'dist/stores/scripts/one.lua')), 'the deleted Lua gone from dist/')
})

t.test('an output deleted by hand is built again, though the sources did not change', async (t) => {
  rmSync(join(project, 'dist/quad.d.ts'))
  rmSync(join(project, 'build/test/area.test.js'))
  const ran = await build('test')
  t.equal(ran.code, 0, 'builds', { output: ran.output })
  t.ok(existsSync(join(project, 'dist/quad.d.ts')), 'dist/quad.d.ts back')
  t.ok(existsSync(join(project, 'build/test/area.test.js')), 'build/test/area.test.js back')
})

t.test('the run target writes, byte for byte, what tsc writes', async (t) => {
  const wanted = ['dist/index.js', 'dist/quad.js', 'dist/types/shape.js', 'build/examples/example.js', 'build/examples/example.js.map',
    'build/demo/index.js', 'build/demo/index.js.map', 'build/test/redis-server.js', 'build/test/redis-server.js.map']
  const fromTsc = new Map(wanted.map((file) => [file, read(file)]))
  const testBuilt = statSync(join(project, 'build/test/area.test.js')).mtimeMs
  rmSync(join(project, 'dist'), { recursive: true })
  for (const file of wanted.filter((file) => file.startsWith('build/'))) rmSync(join(project, file))
  const ran = await build('run', '--verbose')
  t.equal(ran.code, 0, 'runs', { output: ran.output })
  t.match(ran.output, /Transpiled 6 file\(s\)/, 'lib/\'s three files and the three the examples and the demo need')
  t.same(wanted.filter((file) => read(file) !== fromTsc.get(file)), [], 'every file as tsc wrote it')
  t.equal(statSync(join(project, 'build/test/area.test.js')).mtimeMs, testBuilt, 'the tests are left to build:test')
})

t.test('build:test fails on a type error, naming it', async (t) => {
  put('examples/example.ts', read('examples/example.ts') + 'export const wrong: number = \'text\'\n')
  const failed = await build('test')
  t.not(failed.code, 0, 'fails')
  t.match(failed.output, /examples\/example\.ts.*TS2322/, 'naming it')
})

t.test('pack builds dist/ from nothing: a file of dist/ edited by hand, which tsc -b does not read, is tsc\'s again', async (t) => {
  const fromTsc = read('dist/index.js')
  put('dist/index.js', 'export const byHand = 1\n')
  const ran = await build('pack')
  t.equal(ran.code, 0, 'packs', { output: ran.output })
  t.equal(read('dist/index.js'), fromTsc)
  t.ok(existsSync(join(project, 'dist/.tsbuildinfo')) && existsSync(join(project, 'dist/stores/scripts/two.lua')), 'with its build state and the Lua')
})

t.test('the run target (no tsc) also prunes: a source deleted since the last build leaves nothing in dist/', async (t) => {
  t.ok(existsSync(join(project, 'dist/types/shape.js')), 'built before')
  rmSync(join(project, 'lib/types/shape.ts'))
  put('lib/quad.ts', 'export const square = { sides: 4 }\nexport class Box<T> { constructor (readonly value: T) {} }\n')
  put('lib/index.ts', "export { square, Box } from './quad.js'\nexport const area = (side: number): number => side ** 2\n")
  const ran = await build('run')
  t.equal(ran.code, 0, 'runs', { output: ran.output })
  t.same([...outputs().keys()].filter((file) => file.includes('shape')), [], 'no shape.js or shape.d.ts left')
  t.notOk(existsSync(join(project, 'dist/types')), 'nor its empty folder')
})

t.test('an unknown target prints the usage and fails', async (t) => {
  const ran = await build('everything')
  t.equal(ran.code, 1)
  t.match(ran.output, /^Usage: node scripts\/build\.js <dist\|test\|run\|pack>/)
})
