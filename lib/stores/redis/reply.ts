/** How the scripts' replies are read: every number comes back as a string (scripts/*.lua). */

/** Parses a number the script formatted with %.17g (`inf` included); throws on anything else. */
export function parseNumber (text: unknown): number {
  if (text === 'inf') return Infinity
  const value = Number(text)
  if (Number.isNaN(value)) throw new Error(`fastify-tollgate: unexpected reply from the Redis script: ${String(text)}`)
  return value
}
