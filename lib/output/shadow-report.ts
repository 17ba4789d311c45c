/**
 * The shadow-mode report: which clients and tiers would have been refused most
 * in the last minutes, to size limits from real traffic before turning them on.
 *
 * Kept in one slice per minute of this process's clock, the last `minutes`
 * slices only. A slice counts each would-be refusal for its client (the layer's
 * bucket key up to its hash tag: `{ip:203.0.113.7}`, `{user:42}`) and its tier,
 * and, for each, which limits lacked the tokens.
 *
 * A slice lists at most `keys` clients, by the Space-Saving algorithm: a new
 * client that finds the list full takes the place of the one counted least and
 * inherits its count, which it records as `error` (the most of its count that may
 * be other clients'). So memory stays bounded under rotating keys, a count is
 * never below the client's true count, one whose `error` is 0 is exact, and any
 * client with more than 1/`keys` of a minute's would-be refusals is always listed.
 */
import { tokensNeeded } from '../engine/bucket.js'
import type { BucketRequest } from '../types/store.js'
import type { LimitDecision } from '../types/decision.js'

/** Most client entries kept in all (`minutes × keys`): about 45 MB at some 450 bytes each. */
export const MAX_SHADOW_ENTRIES = 100_000

/** Would-be refusals of one client or one tier, and, by limit name, how many of them that limit refused. */
export interface ShadowCount {
  /** The layer, `'limiter'` for the limiters' hooks (each counted under its own name in `limits`), or `'protect'` (capacity protection). */
  layer: 'edge' | 'app' | 'limiter' | 'protect'
  /** The app layer's tier. */
  tier?: string
  wouldRefuse: number
  /** Limit name (`edge`, `app`, `hour`, `route`, …) → would-be refusals in which it lacked the tokens. */
  limits: Record<string, number>
}

export interface ShadowClientCount extends ShadowCount {
  /** The client as its bucket keys name it: `{ip:203.0.113.7}`, `{user:42}`, `{key:<digest>}`. */
  client: string
  /**
   * The most of `wouldRefuse` that may be other clients' (0: exact): what it
   * inherited when it took the place of a client dropped for room, and, for each
   * minute it is not listed in, the least count listed then (what it may have had).
   * `limits` counts only what was seen while it was listed.
   */
  error: number
}

export interface ShadowReport {
  /** Whether the plugin runs in shadow mode: otherwise nothing is counted and the lists are empty. */
  shadow: boolean
  /** The minutes covered: the current one and those before it, `shadowReport.minutes` or fewer since the plugin started. */
  minutes: number
  /** Would-be refusals in those minutes (exact). */
  wouldRefuse: number
  /** The clients with the most would-be refusals, most first by the count they surely had (`wouldRefuse − error`). */
  clients: ShadowClientCount[]
  /** Every tier (and the edge) with would-be refusals, most first. */
  tiers: ShadowCount[]
}

/** A client's key in a minute's list and in the report: its layer and its client part. */
function clientKey (count: { layer: string, client: string }): string {
  return `${count.layer}\n${count.client}`
}

/** The clients of one minute, as a min-heap by count (Space-Saving). */
class TopClients {
  private readonly heap: ShadowClientCount[] = []
  private readonly byKey = new Map<string, ShadowClientCount>()
  /** Each entry's place in the heap. */
  private readonly places = new Map<ShadowClientCount, number>()

  constructor (private readonly capacity: number) {}

  /** The entry of `key`, made by `make` (in the place of the least counted when full), for the caller to count. */
  entry (key: string, make: () => ShadowClientCount): ShadowClientCount {
    const known = this.byKey.get(key)
    if (known !== undefined) return known
    const made = make()
    this.byKey.set(key, made)
    if (this.heap.length < this.capacity) {
      this.heap.push(made)
      this.places.set(made, this.heap.length - 1)
      this.toRoot(this.heap.length - 1)
      return made
    }
    const least = this.heap[0] as ShadowClientCount
    this.byKey.delete(clientKey(least))
    this.places.delete(least)
    made.wouldRefuse = made.error = least.wouldRefuse
    this.heap[0] = made
    this.places.set(made, 0)
    return made
  }

  /** Restores the order after `entry`'s count went up. */
  counted (entry: ShadowClientCount): void {
    this.down(this.places.get(entry) as number)
  }

  values (): readonly ShadowClientCount[] {
    return this.heap
  }

  /** The least count listed when the list is full (a client not listed had at most that many), else 0. */
  get floor (): number {
    return this.heap.length < this.capacity ? 0 : (this.heap[0] as ShadowClientCount).wouldRefuse
  }

  /** Moves the entry at `at`, a new one (counted 0, so the least), up to the root. */
  private toRoot (at: number): void {
    while (at > 0) {
      const parent = (at - 1) >> 1
      this.swap(at, parent)
      at = parent
    }
  }

  private down (at: number): void {
    for (;;) {
      const left = 2 * at + 1
      const right = left + 1
      let least = at
      if (left < this.heap.length && (this.heap[left] as ShadowClientCount).wouldRefuse < (this.heap[least] as ShadowClientCount).wouldRefuse) least = left
      if (right < this.heap.length && (this.heap[right] as ShadowClientCount).wouldRefuse < (this.heap[least] as ShadowClientCount).wouldRefuse) least = right
      if (least === at) return
      this.swap(at, least)
      at = least
    }
  }

  private swap (a: number, b: number): void {
    const first = this.heap[a] as ShadowClientCount
    const second = this.heap[b] as ShadowClientCount
    this.heap[a] = second
    this.heap[b] = first
    this.places.set(second, a)
    this.places.set(first, b)
  }
}

interface Slice {
  minute: number
  wouldRefuse: number
  clients: TopClients
  tiers: Map<string, ShadowCount>
}

const MINUTE_MS = 60_000

/** The client part of a layer's bucket key, which always begins with its hash tag: `{user:42}` of `{user:42}:app`. */
function clientOf (key: string): string {
  return key.slice(0, key.indexOf('}') + 1)
}

/** Limit name → count, without a prototype (a limit may be named `constructor`). */
const noLimits = (): Record<string, number> => Object.create(null) as Record<string, number>

function add (into: ShadowCount, wouldRefuse: number, limits: Record<string, number>): void {
  into.wouldRefuse += wouldRefuse
  for (const name of Object.keys(limits)) into.limits[name] = (into.limits[name] ?? 0) + (limits[name] as number)
}

/** The entry of `key` in `into`, made when there is none. */
function entryOf<C> (into: Map<string, C>, key: string, make: () => C): C {
  let entry = into.get(key)
  if (entry === undefined) {
    entry = make()
    into.set(key, entry)
  }
  return entry
}

/** A copy of `count` with no count yet, for a report to sum into. */
function emptied<C extends ShadowCount> (count: C): C {
  return { ...count, wouldRefuse: 0, limits: noLimits() }
}

function byCount (a: ShadowCount, b: ShadowCount): number {
  return b.wouldRefuse - a.wouldRefuse
}

/** Most first by the count a client surely had (`wouldRefuse − error`), then by `wouldRefuse`. */
function byGuaranteed (a: ShadowClientCount, b: ShadowClientCount): number {
  return (b.wouldRefuse - b.error) - (a.wouldRefuse - a.error) || byCount(a, b)
}

export class ShadowCounter {
  private readonly slices: Slice[] = []
  private readonly startMinute: number

  /**
   * @param minutes slices kept (the report's reach)
   * @param maxClients most clients listed per slice
   * @param clock this process's clock, in ms
   */
  constructor (private readonly minutes: number, private readonly maxClients: number, private readonly clock: () => number) {
    const minute = Math.floor(clock() / MINUTE_MS)
    this.startMinute = Number.isFinite(minute) ? minute : 0
  }

  /**
   * Counts a would-be refusal: `limit` as the layer reported it (with the policies
   * the store applied), `asked` the buckets the layer asked for (their costs and overdraft).
   */
  record (limit: LimitDecision, asked: readonly BucketRequest[]): void {
    const slice = this.sliceAt(this.minuteNow())
    const layer = limit.layer as ShadowCount['layer']
    const lacking = noLimits()
    limit.buckets.forEach((bucket, i) => {
      const { cost, overdraft = false } = asked[i] as BucketRequest
      if (bucket.tokens < tokensNeeded(cost, bucket, overdraft)) lacking[bucket.name] = 1
    })
    const tier = limit.tier
    slice.wouldRefuse++
    add(entryOf(slice.tiers, `${layer}\n${tier ?? ''}`, () => ({ layer, ...(tier !== undefined && { tier }), wouldRefuse: 0, limits: noLimits() })), 1, lacking)
    const client = clientOf((limit.buckets[0] as { key: string }).key)
    const counted = slice.clients.entry(clientKey({ layer, client }), () => ({ client, layer, ...(tier !== undefined && { tier }), wouldRefuse: 0, error: 0, limits: noLimits() }))
    add(counted, 1, lacking)
    slice.clients.counted(counted)
  }

  /** The last minutes' counts, the `top` clients with the most would-be refusals. */
  read (top: number, shadow: boolean): ShadowReport {
    const nowMinute = this.minuteNow()
    const live = this.slices.filter((slice) => slice.minute > nowMinute - this.minutes)
    const clients = new Map<string, ShadowClientCount>()
    // What a client may have had in the minutes it is not listed in: their floors, added to its count and error.
    const unlistedFloors = new Map<ShadowClientCount, number>()
    const tiers = new Map<string, ShadowCount>()
    let wouldRefuse = 0
    let floors = 0
    for (const slice of live) {
      wouldRefuse += slice.wouldRefuse
      const floor = slice.clients.floor
      floors += floor
      for (const count of slice.clients.values()) {
        const into = entryOf(clients, clientKey(count), () => ({ ...emptied(count), error: 0 }))
        add(into, count.wouldRefuse, count.limits)
        into.error += count.error
        unlistedFloors.set(into, (unlistedFloors.get(into) ?? 0) + floor)
      }
      for (const [key, count] of slice.tiers) add(entryOf(tiers, key, () => emptied(count)), count.wouldRefuse, count.limits)
    }
    for (const [client, listedFloors] of unlistedFloors) {
      client.wouldRefuse += floors - listedFloors
      client.error += floors - listedFloors
    }
    return {
      shadow,
      minutes: Math.max(1, Math.min(this.minutes, nowMinute - this.startMinute + 1)),
      wouldRefuse,
      clients: [...clients.values()].sort(byGuaranteed).slice(0, top),
      tiers: [...tiers.values()].sort(byCount)
    }
  }

  /** The minute now; a clock that went back, or is not a finite number, stays in the newest minute counted. */
  private minuteNow (): number {
    const minute = Math.floor(this.clock() / MINUTE_MS)
    const newest = this.slices[this.slices.length - 1]?.minute ?? this.startMinute
    return Number.isFinite(minute) && minute >= newest ? minute : newest
  }

  /** The slice of `minute` (the newest or a new one), the oldest dropped past `minutes`. */
  private sliceAt (minute: number): Slice {
    const newest = this.slices[this.slices.length - 1]
    if (newest !== undefined && newest.minute === minute) return newest
    const slice: Slice = { minute, wouldRefuse: 0, clients: new TopClients(this.maxClients), tiers: new Map() }
    this.slices.push(slice)
    while ((this.slices[0] as Slice).minute <= minute - this.minutes) this.slices.shift()
    return slice
  }
}
