/**
 * A log line that repeats per request (a predicate that throws, a token with a bad
 * quota) written at most once per interval, with `since`: the lines left out
 * since the last one written.
 */
export class ThrottledLog {
  private loggedAt = -Infinity
  private unlogged = 0

  /** `intervalMs`: the least time between two lines; `now`: a clock in ms. */
  constructor (private readonly intervalMs: number, private readonly now: () => number) {}

  /** Calls `write(since)` if the interval has passed since the last line, else counts the line left out. */
  log (write: (since: number) => void): void {
    const at = this.now()
    if (at - this.loggedAt >= this.intervalMs) {
      write(this.unlogged)
      this.loggedAt = at
      this.unlogged = 0
    } else {
      this.unlogged++
    }
  }
}

/**
 * One `ThrottledLog` per kind of line (each kind has its own interval), made at
 * its kind's first line; `clear()` forgets them all (the next line of each kind is
 * written at once).
 */
export class ThrottledLogs {
  private readonly kinds = new Map<string, ThrottledLog>()

  /** `intervalMs`: the least time between two lines of one kind; `now`: a clock in ms. */
  constructor (private readonly intervalMs: number, private readonly now: () => number) {}

  /** As `ThrottledLog.log`, for the lines of `kind`. */
  log (kind: string, write: (since: number) => void): void {
    let log = this.kinds.get(kind)
    if (log === undefined) {
      log = new ThrottledLog(this.intervalMs, this.now)
      this.kinds.set(kind, log)
    }
    log.log(write)
  }

  clear (): void {
    this.kinds.clear()
  }
}
