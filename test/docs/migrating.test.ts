/**
 * MIGRATING.md's ```ts blocks, tried as README.md's are (snippets.ts): each
 * type-checks as pasted and, unless marked `<!-- readme-test: skip -->` or
 * `compile-only`, runs as pasted. The block of "A worked example" is also the
 * app test/frl/migration-app.test.ts runs as three replicas on one Redis: it is
 * test/frl/migration-app.ts, character for character, below that file's opening comment.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { documentBlocks, ROOT, testBlocks } from './snippets.js'

// Child processes and a TypeScript program of their own: more than tap's 30 s on a busy machine.
t.setTimeout(120_000)

const migrating = documentBlocks('MIGRATING.md', 'migrating')
testBlocks(t, migrating, 1)

t.test('MIGRATING: the worked example is the app the replica test runs (test/frl/migration-app.ts)', async (t) => {
  const examples = migrating.checked.filter((block) => block.section === 'A worked example')
  t.equal(examples.length, 1, 'one ts block under "A worked example"')
  const fixture = readFileSync(join(ROOT, 'test', 'frl', 'migration-app.ts'), 'utf8')
  const opening = /^\/\*\*[\s\S]*?\*\/\n/.exec(fixture)
  t.ok(opening, 'the fixture opens with a comment')
  t.equal(examples[0]?.code, fixture.slice(opening?.[0].length ?? 0).replace(/\n$/, ''), 'the block and the fixture are the same text')
})
