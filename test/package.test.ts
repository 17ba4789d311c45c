/**
 * The package as users get it: the tarball of `npm pack`, installed into an
 * empty project next to fastify and @fastify/jwt, then used from an ES module,
 * from CommonJS and from TypeScript (the user files are in test/fixtures/consumer/),
 * and its documents read there, every relative link resolving inside the package.
 * One pack and one install serve every check; the project is deleted afterwards.
 * Children (npm, node, the type-check) run without tap's coverage hook.
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { untracedEnv } from './child-env.js'
import { brokenLinks, links } from './docs/links.js'

// npm install and the type-checks, on a shared machine.
t.setTimeout(300_000)
// The tests below side by side: the ESM and CommonJS users' processes beside the type-check.
t.jobs = 3

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const FIXTURES = join(ROOT, 'test', 'fixtures', 'consumer')
const TYPE_CHECK = join(ROOT, 'build', 'test', 'type-check.js')

// The children run as in a user's shell: without tap's NODE_OPTIONS (coverage,
// loaders) and without the variables `npm test` sets for this package, which
// would point npm at this repository.
const ENV = Object.fromEntries(Object.entries(untracedEnv()).filter(([name]) =>
  !/^(npm_config_local_prefix|npm_package_.*|npm_lifecycle_.*)$/.test(name)))

interface Ran { code: number, stdout: string, stderr: string }

/** Runs a command to its end; never throws for a non-zero exit. */
function run (command: string, args: string[], cwd: string): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(command, args, { cwd, env: ENV, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, stdout, stderr })
    })
  })
}

/** The output of a command that must succeed for the checks to mean anything. */
async function must (command: string, args: string[], cwd: string): Promise<string> {
  const ran = await run(command, args, cwd)
  if (ran.code !== 0) throw new Error(`${command} ${args.join(' ')} exited with ${ran.code}\n${ran.stdout}\n${ran.stderr}`)
  return ran.stdout
}

const consumer = await mkdtemp(join(tmpdir(), 'tollgate-consumer-'))
const installed = join(consumer, 'node_modules', 'fastify-tollgate')
t.teardown(() => rm(consumer, { recursive: true, force: true }))

// dist/ is already built by `npm test`; --ignore-scripts keeps `prepack` from
// rebuilding it under the feet of the test files running beside this one.
const [packed] = JSON.parse(await must('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', consumer], ROOT)) as
  [{ filename: string, files: Array<{ path: string }> }]
const files = packed.files.map((file) => file.path)

const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }
const peer = (name: string) => `${name}@${pkg.devDependencies[name]}`
await writeFile(join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true }))
await cp(FIXTURES, consumer, { recursive: true })
// The versions this repository tests with, so the cache `npm ci` filled serves them.
await must('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', `./${packed.filename}`,
  peer('fastify'), peer('@fastify/jwt'), peer('@types/node'), peer('prom-client')], consumer)

/**
 * The files git tracks (as `git add` left them) under `folders`, that are in the working tree: what the tarball is
 * made of when it is built from a clean checkout. A file git does not know (a scratch module, a note) is not wanted.
 */
async function tracked (...folders: string[]): Promise<string[]> {
  const listed = await must('git', ['ls-files', '-z', '--', ...folders], ROOT)
  return listed.split('\0').filter((file) => file !== '' && existsSync(join(ROOT, file)))
}

t.test('the tarball holds what a user needs, and nothing from the repository\'s tooling (docs/decisions/0001-tarball-contents.md)', async (t) => {
  // From git, not from the folders: a file left untracked in lib/ (built into dist/) or docs/ must not ship unnoticed.
  const sources = (await tracked('lib')).map((file) => file.slice('lib/'.length))
  t.ok(sources.some((file) => file.endsWith('.lua')), 'lib/ has Lua scripts besides its TypeScript')
  const docs = (await tracked('docs', 'examples', 'demo')).filter((file) => /^(docs\/[^/]+\.md|examples\/[^/]+\.ts|demo\/[^/]+\.svg)$/.test(file))
  t.ok(['docs/', 'examples/', 'demo/'].every((folder) => docs.some((file) => file.startsWith(folder))),
    'docs/ has pages, examples/ its sources, demo/ its pictures')
  const wanted = ['package.json', 'LICENSE', 'README.md', 'CHANGELOG.md', 'MIGRATING.md', ...docs,
    ...sources.flatMap((file) => file.endsWith('.ts') ? [`dist/${file.replace(/\.ts$/, '.js')}`, `dist/${file.replace(/\.ts$/, '.d.ts')}`] : [`dist/${file}`])]
  t.same(wanted.filter((file) => !files.includes(file)), [],
    'no file missing: the license, the modules, their types, the Lua, the documents, the examples and pictures they link to')
  t.same(files.filter((file) => !wanted.includes(file)), [], 'no other file: none built from, or copied from, a file git does not track')
  t.same(files.filter((file) => /\.map$|\.tsbuildinfo$|^lib\/|^docs\/decisions\//.test(file)), [],
    'no source map, build state, lib/ source or decision record')
  t.same(files.filter((file) => /^(test|bench|build|scripts|coverage|\.tap|\.ci|node_modules)\/|^demo\/.*\.ts$/.test(file)), [],
    'nothing from test/, bench/, build/ or the tooling; of demo/ only its pictures')
})

t.test('no install script: npm 11 warns of one on every install ("install scripts not yet covered by allowScripts")', async (t) => {
  const manifest = JSON.parse(await readFile(join(consumer, 'node_modules', 'fastify-tollgate', 'package.json'), 'utf8')) as
    { scripts?: Record<string, string> }
  t.same(Object.keys(manifest.scripts ?? {}).filter((name) => /^(preinstall|install|postinstall|prepare)$/.test(name)), [])
})

t.test('the npm page: an install line, the repository, and links that name files of the repository or the package', async (t) => {
  const manifest = JSON.parse(await readFile(join(installed, 'package.json'), 'utf8')) as
    { repository?: { url?: string }, homepage?: string, bugs?: { url?: string } }
  const repo = manifest.repository?.url?.replace(/^git\+/, '').replace(/\.git$/, '') ?? ''
  t.match(repo, /^https:\/\/github\.com\/[^/]+\/[^/]+$/, 'package.json names its repository')
  t.ok(manifest.homepage?.startsWith(repo), 'a homepage in the repository')
  t.ok(manifest.bugs?.url?.startsWith(repo), 'an issue tracker in the repository')

  const readme = await readFile(join(installed, 'README.md'), 'utf8')
  t.match(readme, /^npm i fastify-tollgate\b/m, 'an install line')
  const targets = [...readme.matchAll(/\]\(([^)\s]+)\)|(?:src|href)="([^"]+)"/g)].map((match) => match[1] ?? match[2] ?? '')
  t.ok(targets.length > 0, 'the README has links')
  t.same(targets.filter((target) => /^[a-z]+:/.test(target) && !target.startsWith('https://')), [], 'absolute links are https')
  // Links into the repository, absolute (on main once pushed; here, in the working tree) or relative.
  const raw = repo.replace('https://github.com/', 'https://raw.githubusercontent.com/') + '/main/'
  const absolute = targets.flatMap((target) => [`${repo}/blob/main/`, `${repo}/tree/main/`, raw]
    .filter((prefix) => target.startsWith(prefix)).map((prefix) => target.slice(prefix.length)))
  const local = targets.filter((target) => !/^([a-z]+:|#)/.test(target))
  const paths = [...absolute, ...local].map((target) => target.replace(/#.*$/, '').replace(/\/$/, ''))
  t.ok(paths.length > 0, 'the README links into the repository')
  t.same(paths.filter((path) => !existsSync(join(ROOT, path))), [], 'every repository link names a file of the repository')
})

t.test('every relative link and #anchor of every shipped document resolves in the installed package (docs/decisions/0001)', async (t) => {
  const documents = files.filter((file) => file.endsWith('.md'))
  t.ok(['README.md', 'MIGRATING.md', 'CHANGELOG.md', 'docs/options.md'].every((file) => documents.includes(file)), documents.join(', '))
  let checked = 0
  for (const document of documents) {
    checked += links(await readFile(join(installed, document), 'utf8')).length
    t.same(brokenLinks(installed, document, { files }), [], `${document}: every relative link resolves`)
  }
  t.ok(checked > 50, `${checked} links found, the relative ones checked`)
})

t.test('ESM: the default export and the named stores, registered and limiting', async (t) => {
  const ran = await run(process.execPath, ['esm.mjs'], consumer)
  t.equal(ran.code, 0, 'exits 0', { stderr: ran.stderr })
  t.same(JSON.parse(ran.stdout), { statuses: [200, 200, 429], redisStore: 'function', counted: { allowed: 1, 'near-limit': 1, refused: 1 } },
    'a bucket of 2: the third request gets 429; fastify-tollgate/metrics counted the three')
  t.equal(ran.stderr, '', 'nothing on stderr')
})

t.test('CommonJS: require() passed straight to register, and a named store from require()', async (t) => {
  const ran = await run(process.execPath, ['cjs.cjs'], consumer)
  t.equal(ran.code, 0, 'exits 0', { stderr: ran.stderr })
  t.same(JSON.parse(ran.stdout), { statuses: [200, 200, 429], decorated: true, metrics: 'function' },
    'limiting, the decorator on the root instance (fastify-plugin honoured through the module namespace), and the metrics entry point')
  t.equal(ran.stderr, '', 'no warning (require of an ES module) on stderr')
})

t.test('TypeScript, strict, skipLibCheck off: usage, route config and wrong options as @ts-expect-error', async (t) => {
  const projects = [
    ['tsconfig.nodenext.json', 'module nodenext: an ES module user and a CommonJS user (.cts), in one program'],
    ['tsconfig.bundler.json', 'module esnext, moduleResolution bundler']
  ] as const
  // Both programs in one process (test/type-check.ts): the package's declarations and the user files are
  // checked, other packages' declarations only parsed.
  const out = await must(process.execPath, [TYPE_CHECK, 'fastify-tollgate', ...projects.map(([project]) => project)], consumer)
  const checked = JSON.parse(out) as Record<string, { declarations: string[], diagnostics: string[] }>
  for (const [project, what] of projects) {
    t.same(checked[project]?.diagnostics, [], what)
    const declarations = checked[project]?.declarations ?? []
    t.ok(['index', 'metrics'].every((entry) => declarations.includes(`node_modules/fastify-tollgate/dist/${entry}.d.ts`)),
      `${project}: the package's declarations checked (${declarations.length})`)
  }
})
