/**
 * Every relative link of the repository's documents resolves: README.md,
 * MIGRATING.md, CONTRIBUTING.md (when present), ARCHITECTURE.md, CHANGELOG.md and
 * every markdown file under docs/ (found by listing it). A link names a file or
 * folder that exists, and its `#anchor` a heading of the target, as GitHub slugs
 * headings. A failure names the document, the line and the link (links.ts).
 */
import t from 'tap'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { anchors, brokenLinks, links, slug } from './links.js'
import { ROOT } from './snippets.js'

const roots = ['README.md', 'MIGRATING.md', 'CONTRIBUTING.md', 'ARCHITECTURE.md', 'CHANGELOG.md'].filter((file) => existsSync(join(ROOT, file)))
const pages = (readdirSync(join(ROOT, 'docs'), { recursive: true }) as string[])
  .filter((file) => file.endsWith('.md')).sort().map((file) => `docs/${file.replaceAll('\\', '/')}`)
const documents = [...roots, ...pages]

t.test('GitHub heading anchors', async (t) => {
  t.equal(slug('Who is the user?'), 'who-is-the-user')
  t.equal(slug('The edge across replicas: `edge.mode`'), 'the-edge-across-replicas-edgemode')
  t.equal(slug("FRL's README examples, translated"), 'frls-readme-examples-translated')
  t.equal(slug('`fastify.tollgate.limiter(options)`'), 'fastifytollgatelimiteroptions')
  t.equal(slug('Links to [the docs](docs/options.md)'), 'links-to-the-docs')
  t.equal(slug('A  b_c'), 'a--b_c', 'each space a hyphen; underscores stay')
  t.same([...anchors('# A\n## A\n```\n# not a heading\n```\n## A\n')], ['a', 'a-1', 'a-2'], 'repeated headings numbered, code left out')
})

t.test('links are found in prose, not in code', async (t) => {
  const text = 'See [a](a.md) and ![b](b.svg).\n`[c](c.md)` is code\n```\n[d](d.md)\n```\n<img src="e.png"> [f](https://x.org)\n'
  t.same(links(text), [
    { line: 1, target: 'a.md' }, { line: 1, target: 'b.svg' }, { line: 6, target: 'e.png' }, { line: 6, target: 'https://x.org' }
  ])
})

t.test('a broken link fails, naming the document, the line and the link', async (t) => {
  const text = '# Title\n\n[ok](README.md) [self](#title) [gone](docs/nowhere.md)\n[bad anchor](MIGRATING.md#no-such-heading)\n' +
    '[bad self](#nothing) [web](https://example.org/x) [up](../outside.md)\n'
  t.same(brokenLinks(ROOT, 'TEST.md', text), [
    'TEST.md:3: docs/nowhere.md: no file docs/nowhere.md',
    'TEST.md:4: MIGRATING.md#no-such-heading: no heading #no-such-heading in MIGRATING.md',
    'TEST.md:5: #nothing: no heading #nothing in TEST.md',
    'TEST.md:5: ../outside.md: outside the repository'
  ])
})

t.test('every relative link of the documents resolves', async (t) => {
  t.ok(documents.includes('README.md') && pages.length > 0, `documents: ${documents.join(', ')}`)
  let checked = 0
  for (const document of documents) {
    const broken = brokenLinks(ROOT, document)
    checked += links(readFileSync(join(ROOT, document), 'utf8')).length
    t.same(broken, [], `${document}: every relative link resolves`)
  }
  t.ok(checked > 50, `${checked} links checked`)
})

t.test('the user documents link into the repository relatively (an https link to it does not resolve before it is public)', async (t) => {
  for (const document of ['README.md', 'MIGRATING.md', ...pages]) {
    const own = links(readFileSync(join(ROOT, document), 'utf8'))
      .filter(({ target }) => /github(usercontent)?\.com\/fastify-tollgate\//.test(target))
    t.same(own, [], document)
  }
})
