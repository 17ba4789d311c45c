/**
 * Capacity protection's priorities: the requests in flight counted by level,
 * and which level a limit admits. Level 0 (critical routes) is the highest, then
 * the tiers, highest first; level `i` of `n` has the share `(n − i) / n` of the
 * limit. A request of a level is admitted while the requests in flight of its
 * level and every higher one are fewer than the limit times its share: lower
 * priorities never count against a higher one. Whenever a level is admitted,
 * every higher one is too (its count is no larger, its share larger).
 */

/** A priority level: its place (0 is the highest) and its share of the limit. */
export interface Level {
  readonly index: number
  readonly share: number
}

export class PriorityLevels {
  /** The levels, highest first. */
  readonly levels: readonly Level[]
  /** Requests in flight, all levels together. */
  total = 0
  private readonly counts: number[]

  constructor (count: number) {
    this.levels = Array.from({ length: count }, (_, index) => ({ index, share: (count - index) / count }))
    this.counts = this.levels.map(() => 0)
  }

  /** The requests in flight of `level` and every higher one: what its share of the limit bounds. */
  countUpTo (level: Level): number {
    let count = 0
    for (let i = 0; i <= level.index; i++) count += this.counts[i] as number
    return count
  }

  /** The requests in flight `level` may have under `limit`, its own and the higher levels': its share of the limit, rounded up. */
  capacity (level: Level, limit: number): number {
    return Math.ceil(limit * level.share)
  }

  /** Whether a request of `level` is admitted under `limit`. */
  admits (level: Level, limit: number): boolean {
    return this.countUpTo(level) < this.capacity(level, limit)
  }

  /** Counts a request of `level` in; returns the limit in use with it (its level's count over its share). */
  enter (level: Level): number {
    this.total++
    ;(this.counts[level.index] as number)++
    return this.countUpTo(level) / level.share
  }

  leave (level: Level): void {
    this.total--
    ;(this.counts[level.index] as number)--
  }

  /** The least limit under which every request in flight would be admitted now. */
  inUse (): number {
    let use = 0
    let count = 0
    this.counts.forEach((n, index) => {
      count += n
      use = Math.max(use, count / (this.levels[index] as Level).share)
    })
    return use
  }
}
