/** ARCHITECTURE.md names every file of lib/: a file added without its place on the map fails here. */
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { basename } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../../../', import.meta.url))
const MAP = readFileSync(`${ROOT}ARCHITECTURE.md`, 'utf8')

t.test('every file of lib/ is named in ARCHITECTURE.md', async (t) => {
  const files = readdirSync(`${ROOT}lib`, { recursive: true }).map(String).filter((file) => /\.(ts|lua)$/.test(file))
  t.ok(files.length > 50, 'lib/ is read')
  const missing = files.filter((file) => !MAP.includes(basename(file)))
  t.same(missing, [], 'files missing from the map')
})
