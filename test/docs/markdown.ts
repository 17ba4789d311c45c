/**
 * The block structure of a markdown document that the documentation tests need,
 * read as CommonMark (and GitHub) read it, in one place:
 *
 * - fenced code blocks: an opening fence of 3 or more backticks or tildes,
 *   indented 0 to 3 spaces, with an info string (its first word the language);
 *   closed by the first later fence of the same character, at least as long, with
 *   nothing after it; a fence never closed runs to the end of the document. So a
 *   block of any language holds its own content, and hides nothing after it;
 * - code spans and HTML comments of the prose (a span never crosses a blank line);
 * - headings: ATX (`## Title ##`) and setext (a paragraph underlined with `===`
 *   or `---`).
 *
 * Indented code blocks, block quotes and list items holding fences indented 4
 * spaces or more are not read as such: `strayFences` names those fence lines, so
 * that a caller can refuse them rather than miss their content.
 */

export interface Fence {
  /** The 0-based line of the opening fence. */
  open: number
  /** The 0-based line of the closing fence; the number of lines when the fence is never closed. */
  close: number
  /** The info string, trimmed: `ts title="app.ts"`. */
  info: string
  /** Its first word: `ts`. */
  language: string
  /** The lines between the fences, the opening fence's indentation taken off each. */
  content: string[]
}

const OPENING = /^( {0,3})(`{3,}|~{3,})(.*)$/
const LOOSE = /^(?: {4,}|[ \t]*>[ >\t]*)(`{3,}|~{3,})\s*(\S*)/

/** An opening fence, or undefined: a backtick fence's info string holds no backtick. */
function opening (line: string): { indent: number, marker: string, info: string } | undefined {
  const match = OPENING.exec(line)
  if (match === null) return undefined
  const [, indent = '', marker = '', info = ''] = match
  if (marker.startsWith('`') && info.includes('`')) return undefined
  return { indent: indent.length, marker, info: info.trim() }
}

const closes = (line: string, marker: string): boolean => {
  const match = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(line)
  return match !== null && match[1]?.[0] === marker[0] && (match[1]?.length ?? 0) >= marker.length
}

const outdent = (line: string, indent: number): string => line.replace(new RegExp(`^ {0,${indent}}`), '')

/** The fenced code blocks of a document's lines, in order. */
export function fences (lines: string[]): Fence[] {
  const found: Fence[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = opening(lines[i] as string)
    if (open === undefined) continue
    let close = i + 1
    while (close < lines.length && !closes(lines[close] as string, open.marker)) close++
    const content = lines.slice(i + 1, close).map((line) => outdent(line, open.indent))
    found.push({ open: i, close, info: open.info, language: /^\S*/.exec(open.info)?.[0] ?? '', content })
    i = close
  }
  return found
}

/** The lines outside every fenced block (fences included) are kept, the others emptied: line numbers stay. */
export function outsideFences (lines: string[]): string[] {
  const kept = [...lines]
  for (const { open, close } of fences(lines)) kept.fill('', open, Math.min(close + 1, lines.length))
  return kept
}

/** Lines outside fenced blocks that look like fences but open none: in a block quote, or indented 4 spaces or more. */
export function strayFences (lines: string[]): Array<{ line: number, language: string }> {
  return outsideFences(lines).flatMap((text, i) => {
    const match = LOOSE.exec(text)
    return match === null ? [] : [{ line: i + 1, language: match[2] ?? '' }]
  })
}

export interface Range { start: number, end: number }

/** The code spans and the HTML comments of a text (fenced blocks already emptied), scanned once from the start. */
export function spans (text: string): { code: Range[], comments: Range[] } {
  const code: Range[] = []
  const comments: Range[] = []
  const pattern = /(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n)[\s\S])*?(?<!`)\1(?!`)|<!--[\s\S]*?-->/g
  for (const match of text.matchAll(pattern)) {
    const range = { start: match.index, end: match.index + match[0].length }
    if (match[1] === undefined) comments.push(range)
    else code.push(range)
  }
  return { code, comments }
}

/** The text with each range's characters made spaces (newlines kept): offsets and lines stay. */
export function blank (text: string, ranges: Range[]): string {
  let out = text
  for (const { start, end } of ranges) out = out.slice(0, start) + out.slice(start, end).replace(/[^\n]/g, ' ') + out.slice(end)
  return out
}

/** The 1-based line of an offset of a text. */
export const lineAt = (text: string, offset: number): number => text.slice(0, offset).split('\n').length

export interface Heading {
  /** 1-based. */
  line: number
  level: number
  /** As written, markup included: ``The `edge` option``. */
  text: string
}

const ATX = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/
const SETEXT = /^ {0,3}(=+|-+)[ \t]*$/
/** A line that cannot be (the start of) a paragraph a setext underline makes a heading: blank, a list item, a quote, a table, a tag, indented code. */
const NOT_PARAGRAPH = /^(?:\s*$| {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)| {0,3}[>#|<]| {4})/

/** The paragraph that ends just above line `i`, when it is one: its text, lines joined by a space. */
function paragraphAbove (lines: string[], i: number): string | undefined {
  let start = i
  const ends = (line: string): boolean => /^\s*$/.test(line) || SETEXT.test(line) || ATX.test(line)
  while (start > 0 && !ends(lines[start - 1] as string)) start--
  const text = lines.slice(start, i)
  if (text.length === 0 || text.some((line) => NOT_PARAGRAPH.test(line))) return undefined
  return text.map((line) => line.trim()).join(' ')
}

/** The headings of a document, outside fenced blocks and HTML comments, in order. */
export function headings (markdown: string): Heading[] {
  const outside = outsideFences(markdown.split('\n')).join('\n')
  const lines = blank(outside, spans(outside).comments).split('\n')
  const found: Heading[] = []
  lines.forEach((line, i) => {
    const atx = ATX.exec(line)
    if (atx !== null) { found.push({ line: i + 1, level: atx[1]?.length ?? 1, text: atx[2] ?? '' }); return }
    const underline = SETEXT.exec(line)
    const text = underline === null ? undefined : paragraphAbove(lines, i)
    if (text !== undefined) found.push({ line: i, level: underline?.[1]?.startsWith('=') === true ? 1 : 2, text })
  })
  return found
}
