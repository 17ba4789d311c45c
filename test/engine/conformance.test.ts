import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { CONFORMANCE_FILE } from '../helpers.js'

// The team's workspace copy, next to the repository; a clone elsewhere has none.
const workspaceCopy = fileURLToPath(new URL('../../../../shared/conformance/token-bucket.json', import.meta.url))

t.test('the project copy of the conformance cases is valid JSON with cases', async (t) => {
  const cases = (JSON.parse(readFileSync(CONFORMANCE_FILE, 'utf8')) as { cases: unknown[] }).cases
  t.ok(Array.isArray(cases) && cases.length > 0, 'it holds cases')
})

t.test('the project copy matches the workspace copy, when there is one', async (t) => {
  if (!existsSync(workspaceCopy)) {
    t.comment(`no ${workspaceCopy}: nothing to compare (a clone on its own)`)
    t.pass('nothing to compare')
    return
  }
  t.same(JSON.parse(readFileSync(CONFORMANCE_FILE, 'utf8')), JSON.parse(readFileSync(workspaceCopy, 'utf8')),
    'test/fixtures/token-bucket.json has drifted from shared/conformance/token-bucket.json: copy it again')
})
