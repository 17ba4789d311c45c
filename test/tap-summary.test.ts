import { test } from 'tap'
import { shortDiagnostic, TapSummary } from './tap-summary.js'
import { plan, report, JOBS, QUICK } from './tap.js'

/** TAP as `tap --reporter=tap` prints it: a file with a failing assertion, a timed-out subtest, a skip; a file that passes. */
const TAP = `TAP version 14
1..2
# Subtest: build/test/a.test.js
    # Subtest: outer
        not ok 1 - one is two
          ---
          compare: ===
          at:
            fileName: test/a.test.ts
            lineNumber: 3
            columnNumber: 5
          stack: |
            Test.<anonymous> (test/a.test.ts:3:5)
          source: >
            t.equal(1, 2, 'one is two')
          diff: |
            -2
            +1
          ...
        
        ok 2 - fine
        ok 3 - later # SKIP not today
        1..3
    not ok 1 - outer # time=945.156ms
      ---
      at:
        fileName: test/a.test.ts
      ...
    
    # Subtest: times out
        1..0
    not ok 2 - times out # time=244.126ms
      ---
      expired: times out
      ...
    
    not ok 3 - times out # time=244.126ms
    1..3
    # time=2104.393ms
not ok 1 - build/test/a.test.js # time=2104.393ms
  ---
  exitCode: 1
  ...

# Subtest: build/test/b.test.js
    ok 1 - passes # time=1ms
    ok 2 - a todo # TODO later
    1..2
    # time=1.5s
ok 2 - build/test/b.test.js # time=1.5s

# { total: 5, pass: 2, fail: 2, skip: 1 }
# time=9886.108ms`

function read (text: string): TapSummary {
  const summary = new TapSummary()
  for (const line of text.split('\n')) summary.line(line)
  return summary
}

test('the TAP reader: failures with their path and diagnostic, once each; the files and their times; the counts', async (t) => {
  const summary = read(TAP)
  t.same(summary.failures.map((failure) => [failure.file, ...failure.path]), [
    ['build/test/a.test.js', 'outer', 'one is two'],
    ['build/test/a.test.js', 'times out']
  ], 'the assertion, and the subtest that failed without a failing assertion (reported twice by tap, once here); not their parents')
  t.same(summary.failures[0]?.diagnostic.slice(0, 2), ['compare: ===', 'at:'])
  t.same(summary.failures[1]?.diagnostic, ['expired: times out'])
  t.same(summary.files, [{ file: 'build/test/a.test.js', ok: false, ms: 2104.393 }, { file: 'build/test/b.test.js', ok: true, ms: 1500 }])
  t.same(summary.counts, { pass: 2, fail: 2, skip: 1, todo: 1 }, 'assertions, not subtests (the second line of the timeout counts)')
  t.same(summary.totals, { total: 5, pass: 2, fail: 2, skip: 1 }, "tap's own count")
  t.equal(read('Bail out! # no Redis').bailedOut, 'Bail out! # no Redis')
})

test('a file tap timed out: a failure of that file, counted once', async (t) => {
  const killed = read(`1..2
# Subtest: build/test/slow.test.js
    ok 1 - fine
not ok 1 - build/test/slow.test.js # time=120000ms
  ---
  signal: SIGKILL
  ...

not ok 2 - timeout!
  ---
  expired: build/test/slow.test.js
  ...
`)
  t.same(killed.files.map((file) => [file.file, file.ok]), [['build/test/slow.test.js', false]])
  t.same(killed.failures.map((failure) => [failure.file, ...failure.path]), [['build/test/slow.test.js'], ['build/test/slow.test.js', 'timeout!']])
})

test('a diagnostic in the summary: no stack nor source, `at` on one line, at most so many lines', async (t) => {
  const [failure] = read(TAP).failures
  t.same(shortDiagnostic(failure?.diagnostic ?? []), ['compare: ===', 'diff: |', '  -2', '  +1', 'at: test/a.test.ts:3'])
  t.same(shortDiagnostic(['a: 1', 'b: 2', 'c: 3'], 2), ['a: 1', 'b: 2', '… 1 more lines in the TAP file'])
})

test('the tap command line: jobs, coverage enforced unless Redis is missing outside CI; --quick', async (t) => {
  t.same(plan([], true, false), { quick: false, args: ['--reporter=tap', `--jobs=${JOBS}`, '--coverage-report=json-summary'], coverage: 'enforced' })
  t.same(plan([], false, false).coverage, 'not enforced')
  t.ok(plan([], false, false).args.includes('--allow-incomplete-coverage'))
  t.same(plan([], false, true).coverage, 'enforced', 'CI without Redis: enforced (and the Redis suites fail)')
  t.same(plan(['--jobs=2', 'build/test/x.test.js'], true, false).args, ['--reporter=tap', '--coverage-report=json-summary', '--jobs=2', 'build/test/x.test.js'], 'arguments go to tap')
  const quick = plan(['--quick'], true, true)
  t.same([quick.quick, quick.coverage], [true, 'off'])
  t.same(quick.args, ['--reporter=tap', `--jobs=${JOBS}`, '--disable-coverage', ...QUICK])
  t.same(plan(['--quick', 'build/test/layers/app.test.js'], true, true).args.slice(-1), ['build/test/layers/app.test.js'], 'quick, on the files given')
})

test('the summary: failures first, then the totals; failed on a failure, on a non-zero exit, on coverage below 100%', async (t) => {
  const enforced = plan([], true, true)
  const run = { code: 0, ms: 182_400, plan: enforced, coverage: { full: true, text: '100% of lib/' }, stderrLines: 0 }
  const failed = report(read(TAP), { ...run, code: 1 })
  t.equal(failed.ok, false)
  const text = failed.lines.join('\n')
  t.match(text, /FAILED build\/test\/a\.test\.js\n {2}✗ outer › one is two\n {6}compare: ===/)
  t.match(text, / {6}at: test\/a\.test\.ts:3\n/)
  t.ok(text.indexOf('✗ outer') < text.indexOf('Files:'), 'failures before the totals')
  t.match(text, /Files: {4}2 \(1 passed, 1 failed\); slowest: a\.test\.js 2\.1 s, b\.test\.js 1\.5 s/)
  t.match(text, /Asserts: {2}5 \(2 pass, 2 fail, 1 skip, 0 todo\)/)
  t.match(text, /Duration: 182\.4 s/)
  t.match(text, /TAP: {6}test-results\/tap\.txt/)

  const passing = read(TAP.split('\n').slice(TAP.split('\n').indexOf('# Subtest: build/test/b.test.js')).join('\n'))
  t.equal(report(passing, run).ok, true)
  t.match(report(passing, run).lines.join('\n'), /npm test: PASSED[^]*Coverage: 100% of lib\//)
  t.equal(report(passing, { ...run, code: 1 }).ok, false, 'tap exited non-zero')
  const below = report(passing, { ...run, coverage: { full: false, text: 'BELOW 100%: lines 99.5%' } })
  t.equal(below.ok, false, 'coverage below 100%')
  t.match(below.lines.join('\n'), /Coverage: BELOW 100%: lines 99\.5%/)
  t.equal(report(passing, { ...run, coverage: undefined }).ok, false, 'no coverage report')
  const relaxed = plan([], false, false)
  t.equal(report(passing, { ...run, plan: relaxed, coverage: { full: false, text: 'BELOW 100%' } }).ok, true, 'not enforced without Redis outside CI')
  t.match(report(passing, { ...run, plan: relaxed, coverage: { full: false, text: 'BELOW 100%' } }).lines.join('\n'), /NOT enforced/)
})
