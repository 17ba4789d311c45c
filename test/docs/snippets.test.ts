/**
 * How snippets.ts finds the TypeScript blocks of a document (markdown.ts reads
 * it as CommonMark): every TypeScript fence, however its info string is written, each
 * block's content alone (no fence of any language swallows or hides another),
 * exact markers, and what cannot be checked refused, not passed over.
 */
import t from 'tap'
import { codeBlocks } from './markdown.js'
import { snippets } from './snippets.js'

const found = (markdown: string) => snippets(markdown, '/out', 'doc', 'doc.md')
const lines = (markdown: string) => found(markdown).blocks.map((block) => `${block.line}:${block.mode}:${block.code}`)

t.test('every TypeScript fence is found, whatever its info string, indentation, case or fence character', async (t) => {
  const text = [
    '```ts title="app.ts"', 'a', '```',
    '```ts', 'b', '```',
    '~~~ts', 'c', '~~~',
    '   ```TS', '   d', '   ```',
    '```typescript', 'e', '```',
    '```mts', 'f', '```',
    '```cts', 'g', '```',
    '```Typescript{1,2}', 'h', '```'
  ].join('\n')
  t.same(lines(text), ['1:run:a', '4:run:b', '7:run:c', '10:run:d', '13:run:e', '16:run:f', '19:run:g', '22:run:h'])
  t.same(found(text).blocks.map((block) => block.file.slice(-7)), [
    'ne-1.ts', 'ne-4.ts', 'ne-7.ts', 'e-10.ts', 'e-13.ts', '-16.mts', '-19.cts', 'e-22.ts'
  ], 'an mts or cts block is checked as such')
  t.same(found(text).refused, [])
})

t.test('a fence of any language closes only on its own kind: it holds its content and hides nothing after it', async (t) => {
  const text = [
    '~~~md', '```ts', 'inside the md block', '```', '~~~',
    '````md', '```', '````',
    '```ts', 'x', '``` not a closing fence', '`````',
    '```sh', 'echo ~~~', '~~~', '```',
    '```ts', 'z', '```'
  ].join('\n')
  t.same(lines(text), ['9:run:x\n``` not a closing fence', '17:run:z'])
  t.same(codeBlocks(text).map((block) => `${block.line} ${block.language}`), ['1 md', '6 md', '9 ts', '13 sh', '17 ts'])
  t.same(codeBlocks('```ts\nnever closed\n\n```sh\n').map((block) => block.content), ['never closed\n\n```sh'],
    'a fence never closed runs to the end')
})

t.test('markers are exact, on the line before a ts fence; no other readme-test comment passes', async (t) => {
  const text = [
    '<!-- readme-test: compile-only -->', '```ts', 'a', '```',
    '<!--readme-test:skip-->', '', '```ts', 'b', '```',
    '<!-- readme-test: skip-me -->', '```ts', 'c', '```',
    '<!-- readme-test: compile-only please -->', '```ts', 'd', '```',
    '<!-- readme-test: skip -->', '```sh', 'e', '```',
    '<!-- readme-test: skip -->'
  ].join('\n')
  t.same(lines(text), ['2:compile-only:a', '7:skip:b', '11:run:c', '15:run:d'])
  t.same(found(text).refused, [
    'doc.md:18: a marker before a sh block: markers are for ts blocks',
    'doc.md:10: not a marker: <!-- readme-test: compile-only --> (or skip), alone on the line before a ts fence',
    'doc.md:14: not a marker: <!-- readme-test: compile-only --> (or skip), alone on the line before a ts fence',
    'doc.md:22: not a marker: <!-- readme-test: compile-only --> (or skip), alone on the line before a ts fence'
  ])
})

t.test('a TypeScript block that cannot be checked is refused, not skipped; one in a list item or a block quote is checked', async (t) => {
  const text = [
    '```tsx', '<App />', '```', '', '    ```ts', '    a', '    ```', '',
    '<details>', '```ts', 'b', '```', '</details>', '', '<!--', '```ts', 'commented out', '```', '-->'
  ].join('\n')
  t.same(lines(text), [])
  t.same(found(text).refused, [
    'doc.md:1: a tsx block (JSX) is not checked: write it as ts, or as its own language if it is not TypeScript',
    'doc.md:5: a ts fence in an indented code block or an HTML block: GitHub shows it as text; unindent it, or leave a blank line after the tag',
    'doc.md:10: a ts fence in an indented code block or an HTML block: GitHub shows it as text; unindent it, or leave a blank line after the tag'
  ], 'an indented code block and an HTML block show a fence as text; a comment hides it')
  const contained = ['- item', '', '    ```ts', '    a', '    ```', '', '> ```TypeScript', '> b', '> ```'].join('\n')
  t.same(lines(contained), ['3:run:a', '7:run:b'])
  t.same(found(contained).refused, [])
})

t.test('a block is under the heading before it, ATX or setext, in any container, as a reader sees it', async (t) => {
  const text = ['# One #', '```ts', 'a', '```', 'Two', '---', '```ts', 'b', '```', '> ## The `edge` _layer_', '```ts', 'c', '```'].join('\n')
  t.same(found(text).blocks.map((block) => block.section), ['One', 'Two', 'The edge layer'])
})

t.test('a fence ends where CommonMark ends it: a list item, an HTML comment, a list marker do not hide the block after', async (t) => {
  const inItem = ['- item', '  ```ts', '  a', 'b', '```ts', 'broken', '```'].join('\n')
  t.same(lines(inItem), ['2:run:a', '5:run:broken'], 'a fence in a list item ends with the item')
  const inComment = ['<!--', '```', '-->', '```ts', 'broken', '```'].join('\n')
  t.same(lines(inComment), ['4:run:broken'], 'a fence in an HTML comment is commented out, and ends with it')
  for (const marker of ['-', '1.']) {
    const indent = ' '.repeat(marker.length + 1)
    const onMarker = [`${marker} \`\`\`ts`, `${indent}a`, `${indent}\`\`\``, '', '```ts', 'broken', '```'].join('\n')
    t.same(lines(onMarker), ['1:run:a', '5:run:broken'], `a fence on a list marker line (${marker})`)
  }
  t.same(found(inItem).refused, [])
})
