import { test } from 'tap'
import { coverageArgs } from './tap.js'

test('npm test relaxes the coverage rule only when Redis is missing outside CI', async (t) => {
  t.same(coverageArgs(false, false), ['--allow-incomplete-coverage'])
  t.same(coverageArgs(false, true), [], 'CI without Redis: coverage still enforced (and the Redis suites fail)')
  t.same(coverageArgs(true, false), [])
  t.same(coverageArgs(true, true), [])
})
