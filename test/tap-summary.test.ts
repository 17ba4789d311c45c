import { test } from 'tap'
import { crashLines, shortDiagnostic, TapSummary } from './tap-summary.js'
import { REDIS_SKIPPED } from './redis-server.js'
import { listedFiles, plan, report, JOBS, NO_TEST_RAN, QUICK } from './tap.js'

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
  t.same(summary.files, [
    { file: 'build/test/a.test.js', ok: false, ms: 2104.393, passed: 1, skipped: ['later'] },
    { file: 'build/test/b.test.js', ok: true, ms: 1500, passed: 1, skipped: [] }
  ], 'each file: its passing assertions (not its todos) and its skips')
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
  t.same(plan([], true, false), {
    quick: false, args: ['--reporter=tap', `--jobs=${JOBS}`, '--coverage-report=json-summary'], coverage: 'enforced', redis: 'run'
  })
  t.same([plan([], false, false).coverage, plan([], false, false).redis], ['not enforced', 'skipped'])
  t.same([plan([], false, true).redis, plan(['--disable-coverage'], true, false).redis, plan(['--quick'], true, false).redis], ['run', 'run', 'skipped'],
    'the Redis suites run in CI, with redis-server, and not in test:quick')
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
  const run = { code: 0, ms: 182_400, plan: enforced, coverage: { full: true, text: '100% of lib/' }, stderr: [], expected: ['build/test/b.test.js'] }
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

/** What tap prints for a file that dies before its first test (here a syntax error), and Node's report on stderr. */
const DIED = `TAP version 14
1..2
# Subtest: build/test/broken.test.js
    1..0 # no tests found
not ok 1 - build/test/broken.test.js # time=1111.934ms
  ---
  stdio: inherit
  cwd: /work/repo
  exitCode: 1
  signal: null
  ...

# Subtest: build/test/b.test.js
    ok 1 - passes # time=1ms
    1..1
ok 2 - build/test/b.test.js # time=1.5s
`
/** The tests' stderr: a warning of another file, the syntax error, and another file's uncaught error in between. */
const STDERR = `(node:123) Warning: something else
file:///work/repo/build/test/broken.test.js:2
t.pass('x'
       ^^^

(node:456) ExperimentalWarning: another file's
SyntaxError: missing ) after argument list
    at compileSourceTextModule (node:internal/modules/esm/utils:346:16)

Node.js v20.20.2
Error: boom before tap
    at load (file:///work/repo/dist/store.js:10:9)
    at file:///work/repo/test/layers/thrown.test.ts:12:3

Node.js v20.20.2`.split('\n')

test('a file that died: its error and where, from the tests\' stderr, under its failure', async (t) => {
  const run = { code: 1, ms: 1000, plan: plan([], true, true), coverage: { full: true, text: '100%' }, stderr: STDERR, expected: [] }
  const text = report(read(DIED), run).lines.join('\n')
  t.match(text, /FAILED build\/test\/broken\.test\.js\n {2}✗ \(the file itself\)\n( {6}.*\n)*? {6}SyntaxError: missing \) after argument list\n {6}at build\/test\/broken\.test\.js:2\n/)
  t.match(text, /Files: {4}2 \(1 passed, 1 failed\)/)
  t.same(crashLines(STDERR, 'build/test/layers/thrown.test.js'), ['Error: boom before tap', 'at test/layers/thrown.test.ts:12'],
    'a source-mapped stack: the .ts line, the error above it')
  t.same(crashLines(STDERR, 'build/test/quiet.test.js'), [], 'nothing for a file stderr does not name')
  t.same(crashLines(['Error [ERR_MODULE_NOT_FOUND]: Cannot find module \'/x.js\' imported from /r/build/test/c.test.js'], 'build/test/c.test.js'),
    ['Error [ERR_MODULE_NOT_FOUND]: Cannot find module \'/x.js\' imported from /r/build/test/c.test.js'], 'the error line naming the file')
})

test('a listed file with no result in the TAP counts as failed', async (t) => {
  const passing = read(DIED.slice(DIED.indexOf('# Subtest: build/test/b.test.js')))
  const run = { code: 0, ms: 1000, plan: plan([], true, true), coverage: { full: true, text: '100%' }, stderr: STDERR }
  t.equal(report(passing, { ...run, expected: ['build/test/b.test.js'] }).ok, true)
  const missed = report(passing, { ...run, expected: ['build/test/b.test.js', 'build/test/broken.test.js', 'build/test/gone.test.js'] })
  t.equal(missed.ok, false, 'failed, though tap exited with 0')
  const text = missed.lines.join('\n')
  t.match(text, /Files: {4}3 \(1 passed, 2 failed\)/)
  t.match(text, /FAILED build\/test\/gone\.test\.js\n {2}✗ \(the file itself\)\n {6}never ran: no result from it in the TAP\n/)
  t.match(text, /FAILED build\/test\/broken\.test\.js\n[^]*? {6}SyntaxError: missing \) after argument list/, 'with its error, if stderr has one')
})

test('the files a run lists: the .js files and folders given, or all of build/test/', async (t) => {
  const listed = listedFiles(['--reporter=tap', '--jobs=2', './build/test/engine/', 'build/test/nope.test.js'])
  t.ok(listed.includes('build/test/nope.test.js'), 'a listed file that does not exist')
  t.ok(listed.length > 1 && listed.every((file) => file === 'build/test/nope.test.js' || /^build\/test\/engine\/.+\.test\.js$/.test(file)), 'the folder\'s test files')
  t.ok(listedFiles(['--reporter=tap']).includes('build/test/tap-summary.test.js'), 'every file, this one among them')
})

/** What tap prints for files in which no assertion passed (real output of tap 21), and for one that passes. */
const NO_TEST = `TAP version 14
1..7
# Subtest: build/test/empty.test.js
    1..0 # no tests found
ok 1 - build/test/empty.test.js # SKIP no tests found

# Subtest: build/test/empty-subtest.test.js
    # Subtest: sub
        1..0
    ok 1 - sub # time=3.533ms
    
    1..1
    # time=28.053ms
ok 2 - build/test/empty-subtest.test.js # time=28.053ms

# Subtest: build/test/only-skip.test.js
    ok 1 - later # SKIP
    1..1
    # time=28.885ms
ok 3 - build/test/only-skip.test.js # time=28.885ms

# Subtest: build/test/plan0.test.js
    1..0
    # time=32.005ms
ok 4 - build/test/plan0.test.js # SKIP no tests found

# Subtest: build/test/todo.test.js
    ok 1 - later # TODO
    1..1
    # time=6.88ms
ok 5 - build/test/todo.test.js # time=6.88ms

# Subtest: build/test/redis.test.js
    ok 1 - ${REDIS_SKIPPED}: redis-server is not on PATH # SKIP
    1..1
    # time=6.519ms
ok 6 - build/test/redis.test.js # time=6.519ms

# Subtest: build/test/good.test.js
    ok 1 - passes
    1..1
ok 7 - build/test/good.test.js # time=22.505ms
`

test('a file in which no assertion passed counts as failed: "no test ran"', async (t) => {
  const expected = read(NO_TEST).files.map((file) => file.file)
  const run = { code: 0, ms: 1000, plan: plan([], true, true), coverage: { full: true, text: '100%' }, stderr: [], expected }
  const strict = report(read(NO_TEST), run)
  t.equal(strict.ok, false, 'failed, though tap passed every file and exited with 0')
  const text = strict.lines.join('\n')
  t.match(text, /Files: {4}7 \(1 passed, 6 failed\)/, 'an empty file, an empty subtest, a skip, a plan of 0, a todo, and the Redis skip with Redis')
  for (const name of ['empty', 'empty-subtest', 'only-skip', 'plan0', 'todo', 'redis']) {
    t.ok(text.includes(`FAILED build/test/${name}.test.js\n  ✗ (the file itself)\n      ${NO_TEST_RAN}\n`), name)
  }
  t.match(text, /only-skip\.test\.js\n.*\n.*\n {6}skipped: later\n/, 'with what it skipped')
  t.notOk(text.includes('FAILED build/test/good.test.js'))

  const relaxed = report(read(NO_TEST), { ...run, plan: plan([], false, false) })
  t.match(relaxed.lines.join('\n'), /Files: {4}7 \(2 passed, 5 failed\)/, 'without Redis outside CI, the Redis suites\' skip passes; the others still fail')
  t.notOk(relaxed.lines.join('\n').includes('FAILED build/test/redis.test.js'))
})
