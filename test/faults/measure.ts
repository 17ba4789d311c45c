/**
 * What a run measured, from the load's samples and the replicas' store events:
 * admitted in the window, answers other than the expected ones, recovery time
 * and failovers.
 */
import type { Sample } from './load.js'
import type { StoreEvent } from './processes.js'

/** 200s whose request was sent at or after the window's start and answered at or before its end. */
export function admittedIn (samples: Sample[], startMs: number, endMs: number): number {
  let admitted = 0
  for (const sample of samples) {
    if (sample.status === 200 && sample.sentMs >= startMs && sample.receivedMs <= endMs) admitted++
  }
  return admitted
}

/**
 * Answers with a status outside `allowed`, by status (0: a failed request), but
 * not a failed request to a replica a fault killed, answered after the kill.
 */
export function unexpectedAnswers (samples: Sample[], allowed: ReadonlySet<number>, killedAtMs: ReadonlyMap<number, number>): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const sample of samples) {
    if (allowed.has(sample.status)) continue
    const killedAt = killedAtMs.get(sample.replica)
    if (sample.status === 0 && killedAt !== undefined && sample.receivedMs >= killedAt) continue
    counts[sample.status] = (counts[sample.status] ?? 0) + 1
  }
  return counts
}

/** Store 'degraded' events received at or after `fromMs`. */
export function failovers (events: StoreEvent[], fromMs: number): number {
  return events.filter((event) => event.event === 'degraded' && event.atMs >= fromMs).length
}

/**
 * Ms from the fault's end until every replica that degraded since the fault
 * began was restored (its first 'restored' after the fault's end, on any of its
 * stores); 0 when none degraded; undefined when one was never restored.
 */
export function recoveryMs (events: StoreEvent[], faultStartMs: number, faultEndMs: number): number | undefined {
  const degraded = new Set(events.filter((event) => event.event === 'degraded' && event.atMs >= faultStartMs).map((event) => `${event.replica}/${event.store}`))
  let latest = faultEndMs
  for (const key of degraded) {
    const restored = events.find((event) => event.event === 'restored' && event.atMs >= faultEndMs && `${event.replica}/${event.store}` === key)
    if (restored === undefined) {
      const degradedAgainOrStill = !events.some((event) => event.event === 'restored' && `${event.replica}/${event.store}` === key && event.atMs >= faultStartMs)
      if (degradedAgainOrStill) return undefined
      continue // restored before the fault ended
    }
    latest = Math.max(latest, restored.atMs)
  }
  return latest - faultEndMs
}

/** Answers by status, e.g. `{ 200: 331, 429: 1502 }`. */
export function statusCounts (samples: Sample[]): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const sample of samples) counts[sample.status] = (counts[sample.status] ?? 0) + 1
  return counts
}
