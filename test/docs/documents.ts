/**
 * The repository's markdown documents the documentation tests read, listed in
 * one place: blocks.test.ts checks their ts blocks, links.test.ts their links.
 */
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = fileURLToPath(new URL('../../../', import.meta.url))

/** Every markdown file under docs/, its subfolders included (docs/decisions/), as `docs/…` paths, sorted. */
export const pages = (readdirSync(join(ROOT, 'docs'), { recursive: true, encoding: 'utf8' }))
  .filter((file) => file.endsWith('.md')).map((file) => `docs/${file.replaceAll('\\', '/')}`).sort()

/** The documents at the repository's root (those present), then the pages of docs/. */
export const documents = [
  ...['README.md', 'MIGRATING.md', 'CONTRIBUTING.md', 'ARCHITECTURE.md', 'CHANGELOG.md'].filter((file) => existsSync(join(ROOT, file))),
  ...pages
]
