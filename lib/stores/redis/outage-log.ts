/**
 * The Redis store's log: the app's logger (silent until the plugin gives it), and
 * the lines of an outage, each kind at most once per `logIntervalMs` (of
 * `Date.now()`), with `suppressed`: how many lines of that kind were held back
 * since the last one written.
 */
import { ThrottledLogs } from '../../output/throttled-log.js'
import type { StoreLogger } from '../../types/store.js'

const ignore = (): void => {}
const silent: StoreLogger = { info: ignore, warn: ignore, error: ignore }

export class OutageLog {
  /** The app's logger (`useLogger`). */
  logger: StoreLogger = silent
  private readonly kinds: ThrottledLogs

  constructor (logIntervalMs: number) {
    this.kinds = new ThrottledLogs(logIntervalMs, Date.now)
  }

  /** Logs `message` with `details` at `level`, unless a line of `kind` was written less than `logIntervalMs` ago. */
  line (level: keyof StoreLogger, kind: string, details: Record<string, unknown>, message: string): void {
    this.kinds.log(kind, (suppressed) => { this.logger[level]({ ...details, suppressed }, message) })
  }

  /** Redis answers again: the next line of every kind is written at once. */
  clear (): void {
    this.kinds.clear()
  }
}
