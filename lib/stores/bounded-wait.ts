/**
 * The Redis store's bounded wait: no call to Redis is waited on much longer than
 * `timeoutMs` (the store's option, default 50 ms), whatever the client does
 * (ioredis's offline queue, for one, can hold a command for as long as it is
 * disconnected).
 *
 * A timeout means that Redis did not answer, not that this process was busy. Node
 * runs expired timers before it polls for I/O: after the event loop was held for
 * longer than `timeoutMs` (a GC pause, a CPU-heavy handler, a burst of requests),
 * the timer would fire while the reply already waits in the socket, and every such
 * pause would become a failover. So when the timer fires, the wait yields to one
 * poll phase (`setImmediate` runs right after it) and fails only if the reply has
 * not been read by then.
 */

/**
 * Settles as `call` does, or rejects when `call` has not settled within `timeoutMs`
 * ms and one poll for I/O after that.
 */
export function withTimeout<T> (call: Promise<T>, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      // A no-op when the poll phase read the reply: the promise is settled by then.
      setImmediate(() => { reject(new Error(`fastify-tollgate: Redis did not answer within ${timeoutMs} ms`)) })
    }, timeoutMs)
    call.then(
      (value) => { clearTimeout(timer); resolve(value) },
      (error: Error) => { clearTimeout(timer); reject(error) }
    )
  })
}
