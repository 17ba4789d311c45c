/**
 * Options are documented from one source: the README's option tables list
 * exactly the option rows of lib/config/rows.ts, which the checks derive their
 * key lists from.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { LIMITER_OPTIONS, MEMORY_STORE_OPTIONS, PLUGIN_OPTIONS, REDIS_STORE_OPTIONS, ROUTE_OPTIONS, type OptionRow } from '../../lib/config/rows.js'

const README = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8')

/** The text of the README section under `heading` (up to the next heading of its level or higher). */
function section (heading: string): string {
  const start = README.indexOf(`\n${heading}\n`)
  if (start === -1) throw new Error(`no section ${heading}`)
  const level = /^#+/.exec(heading)?.[0].length ?? 2
  const rest = README.slice(start + heading.length + 2)
  const end = rest.search(new RegExp(`\\n#{1,${level}} `))
  return end === -1 ? rest : rest.slice(0, end)
}

/** The first column of a table's rows (`| \`edge.capacity\` | …`), without the header. */
function tableNames (text: string): string[] {
  return [...text.matchAll(/^\| `([^`]+)` \|/gm)].map((match) => match[1] as string)
}

const names = (rows: readonly OptionRow[]): string[] => rows.map((row) => row.name).sort()

t.test('the plugin options table lists every option row, and no other', async (t) => {
  t.same(tableNames(section('## Options').split('\n### ')[0] as string).sort(), names(PLUGIN_OPTIONS))
})

t.test('the memoryStore table lists every memoryStore option', async (t) => {
  t.same(tableNames(section('### `memoryStore(options)`')).sort(), names(MEMORY_STORE_OPTIONS))
})

t.test('the redisStore table lists every redisStore option', async (t) => {
  t.same(tableNames(section('## One quota across replicas: `redisStore()`').split('\n### ')[0] as string).sort(), names(REDIS_STORE_OPTIONS))
})

t.test('the limiter table lists every `fastify.tollgate.limiter` option', async (t) => {
  t.same(tableNames(section('### A limiter as a hook')).sort(), names(LIMITER_OPTIONS))
})

t.test('the route options section names every `rateLimit` option', async (t) => {
  const text = section('## Route options')
  for (const row of ROUTE_OPTIONS) t.match(text, new RegExp(`^- \`${row.name}\``, 'm'), row.name)
})

t.test('every row has a type, a default and a doc line', async (t) => {
  for (const row of [...PLUGIN_OPTIONS, ...ROUTE_OPTIONS, ...LIMITER_OPTIONS, ...MEMORY_STORE_OPTIONS, ...REDIS_STORE_OPTIONS]) {
    t.ok(row.type !== '' && row.default !== '' && row.doc !== '', row.name)
  }
})
