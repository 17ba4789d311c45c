/**
 * The relative links of the repository's markdown documents, checked as GitHub
 * resolves them: a path from the document's folder (from the repository's root
 * when it starts with `/`) to a file or folder git tracks, and a `#anchor`
 * (%-decoded) to a heading of the target (or of the document itself), slugged as
 * GitHub slugs headings, or to an HTML `id`/`name` there.
 *
 * A link is what CommonMark reads as one (markdown.ts): an inline or reference
 * link or image, an autolink, at its line (a reference link at its use: a
 * definition no link uses shows nothing), its destination as the parser gives it
 * (escapes and entities decoded, %-encoded as an `href`); or an HTML `href`/`src`
 * (quoted or not) outside HTML comments. A `[text][ref]` no definition names is
 * broken (an escaped `\[text\]\[ref\]` is read as one too: write it otherwise).
 */
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { dirname, join, normalize, relative, sep } from 'node:path'
import { located, newlines, plainText, withoutComments, type Located } from './markdown.js'

/** A link found in a document: where, and what it points to. */
export interface Link {
  line: number
  target: string
}

const TAG = /<[a-z][\w-]*(\s[^<>]*)>/gi
const ATTRIBUTE = /\s(href|src|id|name)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))/gi
const REFERENCE = /\[([^[\]]*)\]\[([^[\]]*)\]/g

/** The attributes named `names` of the HTML tags of the HTML nodes among `nodes` (comments left out), each at its line. */
function attributes (nodes: Located[], names: RegExp): Link[] {
  const found: Link[] = []
  for (const { node, line } of nodes) {
    if (node.type !== 'html_block' && node.type !== 'html_inline') continue
    const text = withoutComments(node.literal ?? '')
    for (const tag of text.matchAll(TAG)) {
      const start = tag.index + tag[0].length - 1 - (tag[1]?.length ?? 0)
      for (const attribute of (tag[1] ?? '').matchAll(ATTRIBUTE)) {
        if (!names.test(attribute[1] ?? '')) continue
        const at = line + newlines(text.slice(0, start + attribute.index + 1))
        found.push({ line: at, target: attribute[2] ?? attribute[3] ?? attribute[4] ?? '' })
      }
    }
  }
  return found
}

/** The `[text][ref]` and `[ref][]` that CommonMark leaves as text: no definition names them. Each names its label. */
function undefinedReferences (nodes: Located[]): Link[] {
  const runs: Link[] = []
  for (const { node, line } of nodes) {
    if (node.type !== 'text') continue
    const run = runs.at(-1)
    if (node.prev?.type === 'text' && run !== undefined) run.target += node.literal ?? ''
    else runs.push({ line, target: node.literal ?? '' })
  }
  return runs.flatMap(({ line, target: text }) => [...text.matchAll(REFERENCE)]
    .map((match) => ({ line, target: match[2] === '' ? match[1] ?? '' : match[2] ?? '' }))
    .filter(({ target }) => target.trim() !== ''))
}

/** The links of a markdown text, and its `[text][ref]` references that no definition names. */
function parse (markdown: string): { links: Link[], undefined: Link[] } {
  const nodes = located(markdown)
  const found: Link[] = []
  for (const one of nodes) {
    const { node, line } = one
    if (node.type === 'link' || node.type === 'image') found.push({ line, target: node.destination ?? '' })
    else found.push(...attributes([one], /^(?:href|src)$/i))
  }
  return { links: found, undefined: undefinedReferences(nodes) }
}

/** Every link target of a markdown text, in document order: links and images, autolinks, HTML `href`/`src`. */
export const links = (markdown: string): Link[] => parse(markdown).links

/** GitHub's anchor for a heading's text as a reader sees it: lower-cased, punctuation dropped, each space a hyphen. */
const githubSlug = (text: string): string => text.trim().toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '').replace(/ /g, '-')

/** GitHub's anchor for a heading written `heading` (markdown: code, emphasis, links, tags and entities as rendered). */
export function slug (heading: string): string {
  const node = located(`# ${heading}`).find((one) => one.node.type === 'heading')?.node
  return githubSlug(node === undefined ? '' : plainText(node))
}

/** The anchors of a markdown text: its headings', repeated ones numbered (`-1`, `-2`) as GitHub numbers them, and HTML `id`s and `name`s. */
export function anchors (markdown: string): Set<string> {
  const nodes = located(markdown)
  const counts = new Map<string, number>()
  const found = new Set<string>()
  for (const { node } of nodes.filter((one) => one.node.type === 'heading')) {
    const base = githubSlug(plainText(node))
    let anchor = base
    while (found.has(anchor)) {
      counts.set(base, (counts.get(base) ?? 0) + 1)
      anchor = `${base}-${counts.get(base) ?? 0}`
    }
    found.add(anchor)
  }
  for (const { target } of attributes(nodes, /^(?:id|name)$/i)) found.add(target)
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
