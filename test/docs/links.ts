/**
 * The relative links of the repository's markdown documents, checked as GitHub
 * resolves them: a path from the document's folder (from the repository's root
 * when it starts with `/`) to a file or folder git tracks, and a `#anchor`
 * (%-decoded) to a heading of the target (or of the document itself), slugged as
 * GitHub slugs headings, or to an HTML `id`/`name` there.
 *
 * A link is an inline one (`[text](target)`, `![alt](<target>)`), a reference
 * definition (`[ref]: target`, not a footnote's `[^1]:`; a `[text][ref]` with no
 * definition is broken), or
 * an HTML `href`/`src` (quoted or not); none inside code (markdown.ts finds the
 * fenced blocks and the code spans) or HTML comments.
 */
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { dirname, join, normalize, relative, sep } from 'node:path'
import { blank, headings, lineAt, outsideFences, spans } from './markdown.js'

/** A link found in a document: where, and what it points to. */
export interface Link {
  line: number
  target: string
}

/** The text a reader sees: fenced blocks, code spans and HTML comments blanked, lines kept. */
function prose (markdown: string): string {
  const outside = outsideFences(markdown.split('\n')).join('\n')
  const { code, comments } = spans(outside)
  return blank(outside, [...code, ...comments])
}

const LABEL = String.raw`((?:[^\[\]\\]|\\.)*)`
const TITLE = String.raw`(?:\s+(?:"[^"]*"|'[^']*'|\([^()]*\)))?`
const INLINE = new RegExp(String.raw`\]\(\s*(?:<([^<>\n]*)>|((?:[^\s()\\]|\\.|\((?:[^\s()\\]|\\.)*\))+))?${TITLE}\s*\)`, 'g')
const DEFINITION = new RegExp(String.raw`^ {0,3}\[(?!\^)${LABEL}\]:[ \t]*\n?[ \t]*(?:<([^<>\n]*)>|(\S+))${TITLE}[ \t]*$`, 'gm')
const REFERENCE = new RegExp(String.raw`\[${LABEL}\]\[${LABEL}\]`, 'g')
const TAG = /<[a-z][\w-]*(\s[^<>]*)>/gi
const ATTRIBUTE = /\s(href|src|id|name)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))/gi

const unescape = (text: string): string => text.replace(/\\([!-/:-@[-`{-~])/g, '$1')
const normalizeLabel = (label: string): string => label.trim().replace(/\s+/g, ' ').toLowerCase()

/** A link target at an offset of a text. */
interface Found { at: number, target: string }

/** The `href`/`src` (or `id`/`name`) attributes of the HTML tags of a text, at their offsets. */
function attributes (text: string, names: RegExp): Found[] {
  const found: Found[] = []
  for (const tag of text.matchAll(TAG)) {
    const start = tag.index + tag[0].length - 1 - (tag[1]?.length ?? 0)
    for (const attribute of (tag[1] ?? '').matchAll(ATTRIBUTE)) {
      if (names.test(attribute[1] ?? '')) found.push({ at: start + attribute.index, target: attribute[2] ?? attribute[3] ?? attribute[4] ?? '' })
    }
  }
  return found
}

/** The links of a markdown text, and its `[text][ref]` references that no definition names. */
function parse (markdown: string): { links: Link[], undefined: Link[] } {
  const text = prose(markdown)
  const found: Found[] = []
  const defined = new Set<string>()
  for (const match of text.matchAll(INLINE)) found.push({ at: match.index, target: unescape(match[1] ?? match[2] ?? '') })
  for (const match of text.matchAll(DEFINITION)) {
    defined.add(normalizeLabel(match[1] ?? ''))
    found.push({ at: match.index, target: unescape(match[2] ?? match[3] ?? '') })
  }
  found.push(...attributes(text, /^(?:href|src)$/i))
  const line = ({ at, target }: Found): Link => ({ line: lineAt(text, at), target })
  const undefinedReferences = [...text.matchAll(REFERENCE)]
    .map((match) => ({ at: match.index, target: match[2] === '' ? match[1] ?? '' : match[2] ?? '' }))
    .filter(({ target }) => !defined.has(normalizeLabel(target)))
  return { links: found.sort((a, b) => a.at - b.at).map(line), undefined: undefinedReferences.map(line) }
}

/** Every link target of a markdown text, in line order: inline links and images, reference definitions, HTML `href`/`src`. */
export const links = (markdown: string): Link[] => parse(markdown).links

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }
const entity = (_: string, name: string): string => name.startsWith('#')
  ? String.fromCodePoint(Number(name.replace(/^#x/i, '0x').replace(/^#/, '')))
  : ENTITIES[name.toLowerCase()] ?? `&${name};`

/** Inline markup outside code spans as rendered: links show their text, tags nothing, emphasis its content, escapes their character. */
function rendered (text: string): string {
  let out = text
    .replace(/\\_/g, '\uE000')
    .replace(/\](?:\([^)]*\)|\[[^\]]*\])/g, '') // a link or image shows its text (the brackets are punctuation)
    .replace(/<\/?[a-z][\w-]*(?:\s[^<>]*)?>/gi, '')
    .replace(/&(#x[\da-f]+|#\d+|[a-z]+);/gi, entity)
    .replace(/\\([!-/:-@[-`{-~])/g, '$1')
  for (let before = ''; before !== out;) {
    before = out
    out = out.replace(/(^|[^\p{L}\p{N}_])(_+)(?=[^\s_])([\s\S]*?[^\s_])\2(?![\p{L}\p{N}_])/gu, '$1$3')
  }
  return out.replace(/\uE000/g, '_')
}

/** GitHub's anchor for a heading's text: its rendered text lower-cased, punctuation dropped, each space a hyphen. */
export function slug (heading: string): string {
  let text = ''
  let at = 0
  for (const { start, end } of spans(heading).code) {
    const code = heading.slice(start, end).replace(/^(`+)([\s\S]*)\1$/, '$2')
    text += rendered(heading.slice(at, start)) + (/^ [\s\S]* $/.test(code) && code.trim() !== '' ? code.slice(1, -1) : code)
    at = end
  }
  text += rendered(heading.slice(at))
  return text.trim().toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '').replace(/ /g, '-')
}

/** The anchors of a markdown text: its headings', repeated ones numbered (`-1`, `-2`) as GitHub numbers them, and HTML `id`s and `name`s. */
export function anchors (markdown: string): Set<string> {
  const counts = new Map<string, number>()
  const found = new Set<string>()
  for (const heading of headings(markdown)) {
    const base = slug(heading.text)
    let anchor = base
    while (found.has(anchor)) {
      counts.set(base, (counts.get(base) ?? 0) + 1)
      anchor = `${base}-${counts.get(base) ?? 0}`
    }
    found.add(anchor)
  }
  for (const { target } of attributes(prose(markdown), /^(?:id|name)$/i)) found.add(target)
  return found
}

/** `files` (paths from a root) and every folder holding one ('' for the root itself). */
function withFolders (files: Iterable<string>): Set<string> {
  const paths = new Set([''])
  for (const file of files) {
    if (file === '') continue
    for (let path = file; path !== '.' && !paths.has(path); path = dirname(path)) paths.add(path)
  }
  return paths
}

const trackedByRoot = new Map<string, Set<string>>()

/** The files git tracks under `root`, and their folders. */
function tracked (root: string): Set<string> {
  const known = trackedByRoot.get(root) ?? withFolders(execFileSync('git', ['ls-files', '-z'], { cwd: root, encoding: 'utf8', maxBuffer: 64 << 20 }).split('\0'))
  trackedByRoot.set(root, known)
  return known
}

/** What a link may point at: by default the files git tracks; `files` for a tree git does not know (an installed package). */
export interface LinkTargets {
  /** The document's text, when it is not the file's. */
  markdown?: string
  /** The files that exist, as paths from the root. */
  files?: Iterable<string>
}

/** Why a target does not resolve from `document`, or undefined when it does. */
function unresolved (root: string, document: string, { markdown, existing, where }: { markdown: string, existing: Set<string>, where: string }, target: string): string | undefined {
  const hash = target.indexOf('#')
  const rawPath = (hash === -1 ? target : target.slice(0, hash)).replace(/\?.*$/, '')
  let path: string
  let anchor: string | undefined
  try {
    path = decodeURIComponent(rawPath)
    anchor = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1))
  } catch { return 'a malformed %-encoding' }
  const file = path === '' ? join(root, document) : normalize(join(root, path.startsWith('/') ? '' : dirname(document), path))
  const from = relative(root, file).split(sep).join('/')
  if (from.startsWith('..')) return 'outside the repository'
  if (path !== '' && !existing.has(from.replace(/\/$/, ''))) return `no file or folder ${from} ${where}`
  if (anchor === undefined) return undefined
  if (path !== '' && !from.endsWith('.md')) return 'an anchor into what is not a markdown file'
  const text = path === '' ? markdown : readFileSync(file, 'utf8')
  return anchors(text).has(anchor) ? undefined : `no heading #${anchor} in ${from}`
}

/**
 * The broken relative links of `document` (a path from `root`), each as
 * `<document>:<line>: <target>: <why>`. Links with a scheme (`https:`, `mailto:`)
 * or to another host (`//host/…`) are not checked.
 */
export function brokenLinks (root: string, document: string, targets: LinkTargets = {}): string[] {
  const markdown = targets.markdown ?? readFileSync(join(root, document), 'utf8')
  const existing = targets.files === undefined ? tracked(root) : withFolders(targets.files)
  const where = targets.files === undefined ? 'tracked by git' : 'among the given files'
  const { links: found, undefined: references } = parse(markdown)
  const broken = references.map(({ line, target }) => `${document}:${line}: [${target}]: no reference definition [${target}]:`)
  for (const { line, target } of found) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//')) continue
    const why = unresolved(root, document, { markdown, existing, where }, target)
    if (why !== undefined) broken.push(`${document}:${line}: ${target}: ${why}`)
  }
  return broken.sort((a, b) => Number(a.split(':')[1]) - Number(b.split(':')[1]))
}
