/**
 * The relative links of the repository's markdown documents, checked as GitHub
 * resolves them: a path from the document's folder to a file or folder that
 * exists, and a `#anchor` to a heading of the target (or of the document itself),
 * slugged as GitHub slugs headings.
 */
import { existsSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, normalize, relative } from 'node:path'

/** A link found in a document: where, and what it points to. */
export interface Link {
  line: number
  target: string
}

/** Lines of a markdown text outside fenced code blocks, with their 1-based numbers. */
function proseLines (markdown: string): Array<{ line: number, text: string }> {
  const found: Array<{ line: number, text: string }> = []
  let fence: string | undefined
  markdown.split('\n').forEach((text, i) => {
    const marker = /^\s*(`{3,}|~{3,})/.exec(text)?.[1]
    if (marker !== undefined) {
      if (fence === undefined) fence = marker[0]
      else if (marker[0] === fence) fence = undefined
      return
    }
    if (fence === undefined) found.push({ line: i + 1, text })
  })
  return found
}

/** Every link target of a markdown text: `[text](target)`, `![alt](target)`, `src="…"`, `href="…"`; none inside code. */
export function links (markdown: string): Link[] {
  const found: Link[] = []
  for (const { line, text } of proseLines(markdown)) {
    const prose = text.replace(/(`+)[^`]*?\1/g, '')
    for (const match of prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)|(?:src|href)="([^"]+)"/g)) {
      found.push({ line, target: match[1] ?? match[2] ?? '' })
    }
  }
  return found
}

/** GitHub's anchor for a heading's text: its rendered text lower-cased, punctuation dropped, each space a hyphen. */
export function slug (heading: string): string {
  const rendered = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link shows its text
    .replace(/<[^>]+>/g, '') // tags show nothing
    .replace(/`/g, '')
  return rendered.trim().toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '').replace(/ /g, '-')
}

/** The anchors of a markdown text's headings, repeated ones numbered (`-1`, `-2`) as GitHub numbers them. */
export function anchors (markdown: string): Set<string> {
  const seen = new Map<string, number>()
  const found = new Set<string>()
  for (const { text } of proseLines(markdown)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(text)
    if (heading === null) continue
    const base = slug(heading[1] as string)
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    found.add(count === 0 ? base : `${base}-${count}`)
  }
  return found
}

/**
 * The broken relative links of `document` (a path from `root`), each as
 * `<document>:<line>: <target>: <why>`. Links with a scheme (`https:`, `mailto:`)
 * are not checked.
 */
export function brokenLinks (root: string, document: string, markdown = readFileSync(join(root, document), 'utf8')): string[] {
  const broken: string[] = []
  for (const { line, target } of links(markdown)) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue
    const [rawPath = '', anchor] = target.split('#', 2)
    const path = decodeURIComponent(rawPath)
    const file = path === '' ? join(root, document) : normalize(join(root, dirname(document), path))
    const fail = (why: string): void => { broken.push(`${document}:${line}: ${target}: ${why}`) }
    if (relative(root, file).startsWith('..')) { fail('outside the repository'); continue }
    if (path !== '' && !existsSync(file)) { fail(`no file ${relative(root, file)}`); continue }
    if (anchor === undefined) continue
    if (path !== '' && (statSync(file).isDirectory() || !file.endsWith('.md'))) { fail('an anchor into what is not a markdown file'); continue }
    const text = path === '' ? markdown : readFileSync(file, 'utf8')
    if (!anchors(text).has(anchor)) fail(`no heading #${anchor} in ${relative(root, file)}`)
  }
  return broken
}
