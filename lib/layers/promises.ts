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

/** A request's end, as a step that continues after a promise holds it. */
interface End {
  request: { log: { error: (object: object, message: string) => void } }
  done: (error?: Error) => void
}

/**
 * Runs `then`, what a step does once a promise it waited on settles (a store's
 * answer, a key or cost that came later): what `then` throws ends the request
 * through Fastify's error path, `end.done(error)` (a 500, logged by Fastify), as a
 * throw in the hook itself would, never an unhandled rejection. `end.done` is
 * called once: after it was, a throw is only logged, and a later call is ignored.
 */
export function endOnThrow (end: End, then: () => void): void {
  const done = end.done
  let ended = false
  end.done = (error) => {
    if (ended) return
    ended = true
    done(error)
  }
  try {
    then()
  } catch (error) {
    if (ended) {
      end.request.log.error({ err: error }, 'fastify-tollgate: a rate-limit step threw after its request was answered')
    } else {
      ended = true
      done(error instanceof Error ? error : new Error(`fastify-tollgate: a rate-limit step threw ${String(error)}`, { cause: error }))
    }
  }
}

/**
 * `then(value)` once `value` resolves, run by `endOnThrow`; a rejection ends the
 * request with its error (a 500) the same way.
 */
export function continueAfter<T> (end: End, value: PromiseLike<T>, then: (value: T) => void): void {
  thenSafely(value,
    (settled) => { endOnThrow(end, () => { then(settled) }) },
    (error: unknown) => { endOnThrow(end, () => { throw error }) })
}
