/**
 * A markdown document as CommonMark reads it, in one place for the documentation
 * tests: parsed by commonmark.js, CommonMark's reference implementation, so that
 * containers (list items, block quotes), HTML blocks and comments, indented code,
 * escapes and entities are read as the specification says, not as a pattern guesses.
 *
 * What the tests need of it: the code blocks (fenced ones with their info string,
 * indented ones too), the headings (ATX and setext, in any container) with their
 * text as a reader sees it, the HTML (blocks and inline) with its comments, and
 * every node with the line it is on.
 *
 * GitHub renders with cmark-gfm, CommonMark plus extensions: tables, strikethrough,
 * autolinked bare URLs and footnotes are not read here. A table is read as a
 * paragraph (its links are links all the same, and it holds no heading); a bare URL
 * has a scheme, which the link check passes over; no document has a footnote.
 */
import { Parser, type Node } from 'commonmark'

/** A node of a document and its 1-based line. */
export interface Located {
  node: Node
  /**
   * A block's first line; an inline node's, its block's first line plus the line
   * breaks before it there (a code span or a link title across lines counts none:
   * their newlines are read as spaces).
   */
  line: number
}

/** The line breaks of a text. */
export const newlines = (text: string): number => text.split('\n').length - 1

/** Every node of a document, in document order, with its line. */
export function located (markdown: string): Located[] {
  const found: Located[] = []
  const walker = new Parser().parse(markdown).walker()
  let line = 1
  for (let step = walker.next(); step !== null; step = walker.next()) {
    const { node, entering } = step
    if (!entering) continue
    // Blocks have a source position; inline nodes none (commonmark.js leaves it undefined).
    const position = node.sourcepos as Node['sourcepos'] | undefined
    if (position !== undefined) line = position[0][0]
    found.push({ node, line })
    if (node.type === 'softbreak' || node.type === 'linebreak') line++
    if (node.type === 'html_inline') line += newlines(node.literal ?? '')
  }
  return found
}

/** A node's text as a reader sees it: text, code and entities as shown, markup and HTML tags dropped, an image shown by none. */
export function plainText (node: Node): string {
  let text = ''
  for (let child = node.firstChild; child !== null; child = child.next) {
    if (child.type === 'text' || child.type === 'code') text += child.literal ?? ''
    else if (child.type === 'softbreak' || child.type === 'linebreak') text += ' '
    else if (child.type !== 'image') text += plainText(child)
  }
  return text
}

export interface CodeBlock {
  /** 1-based: the opening fence's line, or an indented block's first. */
  line: number
  /** The info string (`ts title="app.ts"`); undefined for an indented block. */
  info: string | undefined
  /** The info string's first word (`ts`); '' for an indented block. */
  language: string
  /** The block's text, its container's indentation taken off, without the last newline. */
  content: string
  /** The HTML block just before it in its container (a marker, maybe), and that block's line. */
  before: Located | undefined
}

/** The code blocks of a document, fenced and indented, in any container, in order. */
export function codeBlocks (markdown: string): CodeBlock[] {
  const all = located(markdown)
  const lineOf = new Map(all.map(({ node, line }) => [node, line]))
  return all.filter(({ node }) => node.type === 'code_block').map(({ node, line }) => {
    const previous = node.prev?.type === 'html_block' ? node.prev : undefined
    return {
      line,
      // commonmark.js gives an indented block a null info string.
      info: node.info ?? undefined,
      language: /^\S*/.exec(node.info ?? '')?.[0] ?? '',
      content: (node.literal ?? '').replace(/\n$/, ''),
      before: previous === undefined ? undefined : { node: previous, line: lineOf.get(previous) ?? line }
    }
  })
}

export interface Heading {
  /** 1-based: its first line. */
  line: number
  level: number
  /** As a reader sees it: ``The `edge` option`` is `The edge option`. */
  text: string
}

/** The headings of a document, ATX and setext, in any container, in order. */
export const headings = (markdown: string): Heading[] => located(markdown)
  .filter(({ node }) => node.type === 'heading')
  .map(({ node, line }) => ({ line, level: node.level, text: plainText(node) }))

/** The HTML of a document: its HTML blocks and inline tags, with their lines. */
export const html = (markdown: string): Located[] => located(markdown)
  .filter(({ node }) => node.type === 'html_block' || node.type === 'html_inline')

/**
 * HTML with its comments made spaces (newlines kept, so offsets and lines stay):
 * `<!-->`, `<!--->` and `<!--` … `-->`, as the HTML standard ends them; one never
 * closed runs to the end.
 */
export const withoutComments = (text: string): string =>
  text.replace(/<!--(?:>|->|[\s\S]*?(?:-->|$))/g, (comment) => comment.replace(/[^\n]/g, ' '))
