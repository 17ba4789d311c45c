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
