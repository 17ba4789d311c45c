/**
 * The pages of docs/, tried as README.md's blocks are (snippets.ts): every ```ts
 * block of every docs/*.md page type-checks as pasted and, unless marked
 * `<!-- readme-test: skip -->` or `compile-only`, runs as pasted. Pages are found
 * by listing docs/, so a new page is covered without a change here. And each
 * page is one topic with a title, linked from the README's list of pages.
 */
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { documentsBlocks, ROOT, testBlocks } from './snippets.js'

// Child processes and a TypeScript program of their own: more than tap's 30 s on a busy machine.
t.setTimeout(300_000)

const pages = readdirSync(join(ROOT, 'docs')).filter((file) => file.endsWith('.md')).sort().map((file) => `docs/${file}`)
const blocks = documentsBlocks(pages, 'docs-pages')

t.test('docs/ holds the pages', async (t) => {
  t.ok(pages.length >= 8, `${pages.length} pages: ${pages.join(', ')}`)
  const all = blocks.flatMap((page) => page.blocks)
  t.ok(all.length >= 10, `${all.length} ts blocks in all`)
  const skipped = all.filter((block) => block.mode === 'skip')
  t.same(skipped.map((block) => `${block.document}:${block.line}`), [], 'no block is skipped: a block a user would paste is checked')
  const runs = all.filter((block) => block.mode === 'run').length
  t.ok(runs >= all.length - 3, `most blocks run, not only compile (${runs} of ${all.length})`)
})

t.test('each page has one title, and the README links it', async (t) => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  for (const page of pages) {
    const text = readFileSync(join(ROOT, page), 'utf8')
    const titles = text.split('\n').filter((line) => /^# /.test(line))
    t.equal(titles.length, 1, `${page}: one # title`)
    t.ok(text.startsWith('# '), `${page}: opens with its title`)
    t.ok(readme.includes(`](${page})`), `README.md links ${page}`)
  }
})

for (const page of blocks) testBlocks(t, page, 0)
