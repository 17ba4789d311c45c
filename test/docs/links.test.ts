/**
 * Every relative link of the repository's documents resolves: README.md,
 * MIGRATING.md, CONTRIBUTING.md, ARCHITECTURE.md, CHANGELOG.md (those present)
 * and every markdown file under docs/ (documents.ts lists them). A link names a
 * file or folder git tracks, and its `#anchor` a heading of the target, as GitHub
 * slugs headings. A failure names the document, the line and the link (links.ts).
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { anchors, brokenLinks, links, slug } from './links.js'
import { documents, pages, ROOT } from './documents.js'

t.test('GitHub heading anchors', async (t) => {
  t.equal(slug('Who is the user?'), 'who-is-the-user')
  t.equal(slug('The edge across replicas: `edge.mode`'), 'the-edge-across-replicas-edgemode')
  t.equal(slug("FRL's README examples, translated"), 'frls-readme-examples-translated')
  t.equal(slug('`fastify.tollgate.limiter(options)`'), 'fastifytollgatelimiteroptions')
  t.equal(slug('Links to [the docs](docs/options.md)'), 'links-to-the-docs')
  t.equal(slug('A  b_c'), 'a--b_c', 'each space a hyphen; underscores stay')
  t.same([...anchors('# A\n## A\n```\n# not a heading\n```\n## A\n')], ['a', 'a-1', 'a-2'], 'repeated headings numbered, code left out')
  t.equal(slug('The _edge_ and __app__ layers'), 'the-edge-and-app-layers', 'emphasis shows its text')
  t.equal(slug('`snake_case` and snake_case, not \\_this\\_'), 'snake_case-and-snake_case-not-_this_', 'underscores in code, words and escapes stay')
  t.equal(slug('`a<b>` and <b>tags</b> &amp; C# 1.0!'), 'ab-and-tags--c-10', 'code kept verbatim, tags dropped, punctuation dropped')
  t.equal(slug('[`x`](y.md) z'), 'x-z', 'a link holding code shows its text')
  t.same([...anchors('Title\n=====\n\nPart\nof it\n---\n\n- item\n---\n\n<!--\n# hidden\n-->\n~~~\n## fenced\n~~~\n')], ['title', 'part-of-it'],
    'setext headings (a paragraph of several lines too); a list item over --- is none; no heading in a comment or a ~~~ fence')
  t.same([...anchors('# A\n# A-1\n# A\n# C# ##\n<a name="x"></a> <p id=\'y\'>\n')], ['a', 'a-1', 'a-2', 'c', 'x', 'y'],
    'a repeated heading takes the next unused number; a closing # sequence is not text; HTML ids and names are anchors')
})

t.test('links are found in prose, not in code', async (t) => {
  const text = 'See [a](a.md) and ![b](b.svg).\n`[c](c.md)` is code\n```\n[d](d.md)\n```\n<img src="e.png"> [f](https://x.org)\n'
  t.same(links(text), [
    { line: 1, target: 'a.md' }, { line: 1, target: 'b.svg' }, { line: 6, target: 'e.png' }, { line: 6, target: 'https://x.org' }
  ])
})

t.test('reference links at their use, HTML attributes quoted any way, angle brackets; nothing in code or comments', async (t) => {
  const text = '[a][one] [b][] [c] ![d][TWO]\n\n[one]: ref-one.md "title"\n  [Two]:\n  <ref two.md>\n' +
    '<a href=\'single.md\'>x</a> <img alt="y" src=bare.png> <a\n  href="next-line.md">\n[e](<with space.md> \'t\') [f](g(h).md)\n' +
    '[^1]: footnote.md\n`x\n[in](code.md)` <!-- [in](comment.md) -->\n   ~~~ts\n[in](tilde.md)\n~~~\n````\n```\n[in](longer.md)\n````\n' +
    '[unused]: unused.md\n'
  t.same(links(text), [
    { line: 1, target: 'ref-one.md' }, { line: 1, target: 'ref%20two.md' },
    { line: 6, target: 'single.md' }, { line: 6, target: 'bare.png' }, { line: 7, target: 'next-line.md' },
    { line: 8, target: 'with%20space.md' }, { line: 8, target: 'g(h).md' }
  ], 'a destination as its href (%-encoded); a definition no link uses, a footnote\'s included, shows nothing')
})

t.test('a link resolves to a file or folder git tracks, its anchor %-decoded', async (t) => {
  const text = '# Größe über alles\n\n[a](package-lock.json) [b](node_modules) [c](docs/decisions/) [d](#gr%C3%B6%C3%9Fe-%C3%BCber-alles)\n' +
    '[e][missing] [f][] [g](/docs/options.md)\n'
  t.same(brokenLinks(ROOT, 'TEST.md', { markdown: text }), [
    'TEST.md:3: node_modules: no file or folder node_modules tracked by git',
    'TEST.md:4: [missing]: no reference definition [missing]:',
    'TEST.md:4: [f]: no reference definition [f]:'
  ])
  t.same(brokenLinks(ROOT, 'TEST.md', { markdown: '[h](%E0%A4%A)\n' }), ['TEST.md:1: %E0%A4%25A: a malformed %-encoding'])
})

t.test('a broken link fails, naming the document, the line and the link', async (t) => {
  const text = '# Title\n\n[ok](README.md) [self](#title) [gone](docs/nowhere.md)\n[bad anchor](MIGRATING.md#no-such-heading)\n' +
    '[bad self](#nothing) [web](https://example.org/x) [up](../outside.md)\n'
  t.same(brokenLinks(ROOT, 'TEST.md', { markdown: text }), [
    'TEST.md:3: docs/nowhere.md: no file or folder docs/nowhere.md tracked by git',
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

t.test('links as CommonMark reads them: a fence in a list item, a comment, or on a list marker line hides none', async (t) => {
  const broken = (markdown: string) => brokenLinks(ROOT, 'TEST.md', { markdown }).map((message) => message.split(': ')[0])
  t.same(broken('- item\n  ```sh\n  x\nb [gone](nope1.md)\n```\n'), ['TEST.md:4'], 'a fence in a list item ends with the item')
  t.same(broken('<!--\n```\n-->\n[gone](nope2.md)\n'), ['TEST.md:4'], 'a fence in an HTML comment is commented out')
  t.same(broken('- ```sh\n  x\n  ```\n\n[gone](nope3.md)\n'), ['TEST.md:5'], 'a fence on a list marker line')
  t.same(broken('1. ```sh\n   x\n   ```\n\n[gone](nope4.md)\n'), ['TEST.md:5'], 'a fence on an ordered list marker line')
})

t.test('links after an escaped backtick, after a <!--> comment, with nested parentheses, with entities', async (t) => {
  t.same(links('\\`[x](nope1.md)\\`\n'), [{ line: 1, target: 'nope1.md' }], 'an escaped backtick opens no code span')
  t.same(links('a <!--> b [x](nope2.md)\n\nc -->\n'), [{ line: 1, target: 'nope2.md' }], '<!--> is a whole comment')
  t.same(links('a <!---> b [x](nope3.md) -->\n'), [{ line: 1, target: 'nope3.md' }], '<!---> is a whole comment')
  t.same(links('<!-- <a href="hidden.md"> -->\n<!--> <a href="shown.md">\n\na <!----> <img src="inline.png">\n'),
    [{ line: 2, target: 'shown.md' }, { line: 4, target: 'inline.png' }], 'HTML comments hide their tags, and end as HTML ends them')
  t.same(links('[x](a(b(c)).md)\n'), [{ line: 1, target: 'a(b(c)).md' }], 'balanced parentheses nest')
  t.same(links('[x](nope&#46;md) [y](&#x61;.md "t")\n'), [{ line: 1, target: 'nope.md' }, { line: 1, target: 'a.md' }],
    'entities in destinations are decoded')
})

t.test('headings in any container have anchors; indented code is code', async (t) => {
  t.same([...anchors('> ## Quoted\n\n- ## Listed\n- Setext\n  ---\n\npara\n\n    # indented code\n')], ['quoted', 'listed', 'setext'])
  t.same(links('para\n\n    [x](nope.md) <a href="nope.md">\n'), [], 'an indented code block holds no link')
  t.same(brokenLinks(ROOT, 'TEST.md', { markdown: '> # Quoted\n\n1. ## Listed\n\n[a](#quoted) [b](#listed)\n' }), [])
})

t.test('a link in a code span, a fence or a comment is no link (the README links a page only by a real link)', async (t) => {
  t.same(links('`](docs/x.md)` and `[a](docs/x.md)`\n\n```md\n[a](docs/x.md)\n```\n\n<!-- [a](docs/x.md) -->\n'), [])
})
