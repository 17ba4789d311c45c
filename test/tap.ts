/**
 * What `npm test` runs after the build: tap, whose 100% coverage rule on lib/
 * needs the Redis suites. Without redis-server on PATH outside CI they are
 * skipped, so coverage is reported but not enforced, and this says why.
 */
import { spawnSync } from 'node:child_process'
import { pathToFileURL } from 'node:url'
import { inCI, redisAvailable } from './redis-server.js'

/** tap's extra arguments: `--allow-incomplete-coverage` only when Redis is missing outside CI. */
export function coverageArgs (redis: boolean, ci: boolean): string[] {
  return redis || ci ? [] : ['--allow-incomplete-coverage']
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const extra = coverageArgs(redisAvailable, inCI)
  const { status } = spawnSync('tap', [...extra, ...process.argv.slice(2)], { stdio: 'inherit' })
  if (extra.length > 0) {
    process.stderr.write('\nCoverage NOT enforced: the Redis suites were skipped (no redis-server on PATH, CI not set).\n' +
      'Install redis-server (apt-get install redis-server) for the full run; in CI it is required.\n')
  }
  process.exit(status ?? 1)
}
