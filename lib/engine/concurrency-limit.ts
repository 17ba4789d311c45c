/**
 * Capacity protection's control law: a limit on the requests in flight, moved
 * once per interval by how far the service's health signals are over their
 * targets. No clock and no I/O here: the caller measures an interval and hands
 * it over (layers/protect.ts); tests drive it with a table of intervals.
 *
 * - `overload`: the largest ratio of a signal to its target in the interval
 *   (1 = at target). Smoothed with a fast attack and a slow decay: a ratio above
 *   the smoothed one is taken at once, one below it is approached by `DECAY`
 *   of the gap per interval, so one quiet interval does not undo a cut.
 * - over target (smoothed > 1): multiplicative decrease from the concurrency in
 *   use, `limit = max(floor, min(limit, inUse) × max(MAX_CUT, 1 / overload))`:
 *   twice the target halves it (the most one interval cuts), 10% over cuts 9%.
 * - at or under target, after an interval that shed requests: the limit probes
 *   upward, up to `max`: it doubles until its first cut (slow start, as TCP's),
 *   then grows by `GROWTH` of itself (at least 1). A limit that sheds nothing
 *   does not grow: it stays near the concurrency the service uses, so a sudden
 *   flood meets it at once.
 */

/** The largest overload taken from one reading: a single absurd reading decays within 7 intervals. */
export const MAX_OVERLOAD = 100
/** The largest cut in one interval: to half. */
export const MAX_CUT = 0.5
/** The share of the gap a smoothed overload closes per interval when the signals fall. */
export const DECAY = 0.5
/** The probe: the limit grows by this share of itself per healthy interval that shed. */
export const GROWTH = 0.1

/** The bounds of the limit: never below `min` (the service never sheds to zero), never above `max`. */
export interface LimitBounds {
  readonly min: number
  readonly max: number
}

/** One interval, as the caller measured it. */
export interface Interval {
  /** The largest ratio of a signal to its target (0 when no signal had a reading). */
  readonly overload: number
  /**
   * The limit in use during the interval: the least limit under which every
   * request it admitted would have passed (for a single priority, the most
   * requests in flight at once).
   */
  readonly inUse: number
  /** Requests shed (or, in shadow mode, that would have been) during the interval. */
  readonly shed: number
}

/** Where the limit starts (within the bounds). */
export const INITIAL_LIMIT = 20

/** The limit on requests in flight, and the smoothed overload it follows. */
export class ConcurrencyLimit {
  /** The requests in flight at most, before priorities split it (see `admits`). */
  limit: number
  /** The smoothed overload (1 = the signals at their targets). */
  overload = 0
  /** Whether the limit was ever cut: until then, it grows by doubling. */
  private cut = false

  constructor (private readonly bounds: LimitBounds, initial?: number) {
    this.limit = clamp(initial ?? INITIAL_LIMIT, bounds.min, bounds.max)
  }

  /** Moves the limit after one interval. */
  update (interval: Interval): void {
    const { min, max } = this.bounds
    const seen = Number.isNaN(interval.overload) ? this.overload : Math.min(MAX_OVERLOAD, Math.max(0, interval.overload))
    this.overload = seen >= this.overload ? seen : this.overload + DECAY * (seen - this.overload)
    if (this.overload > 1) {
      const inUse = Math.min(this.limit, Math.max(interval.inUse, min))
      this.limit = clamp(inUse * Math.max(MAX_CUT, 1 / this.overload), min, max)
      this.cut = true
    } else if (interval.shed > 0) {
      this.limit = clamp(this.cut ? this.limit + Math.max(1, this.limit * GROWTH) : this.limit * 2, min, max)
    }
  }

  /** `intervals` that passed without a reading: the overload decays over each, the limit stays. */
  rest (intervals: number): void {
    for (let i = 0; i < intervals; i++) this.overload -= DECAY * this.overload
  }

  /**
   * An estimate of the ms until a request of `share`, shed with `inFlight` in
   * flight, would be admitted at the same load: the intervals for the overload to
   * decay to its target, then for the limit to grow to `inFlight / share`.
   */
  recoveryMs (inFlight: number, share: number, intervalMs: number): number {
    const decaying = this.overload > 1 ? Math.ceil(Math.log(this.overload) / Math.log(1 / (1 - DECAY))) : 0
    const needed = Math.min(this.bounds.max, (inFlight + 1) / share)
    const growing = needed > this.limit ? Math.ceil(Math.log(needed / this.limit) / Math.log(this.cut ? 1 + GROWTH : 2)) : 1
    return (decaying + growing) * intervalMs
  }
}

const clamp = (value: number, min: number, max: number): number => Math.min(max, Math.max(min, value))
