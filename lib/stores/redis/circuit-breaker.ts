/**
 * The Redis store's circuit breaker. After `threshold` consecutive failed calls it
 * opens: the store stops calling Redis and decides by `failMode` at once. Every
 * `probeIntervalMs` one call goes to Redis as a probe; its success closes the
 * breaker, its failure opens it for another interval.
 */

/** `'closed'`: Redis in use. `'open'`: failing over. `'probing'`: one call is testing Redis. */
export type BreakerState = 'closed' | 'open' | 'probing'

export class CircuitBreaker {
  private current: BreakerState = 'closed'
  private consecutiveFailures = 0
  /** When the next probe may go, in ms of the store's clock. */
  private probeAtMs = 0

  /**
   * @param threshold consecutive failed calls that open the breaker (≥ 1; the store's default 3)
   * @param probeIntervalMs while open, the time between two probes, in ms (the store's default 1000)
   */
  constructor (private readonly threshold: number, private readonly probeIntervalMs: number) {}

  get state (): BreakerState {
    return this.current
  }

  /**
   * Whether a call may go to Redis at `nowMs`. While open, the first call past the
   * probe time is allowed and becomes the probe; the others are not, until it answers.
   */
  allows (nowMs: number): boolean {
    if (this.current === 'closed') return true
    if (this.current === 'probing' || nowMs < this.probeAtMs) return false
    this.current = 'probing'
    return true
  }

  /** A call answered. Returns true when this closed an open breaker: Redis is back. */
  succeeded (): boolean {
    this.consecutiveFailures = 0
    if (this.current === 'closed') return false
    this.current = 'closed'
    return true
  }

  /** A call failed (an error or a timeout) at `nowMs`. Returns true when this opened a closed breaker: Redis is gone. */
  failed (nowMs: number): boolean {
    this.consecutiveFailures++
    const opened = this.current === 'closed' && this.consecutiveFailures >= this.threshold
    if (opened || this.current === 'probing') {
      this.current = 'open'
      this.probeAtMs = nowMs + this.probeIntervalMs
    }
    return opened
  }
}
