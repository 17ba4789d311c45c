/**
 * Every TypeScript block a user may paste, tried as snippets.ts says: README.md's,
 * MIGRATING.md's and those of every page under docs/ (documents.ts lists it, its
 * subfolders included, so a new page is covered without a change here), none
 * skipped, type-checked together as one
 * program (one compile, not one per document) and, unless marked
 * `<!-- readme-test: compile-only -->`, each run as pasted in its own process.
 * Beside them: each page is one topic with a title linked from the README (a
 * page of a subfolder, from its folder's README.md); MIGRATING.md's worked example is the app the replica test runs; the
 * README's tiers block gives a VIP user their own quota.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { documentsBlocks, emitted, SECRET, testBlocks } from './snippets.js'
import { pages, ROOT } from './documents.js'
import { headings } from './markdown.js'
import { links } from './links.js'

// Child processes and one TypeScript program: more than tap's 30 s on a busy machine.
t.setTimeout(300_000)

const documents = documentsBlocks(['README.md', 'MIGRATING.md', ...pages], 'doc-blocks')
const byName = (name: string) => documents.find((document) => document.document === name) as (typeof documents)[number]
const readme = byName('README.md')
const migrating = byName('MIGRATING.md')
const docs = documents.filter((document) => document.document.startsWith('docs/'))

t.test('docs/ holds the pages', async (t) => {
  t.ok(pages.length >= 8, `${pages.length} pages: ${pages.join(', ')}`)
  t.ok(pages.some((page) => page.startsWith('docs/decisions/')), 'the pages of docs/ subfolders are listed too')
  const all = docs.flatMap((page) => page.blocks)
  t.ok(all.length >= 10, `${all.length} ts blocks in all`)
  const runs = all.filter((block) => block.mode === 'run').length
  t.ok(runs >= all.length - 3, `most blocks run, not only compile (${runs} of ${all.length})`)
})

t.test('no block of any document is skipped: a block a user would paste is checked', async (t) => {
  const skipped = documents.flatMap((document) => document.blocks).filter((block) => block.mode === 'skip')
  t.same(skipped.map((block) => `${block.document}:${block.line}`), [])
})

t.test('each page has one title, and the README (a subfolder\'s page: its folder\'s README.md, the index) links it', async (t) => {
  for (const page of pages.filter((page) => !page.endsWith('/README.md'))) {
    const body = readFileSync(join(ROOT, page), 'utf8')
    const titles = headings(body).filter((heading) => heading.level === 1)
    t.equal(titles.length, 1, `${page}: one # title`)
    t.ok(body.startsWith('# '), `${page}: opens with its title`)
    const index = dirname(page) === 'docs' ? 'README.md' : `${dirname(page)}/README.md`
    const target = index === 'README.md' ? page : page.slice(dirname(page).length + 1)
    const linked = links(readFileSync(join(ROOT, index), 'utf8')).some((link) => link.target === target)
    t.ok(linked, `${index} links ${page}`)
  }
})

testBlocks(t, readme, 4)
testBlocks(t, migrating, 1)
for (const page of docs) testBlocks(t, page, 0)

t.test('MIGRATING: the worked example is the app the replica test runs (test/frl/migration-app.ts)', async (t) => {
  const examples = migrating.checked.filter((block) => block.section === 'A worked example')
  t.equal(examples.length, 1, 'one ts block under "A worked example"')
  const fixture = readFileSync(join(ROOT, 'test', 'frl', 'migration-app.ts'), 'utf8')
  const opening = /^\/\*\*[\s\S]*?\*\/\n/.exec(fixture)
  t.ok(opening, 'the fixture opens with a comment')
  t.equal(examples[0]?.code, fixture.slice(opening?.[0].length ?? 0).replace(/\n$/, ''), 'the block and the fixture are the same text')
})

t.test('README usage: one VIP user alone on an address meets their own quota, not the edge', async (t) => {
  const usage = readme.checked.find((block) => block.section === 'Users and tiers')
  if (usage === undefined) return t.fail('README has a block under "Users and tiers"')
  process.env.JWT_SECRET ??= SECRET
  process.env.PORT ??= '0'
  const { app } = await import(pathToFileURL(emitted(usage)).href) as { app: FastifyInstance }
  t.teardown(() => app.close())
  const authorization = `Bearer ${app.jwt.sign({ sub: 'victor', tier: 'vip' })}`
  let passed = 0
  let refused
  for (let i = 0; i < 1000 && refused === undefined; i++) {
    const response = await app.inject({ url: '/', headers: { authorization } })
    if (response.statusCode === 200) passed++
    else refused = response
  }
  if (refused === undefined) return t.fail('the VIP tier refuses at some point')
  t.equal(refused.statusCode, 429)
  t.match(refused.headers['ratelimit'], /"app";r=0;/, `the refusal is the VIP's own bucket: ${String(refused.headers['ratelimit'])}`)
  t.notMatch(refused.headers['ratelimit'], /"edge";r=0;/, 'not the edge')
  const vip = /"app";q=(\d+)/.exec(String(refused.headers['ratelimit-policy']))
  t.ok(passed >= Number(vip?.[1]), `the VIP's whole burst passed first (${passed}, capacity ${String(vip?.[1])})`)
})
