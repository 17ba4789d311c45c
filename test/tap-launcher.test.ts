import { test } from 'tap'
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { aloneFiles, ALONE, coverageArgs, plan, sumTotals } from './tap.js'
import { COVERAGE_SUMMARY, hasCode, modulesWithCode, readCoverage } from './tap-coverage.js'

test('npm test relaxes the coverage rule only when Redis is missing outside CI', async (t) => {
  t.same(coverageArgs(false, false), ['--allow-incomplete-coverage'])
  t.same(coverageArgs(false, true), [], 'CI without Redis: coverage still enforced (and the Redis suites fail)')
  t.same(coverageArgs(true, false), [])
  t.same(coverageArgs(true, true), [])
})

test('coverage: a module of lib/ with code that tap\'s report does not name (no test imports it) is below 100%', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tollgate-coverage-'))
  t.teardown(() => { rmSync(root, { recursive: true, force: true }) })
  const put = (path: string, text: string): void => {
    mkdirSync(dirname(join(root, path)), { recursive: true })
    writeFileSync(join(root, path), text)
  }
  for (const file of ['lib/index.ts', 'lib/types/shape.ts', 'lib/unused.ts', 'lib/globals.d.ts']) put(file, '')
  put('build/lib/index.js', 'export const area = (side) => side ** 2;\n//# sourceMappingURL=index.js.map\n')
  put('build/lib/types/shape.js', '/**\n * Types only.\n */\nexport {};\n//# sourceMappingURL=shape.js.map\n')
  put('build/lib/unused.js', '// Imported by no test.\nexport const unused = 1;\n')
  const full = { lines: { pct: 100 }, statements: { pct: 100 }, functions: { pct: 100 }, branches: { pct: 100 } }
  const summary = (...files: string[]): void => {
    put(COVERAGE_SUMMARY, JSON.stringify(Object.fromEntries([['total', full], ...files.map((file) => [join(realpathSync(root), file), full])])))
  }

  t.same(modulesWithCode(root), ['lib/index.ts', 'lib/unused.ts'], 'not the types-only module (its JavaScript is `export {};`), nor a .d.ts')
  summary('lib/index.ts')
  t.same(readCoverage(root), { full: false, text: 'BELOW 100%: not in the report, no test imports them: lib/unused.ts' })
  summary('lib/index.ts', 'lib/unused.ts')
  t.same(readCoverage(root), { full: true, text: '100% of lib/ (statements, branches, functions, lines)' }, 'every module with code in the report')
  put(COVERAGE_SUMMARY, JSON.stringify({ total: { ...full, branches: { pct: 99.5 } } }))
  t.same(readCoverage(root)?.text, 'BELOW 100%: branches 99.5%; not in the report, no test imports them: lib/index.ts, lib/unused.ts')
  rmSync(join(root, 'build/lib/unused.js'))
  t.same(modulesWithCode(root), ['lib/index.ts', 'lib/unused.ts'], 'a module not built counts as one with code')
  t.same([hasCode('export {};\n'), hasCode('"use strict";\nexport {};\n'), hasCode('/* a */ export {}; // b\n')], [false, true, false])
})

test('a full run leaves ALONE\'s files to a run of their own; a run of named files or --quick does not', async (t) => {
  t.same(aloneFiles(plan([], true, true)), ALONE)
  t.same(aloneFiles(plan(['--jobs=2'], true, true)), ALONE)
  t.same(aloneFiles(plan(['build/test/engine'], true, true)), [])
  t.same(aloneFiles(plan(['--quick'], true, true)), [])
  t.same(sumTotals({ total: 3, pass: 2, fail: 1 }, { total: 2, pass: 2 }), { total: 5, pass: 4, fail: 1 })
  t.same(sumTotals(undefined, { total: 2 }), { total: 2 })
  t.same(sumTotals({ total: 2 }, undefined), { total: 2 })
})
