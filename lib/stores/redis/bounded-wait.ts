/**
 * The Redis store's bounded wait: a call to Redis fails (and the store decides by
 * `failMode`) once it has waited `timeoutMs` (the store's option, default 50 ms)
 * with no reply from Redis on its connection, whatever the client does (ioredis's
 * offline queue, for one, can hold a command for as long as it is disconnected).
 *
 * A timeout means that Redis did not answer, not that this process was busy:
 * - Node runs expired timers before it polls for I/O: after the event loop was held
 *   for longer than `timeoutMs` (a GC pause, a CPU-heavy handler, a burst of
 *   requests), the timer fires while the reply already waits in the socket. So
 *   when the timer fires, the wait yields to one poll phase (`setImmediate` runs
 *   right after it) before it judges.
 * - One poll reads only what the socket buffers hold (about 64 KB at a time): when
 *   several calls were answered during the pause, the later replies are still in
 *   Redis's output buffer, and each one read can hold the event loop again (its
 *   decisions answer requests). Replies on one connection come in order, so a call
 *   fails only if no call on its connection (its Cluster node) was answered since
 *   its timer was set; otherwise the timer is set again for `timeoutMs`.
 *
 * So a frozen Redis fails a call `timeoutMs` to 2 × `timeoutMs` after it was sent
 * (if the event loop is free), and while Redis keeps answering, a call waits for the
 * calls ahead of it on its connection, each allowed `timeoutMs` of Redis's silence.
 * Only an answered call counts: a reply longer than one poll reads (thousands of
 * decisions of several buckets in one call) is not seen arriving.
 */
export class BoundedWait {
  /** Per connection (`node`), how many of its calls have been answered so far. */
  private readonly answered = new Map<string, number>()

  /** `timeoutMs`: how long a call waits with no call on its connection answered, in ms (≥ 1). */
  constructor (private readonly timeoutMs: number) {}

  /**
   * Settles as `call` does, or rejects when its timer (`timeoutMs`) fired and, one
   * poll for I/O later, no call on `node` (the Cluster node the call goes to; one
   * name for a single Redis) has been answered since the timer was set. Otherwise
   * the timer is set again.
   */
  wait<T> (call: Promise<T>, node: string): Promise<T> {
    const timeoutMs = this.timeoutMs
    return new Promise<T>((resolve, reject) => {
      let settled = false
      let answeredBefore = this.answered.get(node) ?? 0
      const judge = (): void => {
        if (settled) return // the poll phase read the reply
        const answeredNow = this.answered.get(node) ?? 0
        if (answeredNow === answeredBefore) {
          reject(new Error(`fastify-tollgate: Redis did not answer within ${timeoutMs} ms`))
          return
        }
        answeredBefore = answeredNow
        timer = setTimeout(expired, timeoutMs)
      }
      const expired = (): void => { setImmediate(judge) }
      let timer = setTimeout(expired, timeoutMs)
      call.then(
        (value) => {
          settled = true
          clearTimeout(timer)
          this.answered.set(node, (this.answered.get(node) ?? 0) + 1)
          resolve(value)
        },
        (error: Error) => {
          settled = true
          clearTimeout(timer)
          reject(error)
        }
      )
    })
  }
}
