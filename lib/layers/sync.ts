/** User functions that must answer synchronously (`app.identify`, `edge.key`, a route's cost). */

/**
 * Whether a user function returned a promise where a value was due. Its rejection
 * is then handled here, so that it cannot become an unhandled rejection (which
 * ends the process by default).
 */
export function isPromise (value: unknown): boolean {
  const then = (value as { then?: unknown } | null | undefined)?.then
  if (typeof then !== 'function') return false
  ;(value as PromiseLike<unknown>).then(undefined, () => {})
  return true
}
