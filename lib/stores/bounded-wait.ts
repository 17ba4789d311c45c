/**
 * The Redis store's bounded wait: no call to Redis is waited on longer than
 * `timeoutMs` (the store's option, default 50 ms), whatever the client does
 * (ioredis's offline queue, for one, can hold a command for as long as it is
 * disconnected).
 */

/** Settles as `call` does, or rejects when `call` has not settled within `timeoutMs` ms. */
export function withTimeout<T> (call: Promise<T>, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => { reject(new Error(`fastify-tollgate: Redis did not answer within ${timeoutMs} ms`)) }, timeoutMs)
    call.then(
      (value) => { clearTimeout(timer); resolve(value) },
      (error: Error) => { clearTimeout(timer); reject(error) }
    )
  })
}
