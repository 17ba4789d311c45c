/**
 * The open capacity protections of this process (layers/protect.ts), as the
 * metrics read them at a scrape (`tollgate_protect_*`, metrics.ts): each
 * registration's limit, requests in flight, overload and signal ratios.
 */

/** What a protection shows of its state. */
export interface ProtectionState {
  /** The registration's `name`; `undefined` for the one without. */
  readonly registration: string | undefined
  /** The limit on requests in flight (before priorities split it). */
  readonly limit: number
  readonly inFlight: number
  /** The smoothed overload: the largest signal over its target (1 = at target). */
  readonly overload: number
  /** Each signal's last reading over its target; `undefined`: none yet, or not watched. */
  readonly ratios: { readonly eventLoopDelay: number | undefined, readonly latency: number | undefined, readonly gauge: number | undefined }
  /** Closes an interval that ended without an admission (the signals read, the limit moved), as the next admission would. */
  refresh: () => void
}

const open = new Set<ProtectionState>()

/** Lists `state` until the returned function is called (when its app closes). */
export function openProtection (state: ProtectionState): () => void {
  open.add(state)
  return () => { open.delete(state) }
}

/** The open protections. */
export function protections (): IterableIterator<ProtectionState> {
  return open.values()
}
