/**
 * Options are documented from one source: the option tables of docs/options.md
 * list exactly the option rows of lib/config/rows.ts, which the checks derive
 * their key lists from.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { LIMITER_OPTIONS, MEMORY_STORE_OPTIONS, PLUGIN_OPTIONS, REDIS_STORE_OPTIONS, ROUTE_OPTIONS, type OptionRow } from '../../lib/config/rows.js'

const OPTIONS = readFileSync(new URL('../../../docs/options.md', import.meta.url), 'utf8')

/** The text of the section under `heading` (up to the next heading of its level or higher). */
function section (heading: string): string {
  const start = OPTIONS.indexOf(`\n${heading}\n`)
  if (start === -1) throw new Error(`no section ${heading} in docs/options.md`)
  const level = /^#+/.exec(heading)?.[0].length ?? 2
  const rest = OPTIONS.slice(start + heading.length + 2)
  const end = rest.search(new RegExp(`\\n#{1,${level}} `))
  return end === -1 ? rest : rest.slice(0, end)
}

/** The first column of a table's rows (`| \`edge.capacity\` | …`), without the header. */
function tableNames (text: string): string[] {
  return [...text.matchAll(/^\| `([^`]+)` \|/gm)].map((match) => match[1] as string)
}

const names = (rows: readonly OptionRow[]): string[] => rows.map((row) => row.name).sort()

t.test('the plugin options table lists every option row, and no other', async (t) => {
  t.same(tableNames(section('## Plugin options')).sort(), names(PLUGIN_OPTIONS))
})

t.test('the memoryStore table lists every memoryStore option', async (t) => {
  t.same(tableNames(section('## `memoryStore(options)`')).sort(), names(MEMORY_STORE_OPTIONS))
})

t.test('the redisStore table lists every redisStore option', async (t) => {
  t.same(tableNames(section('## `redisStore(options)`')).sort(), names(REDIS_STORE_OPTIONS))
})

t.test('the limiter table lists every `fastify.tollgate.limiter` option', async (t) => {
  t.same(tableNames(section('## `fastify.tollgate.limiter(options)`')).sort(), names(LIMITER_OPTIONS))
})

t.test('the route options table lists every `rateLimit` option', async (t) => {
  t.same(tableNames(section('## Route options: `config.rateLimit`')).sort(), names(ROUTE_OPTIONS))
})

t.test('every row has a type, a default and a doc line', async (t) => {
  for (const row of [...PLUGIN_OPTIONS, ...ROUTE_OPTIONS, ...LIMITER_OPTIONS, ...MEMORY_STORE_OPTIONS, ...REDIS_STORE_OPTIONS]) {
    t.ok(row.type !== '' && row.default !== '' && row.doc !== '', row.name)
  }
})

t.test('docs/routes.md explains every `rateLimit` option', async (t) => {
  const routes = readFileSync(new URL('../../../docs/routes.md', import.meta.url), 'utf8')
  const start = routes.indexOf('\n## Route config: costs, quotas, exemptions\n')
  t.not(start, -1, 'a section on route config')
  const text = routes.slice(start, routes.indexOf('\n## ', start + 1))
  for (const row of ROUTE_OPTIONS) t.match(text, new RegExp(`^- \`${row.name}\``, 'm'), row.name)
})
