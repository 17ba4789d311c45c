/**
 * The shadow-mode report: which clients and tiers would have been refused most
 * in the last minutes, to size limits from real traffic before turning them on.
 *
 * Kept in one slice per minute of this process's clock, the last `minutes`
 * slices only. A slice counts each would-be refusal for its client (the layer's
 * bucket key up to its hash tag: `{ip:203.0.113.7}`, `{user:42}`) and its tier,
 * and, for each, which limits lacked the tokens. A slice holds at most `keys`
 * clients: when a new one finds it full, the half with the fewest refusals is
 * dropped and their count moves to `untracked`, so memory stays bounded under
 * rotating keys while a client that keeps flooding is never dropped and is
 * counted exactly.
 */
import type { LimitDecision } from './options.js'

export interface ShadowReportOptions {
  /** Minutes the report covers, 1 to 60. Default 10. */
  minutes?: number | undefined
  /** Most clients kept per minute, 10 to 100 000. Default 1 000. */
  keys?: number | undefined
}

/** Would-be refusals of one client or one tier, and, by limit name, how many of them that limit refused. */
export interface ShadowCount {
  layer: 'edge' | 'app'
  /** The app layer's tier. */
  tier?: string
  wouldRefuse: number
  /** Limit name (`edge`, `app`, `hour`, `route`, …) → would-be refusals in which it lacked the tokens. */
  limits: Record<string, number>
}

export interface ShadowClientCount extends ShadowCount {
  /** The client as its bucket keys name it: `{ip:203.0.113.7}`, `{user:42}`, `{key:<digest>}`. */
  client: string
}

export interface ShadowReport {
  /** Whether the plugin runs in shadow mode: otherwise nothing is counted and the lists are empty. */
  shadow: boolean
  /** The minutes covered: the current one and those before it, `shadowReport.minutes` or fewer since the plugin started. */
  minutes: number
  /** Would-be refusals in those minutes. */
  wouldRefuse: number
  /** Of those, the ones counted for no listed client: clients dropped for room (see `shadowReport.keys`). */
  untracked: number
  /** The clients with the most would-be refusals, most first. */
  clients: ShadowClientCount[]
  /** Every tier (and the edge) with would-be refusals, most first. */
  tiers: ShadowCount[]
}

interface Slice {
  minute: number
  wouldRefuse: number
  untracked: number
  clients: Map<string, ShadowClientCount>
  tiers: Map<string, ShadowCount>
}

const MINUTE_MS = 60_000

/** The client part of a layer's bucket key, which always begins with its hash tag: `{user:42}` of `{user:42}:app`. */
function clientOf (key: string): string {
  return key.slice(0, key.indexOf('}') + 1)
}

function add (into: ShadowCount, wouldRefuse: number, limits: Record<string, number>): void {
  into.wouldRefuse += wouldRefuse
  for (const name of Object.keys(limits)) into.limits[name] = (into.limits[name] ?? 0) + (limits[name] as number)
}

/** The entry of `key` in `into`, made from `like` with no count when there is none. */
function entryOf<C extends ShadowCount> (into: Map<string, C>, key: string, like: C): C {
  let entry = into.get(key)
  if (entry === undefined) {
    entry = { ...like, wouldRefuse: 0, limits: {} }
    into.set(key, entry)
  }
  return entry
}

function byCount (a: ShadowCount, b: ShadowCount): number {
  return b.wouldRefuse - a.wouldRefuse
}

export class ShadowCounter {
  private readonly slices: Slice[] = []
  private readonly startMinute: number

  /**
   * @param minutes slices kept (the report's reach)
   * @param maxClients most clients per slice
   * @param clock this process's clock, in ms
   */
  constructor (private readonly minutes: number, private readonly maxClients: number, private readonly clock: () => number) {
    this.startMinute = Math.floor(clock() / MINUTE_MS)
  }

  /** Counts a would-be refusal; `costs[i]` is what `limit.buckets[i]` was asked for. */
  record (limit: LimitDecision, costs: readonly number[]): void {
    const slice = this.sliceAt(Math.floor(this.clock() / MINUTE_MS))
    const layer = limit.layer as ShadowCount['layer']
    const lacking: Record<string, number> = Object.create(null) as Record<string, number>
    limit.buckets.forEach((bucket, i) => {
      if (bucket.tokens < (costs[i] as number)) lacking[bucket.name] = 1
    })
    slice.wouldRefuse++
    const tierKey = `${layer}\n${limit.tier ?? ''}`
    let tier = slice.tiers.get(tierKey)
    if (tier === undefined) {
      tier = { layer, ...(limit.tier !== undefined && { tier: limit.tier }), wouldRefuse: 0, limits: Object.create(null) as Record<string, number> }
      slice.tiers.set(tierKey, tier)
    }
    add(tier, 1, lacking)
    const client = clientOf((limit.buckets[0] as { key: string }).key)
    const clientKey = `${layer}\n${client}`
    let counted = slice.clients.get(clientKey)
    if (counted === undefined) {
      if (slice.clients.size >= this.maxClients) this.makeRoom(slice)
      counted = { client, layer, ...(limit.tier !== undefined && { tier: limit.tier }), wouldRefuse: 0, limits: Object.create(null) as Record<string, number> }
      slice.clients.set(clientKey, counted)
    }
    add(counted, 1, lacking)
  }

  /** The last minutes' counts, the `top` clients with the most would-be refusals. */
  read (top: number, shadow: boolean): ShadowReport {
    const nowMinute = Math.floor(this.clock() / MINUTE_MS)
    const live = this.slices.filter((slice) => slice.minute > nowMinute - this.minutes && slice.minute <= nowMinute)
    const clients = new Map<string, ShadowClientCount>()
    const tiers = new Map<string, ShadowCount>()
    let wouldRefuse = 0
    let untracked = 0
    for (const slice of live) {
      wouldRefuse += slice.wouldRefuse
      untracked += slice.untracked
      for (const [key, count] of slice.clients) add(entryOf(clients, key, count), count.wouldRefuse, count.limits)
      for (const [key, count] of slice.tiers) add(entryOf(tiers, key, count), count.wouldRefuse, count.limits)
    }
    return {
      shadow,
      minutes: Math.max(1, Math.min(this.minutes, nowMinute - this.startMinute + 1)),
      wouldRefuse,
      untracked,
      clients: [...clients.values()].sort(byCount).slice(0, top),
      tiers: [...tiers.values()].sort(byCount)
    }
  }

  /** The slice of `minute`, made (and the oldest dropped) when it is new. */
  private sliceAt (minute: number): Slice {
    const last = this.slices[this.slices.length - 1]
    if (last !== undefined && last.minute === minute) return last
    // A clock that went back counts into the newest slice.
    if (last !== undefined && last.minute > minute) return last
    const slice: Slice = { minute, wouldRefuse: 0, untracked: 0, clients: new Map(), tiers: new Map() }
    this.slices.push(slice)
    while (this.slices.length > 0 && (this.slices[0] as Slice).minute <= minute - this.minutes) this.slices.shift()
    return slice
  }

  /** Drops the half of a full slice's clients with the fewest would-be refusals; their count becomes untracked. */
  private makeRoom (slice: Slice): void {
    const sorted = [...slice.clients.entries()].sort((a, b) => a[1].wouldRefuse - b[1].wouldRefuse)
    for (const [key, count] of sorted.slice(0, Math.ceil(sorted.length / 2))) {
      slice.untracked += count.wouldRefuse
      slice.clients.delete(key)
    }
  }
}
