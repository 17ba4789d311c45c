/** Promises where the plugin meets code it does not own: a store's answer, a user function's. */

/**
 * Whether `value` is a promise (anything with a `then` method): a store or a user
 * function that answers later. A `then` that cannot be read (a Proxy whose getter
 * throws) is no promise: the value is then taken as it is.
 */
export function isThenable<T> (value: T | PromiseLike<T>): value is PromiseLike<T> {
  if (typeof value !== 'object' && typeof value !== 'function') return false
  try {
    return typeof (value as { then?: unknown } | null)?.then === 'function'
  } catch {
    return false
  }
}

/**
 * Calls `value.then(onValue, onError)` and catches what that call returns when it
 * is itself a promise that rejects (a hand-made thenable whose `then` is async):
 * nothing it does becomes an unhandled rejection. A `then` that throws throws here.
 */
export function thenSafely<T> (value: PromiseLike<T>, onValue: (value: T) => void, onError: (error: unknown) => void): void {
  const returned: unknown = value.then(onValue, onError)
  if (isThenable(returned)) returned.then(undefined, () => {})
}
