/**
 * The build behind the npm scripts: `node scripts/build.js <dist|test|run|pack> … [--verbose]`
 *
 *   dist  `npm run build`: tsconfig.build.json, lib/ → dist/ (.js, .d.ts), plus lib/'s Lua scripts
 *   pack  prepack (npm pack, npm publish): dist from nothing, dist/ deleted first
 *   test  `npm run build:test`: dist, then tsconfig.json, lib/ test/ examples/ demo/ → build/ (.js, .js.map), Lua in build/lib/
 *   run   start, example, demo, bench: the JavaScript of dist/ and of build/'s examples/, demo/ and
 *         test/redis-server.ts only, without type-checking (lint and build:test check types)
 *
 * dist and test use TypeScript's build mode (`tsc -b`) with a .tsbuildinfo inside the output
 * folder: with nothing changed a run compares timestamps, and deleting dist/ or build/ starts
 * over. run transpiles each source whose output is missing or older, file by file, with the
 * options of the project that owns the output, so it writes the bytes tsc writes for that
 * source as it is now. tsc -b re-emits only the sources whose content differs from what its
 * .tsbuildinfo recorded: a source edited, transpiled by run, then put back as it was would keep
 * run's output of the edit (and npm pack would ship it). So before run writes into a project's
 * output it deletes that project's .tsbuildinfo, and the project's next tsc build is a full one
 * that rewrites every output: nothing run wrote survives it. A run that writes nothing (the
 * outputs newer than their sources) leaves the .tsbuildinfo, and the next build incremental.
 *
 * pack deletes dist/ and builds it in full (about 5 s of CPU, against 3 s for an incremental
 * build after an edit): the tarball holds what tsc writes from the sources as they are, whatever
 * else touched dist/ before (tsc -b never reads its outputs: a file edited by hand would stay).
 *
 * Every run first deletes what no source produces any more, in dist/ every such file, in
 * build/ the compiled and copied kinds (other files there, such as the demo's SVGs, stay):
 * a deleted or renamed source leaves no stale module in the tarball and no stale test for
 * tap. A tsc project one of whose outputs is missing is built in full.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, rmdirSync, statSync, writeFileSync } from 'node:fs'
import { basename, dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'

// The arguments first: a usage error costs no TypeScript.
const TARGETS = ['dist', 'test', 'run', 'pack']
const args = process.argv.slice(2)
const verbose = args.includes('--verbose')
const targets = args.filter((arg) => arg !== '--verbose')
if (targets.length === 0 || targets.some((target) => !TARGETS.includes(target))) {
  process.stderr.write(`Usage: node scripts/build.js <${TARGETS.join('|')}> … [--verbose]\n`)
  process.exit(1)
}

// require(), not import: importing TypeScript's 9 MB CommonJS file from an ES module makes
// Node scan it for named exports first, about a second of CPU.
const ts = createRequire(import.meta.url)('typescript')

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const LIB = join(ROOT, 'lib')
const DIST = join(ROOT, 'dist')
const BUILD = join(ROOT, 'build')

/**
 * lib/'s files that are not TypeScript and that the package needs beside its modules: the Lua scripts
 * redisStore() reads. Only these are copied: a note, an editor's backup or any other file left in lib/
 * would otherwise land in dist/, and `files` ships all of dist/.
 */
const ASSET = /\.lua$/

/** The two tsc projects, and where each copies lib/'s assets (`ASSET`). */
const PROJECTS = {
  dist: { config: 'tsconfig.build.json', assets: DIST },
  test: { config: 'tsconfig.json', assets: join(BUILD, 'lib') }
}
/** What `run` transpiles: every source of dist, and these of test (what examples and the demo import). */
const RUN_SOURCES = [join(ROOT, 'examples') + '/', join(ROOT, 'demo') + '/', join(ROOT, 'test', 'redis-server.ts')]

const report = ts.createDiagnosticReporter(ts.sys, process.stdout.isTTY)

/** Files under `dir`, as absolute paths; none when it does not exist. */
function filesUnder (dir) {
  if (!existsSync(dir)) return []
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile()).map((entry) => join(entry.parentPath, entry.name))
}

/** Removes the empty folders under `dir`, deepest first, keeping `dir`. */
function removeEmptyFolders (dir) {
  if (!existsSync(dir)) return
  const folders = readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isDirectory()).map((entry) => join(entry.parentPath, entry.name))
    .sort((a, b) => b.length - a.length)
  for (const folder of folders) if (readdirSync(folder).length === 0) rmdirSync(folder)
}

/** A tsconfig, parsed (its sources found), or the process exits with its diagnostics. */
function parse (config) {
  const parsed = ts.getParsedCommandLineOfConfigFile(join(ROOT, config), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) => { report(diagnostic); process.exit(1) }
  })
  if (parsed === undefined || parsed.errors.length > 0) {
    for (const diagnostic of parsed?.errors ?? []) report(diagnostic)
    process.exit(1)
  }
  return parsed
}

/** Each project: its parsed config, .tsbuildinfo, sources with their outputs, and asset copies as [from, to]. */
function describe () {
  const assets = filesUnder(LIB).filter((file) => ASSET.test(file))
  return Object.fromEntries(Object.entries(PROJECTS).map(([name, project]) => {
    const parsed = parse(project.config)
    const outputs = new Map(parsed.fileNames.map((file) =>
      [file, ts.getOutputFileNames(parsed, file, !ts.sys.useCaseSensitiveFileNames)]))
    const copies = assets.map((from) => [from, join(project.assets, relative(LIB, from))])
    return [name, { parsed, buildInfo: resolve(ROOT, parsed.options.tsBuildInfoFile ?? ''), outputs, copies }]
  }))
}

/** Deletes what no source produces (see the header); returns the deleted files. */
function prune (projects) {
  const known = new Set(Object.values(projects).flatMap((project) =>
    [project.buildInfo, ...[...project.outputs.values()].flat(), ...project.copies.map(([, to]) => to)]))
  const compiled = (file) => /\.(js|mjs|cjs|map|d\.ts|tsbuildinfo)$/.test(file) || file.startsWith(join(BUILD, 'lib') + '/')
  const stale = [...filesUnder(DIST), ...filesUnder(BUILD).filter(compiled)].filter((file) => !known.has(file))
  for (const file of stale) rmSync(file)
  removeEmptyFolders(DIST)
  removeEmptyFolders(BUILD)
  return stale
}

/**
 * Copies lib/'s assets where the copy is missing or its bytes differ from the source's. Not by modification
 * time: an edit put back with its older time (`cp -p`, `mv`, `rsync -a`, an editor's backup) would stay in
 * the copy. The scripts are a few kB: reading both costs nothing, and an equal copy is left as it is.
 */
function copyAssets (project) {
  for (const [from, to] of project.copies) {
    const bytes = readFileSync(from)
    if (existsSync(to) && readFileSync(to).equals(bytes)) continue
    mkdirSync(dirname(to), { recursive: true })
    writeFileSync(to, bytes)
  }
}

/** `tsc -b` over the projects, in order; false on errors. */
function compile (names, projects, verbose) {
  // A project one of whose outputs is missing (deleted by hand) builds in full.
  for (const name of names) {
    const { buildInfo, outputs } = projects[name]
    if ([...outputs.values()].flat().some((file) => !existsSync(file))) rmSync(buildInfo, { force: true })
  }
  const host = ts.createSolutionBuilderHost(ts.sys, undefined, report, ts.createBuilderStatusReporter(ts.sys, process.stdout.isTTY))
  const status = ts.createSolutionBuilder(host, names.map((name) => join(ROOT, PROJECTS[name].config)), { verbose }).build()
  return status === ts.ExitStatus.Success
}

/** Transpiles `source` to its JavaScript `js` (and source map beside it), as `parsed`'s tsc would write them. */
function transpile (source, js, parsed) {
  // The module kind tsc picks for a .ts file of this "type": "module" package under NodeNext.
  const compilerOptions = { ...parsed.options, module: ts.ModuleKind.ES2022 }
  const { outputText, sourceMapText } = ts.transpileModule(readFileSync(source, 'utf8'), { compilerOptions, fileName: source })
  mkdirSync(dirname(js), { recursive: true })
  writeFileSync(js, outputText)
  if (sourceMapText === undefined) return
  const map = JSON.parse(sourceMapText)
  writeFileSync(`${js}.map`, JSON.stringify({ ...map, file: basename(js), sources: [relative(dirname(js), source)] }))
}

/**
 * The `run` target: transpiles the sources whose JavaScript is missing or older; returns how many.
 * Before its first write into a project's output it deletes the project's .tsbuildinfo (see the header).
 */
function transpileChanged (projects) {
  const wanted = [
    ...[...projects.dist.outputs].map(([source, outputs]) => [source, outputs, projects.dist]),
    ...[...projects.test.outputs].filter(([source]) => RUN_SOURCES.some((prefix) => source.startsWith(prefix)))
      .map(([source, outputs]) => [source, outputs, projects.test])
  ]
  let count = 0
  for (const [source, outputs, project] of wanted) {
    // A declaration file (no JavaScript) and an output newer than its source are left alone.
    const js = outputs.find((file) => file.endsWith('.js'))
    if (js === undefined || (existsSync(js) && statSync(js).mtimeMs >= statSync(source).mtimeMs)) continue
    rmSync(project.buildInfo, { force: true })
    transpile(source, js, project.parsed)
    count++
  }
  return count
}

// pack starts dist/ from nothing: the tarball never holds a file a previous build left.
if (targets.includes('pack')) rmSync(DIST, { recursive: true, force: true })
const projects = describe()
const stale = prune(projects)
if (verbose && stale.length > 0) process.stdout.write(`Deleted (no source): ${stale.map((file) => relative(ROOT, file)).join(', ')}\n`)

const tsc = ['dist', 'test'].filter((name) => targets.includes(name) || (name === 'dist' && (targets.includes('test') || targets.includes('pack'))))
if (tsc.length > 0 && !compile(tsc, projects, verbose)) process.exit(1)
for (const name of tsc) copyAssets(projects[name])
if (targets.includes('run')) {
  const count = transpileChanged(projects)
  copyAssets(projects.dist)
  if (verbose) process.stdout.write(`Transpiled ${count} file(s) without type-checking.\n`)
}
