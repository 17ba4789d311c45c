/** Promises where the plugin meets code it does not own: a store's answer, a user function's. */

/** Whether `value` is a promise (anything with a `then` method): a store that answers later. */
export function isThenable<T> (value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === 'function'
}
