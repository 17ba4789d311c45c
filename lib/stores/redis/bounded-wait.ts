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
 *   it was last judged; otherwise it is judged again `timeoutMs` later.
 *
 * No timer per call: one per connection ticks every `timeoutMs` / 2 while calls
 * wait on it, and a call fails at the second tick in a row, after the first one it
 * waited through, with no call on its connection answered. So a frozen Redis fails
 * a call `timeoutMs` to 1.5 × `timeoutMs` after it was sent (if the event loop is
 * free), and while Redis keeps answering, a call waits for the calls ahead of it on
 * its connection, each allowed `timeoutMs` of Redis's silence.
 * Only an answered call counts: a reply longer than one poll reads (thousands of
 * decisions of several buckets in one call) is not seen arriving.
 */

/** Ticks in a `timeoutMs`: a call fails after this many in a row with no answer on its connection. */
const QUIET_TICKS = 2

/** One call being waited for: how it ends is told by `answered` or `failed`, or its timeout comes first. */
export interface Watch {
  /** The call was answered (counted for its connection); false when it had timed out already. */
  answered (): boolean
  /** The call failed; false when it had timed out already. */
  failed (): boolean
}

/** The calls waiting on one connection, and its tick. */
interface Connection {
  /** Calls answered on it so far. */
  answered: number
  /** Calls not ended yet: the timer keeps the process alive only while there are some. */
  pending: number
  /** The calls sent since the last tick, and those older still waiting (ended ones are dropped at each tick). */
  waiting: Watched[]
  timer: NodeJS.Timeout | undefined
}

class Watched implements Watch {
  /** Ended: answered, failed or timed out. */
  ended = false
  /** Ticks in a row with no call on its connection answered; −1 until the first tick since it was sent. */
  quiet = -1
  /** Its connection's answered count when it was sent, or when it was last judged. */
  seen: number

  constructor (private readonly connection: Connection, readonly expired: (error: Error) => void) {
    this.seen = connection.answered
  }

  answered (): boolean {
    this.connection.answered++
    return this.end()
  }

  failed (): boolean {
    return this.end()
  }

  /** Ends the wait, once: false when it had ended already. */
  end (): boolean {
    if (this.ended) return false
    this.ended = true
    const connection = this.connection
    if (--connection.pending === 0) connection.timer?.unref()
    return true
  }
}

export class BoundedWait {
  private readonly connections = new Map<string, Connection>()

  /** `timeoutMs`: how long a call waits with no call on its connection answered, in ms (≥ 1). */
  constructor (private readonly timeoutMs: number) {}

  /**
   * Starts waiting for a call just sent on `node` (the Cluster node it goes to; one
   * name for a single Redis). `expired` is called once if it times out before it is
   * told `answered` or `failed`.
   */
  watch (node: string, expired: (error: Error) => void): Watch {
    let connection = this.connections.get(node)
    if (connection === undefined) this.connections.set(node, connection = { answered: 0, pending: 0, waiting: [], timer: undefined })
    const watched = new Watched(connection, expired)
    // Ended calls are dropped at each tick, and in between once they outnumber the others (a long timeoutMs).
    if (connection.waiting.length > 64 && connection.waiting.length > 2 * connection.pending) connection.waiting = connection.waiting.filter((w) => !w.ended)
    connection.waiting.push(watched)
    if (connection.pending++ === 0) connection.timer?.ref()
    if (connection.timer === undefined) {
      const ticking = connection
      connection.timer = setInterval(() => { setImmediate(() => { this.judge(ticking) }) }, Math.max(1, this.timeoutMs / QUIET_TICKS))
    }
    return watched
  }

  /** Settles as `call` does, or rejects when it times out (see `watch`). */
  wait<T> (call: Promise<T>, node: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const watched = this.watch(node, reject)
      call.then(
        (value) => { if (watched.answered()) resolve(value) },
        (error: Error) => { if (watched.failed()) reject(error) }
      )
    })
  }

  /**
   * One tick of `connection`, a poll for I/O after its timer: each call that waited
   * through a tick before fails at the `QUIET_TICKS`th in a row with no call on the
   * connection answered. The timer stops when no call waits (it is unref'd
   * from the moment none does, so an idle connection holds no process open).
   */
  private judge (connection: Connection): void {
    const answered = connection.answered
    const waiting: Watched[] = []
    for (const watched of connection.waiting) {
      if (watched.ended) continue
      if (watched.seen !== answered || watched.quiet < 0) {
        watched.seen = answered
        watched.quiet = 0
      } else if (++watched.quiet >= QUIET_TICKS) {
        watched.end()
        watched.expired(new Error(`fastify-tollgate: Redis did not answer within ${this.timeoutMs} ms`))
        continue
      }
      waiting.push(watched)
    }
    connection.waiting = waiting
    if (waiting.length === 0) {
      clearInterval(connection.timer)
      connection.timer = undefined
    }
  }
}
