/** Promises where the plugin meets code it does not own: a store's answer, a user function's. */

/** Whether `value` is a promise (anything with a `then` method): a store that answers later. */
export function isThenable<T> (value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === 'function'
}

/**
 * Whether a user function that must answer synchronously (`app.identify`,
 * `edge.key`, a route's cost, `allowList.match`) returned a promise where a value
 * was due. Its rejection is then handled here, so that it cannot become an
 * unhandled rejection (which ends the process by default).
 */
export function returnedPromise (value: unknown): boolean {
  if (!isThenable(value)) return false
  value.then(undefined, () => {})
  return true
}
