/**
 * The default store: bucket state in this process, bounded, answering synchronously.
 *
 * State lives in typed arrays indexed by slot, with a `Map` from key to slot and a
 * doubly linked list of slots in recency order: least-recently-used eviction in
 * O(1), and no object per bucket.
 */
import { performance } from 'node:perf_hooks'
import { consume, consumeOne, msUntilFull, read, refund } from '../engine/bucket.js'
import type { BucketDecision, BucketPolicy, BucketReading, BucketState } from '../types/engine.js'
import { checkFunction, checkInteger, checkKnownKeys, checkObject, checkTimer, failOption } from '../config/check.js'
import type { BucketRequest, Store } from '../types/store.js'
import { keysOf, MEMORY_STORE_OPTIONS } from '../config/rows.js'
import { LOCAL_STORE } from '../config/store.js'

export interface MemoryStoreOptions {
  /**
   * Returns the current time in milliseconds. Default: a monotonic clock
   * (`performance.now()`), so wall-clock jumps do not refill buckets.
   */
  clock?: (() => number) | undefined
  /**
   * Most buckets kept at once; past it the least recently used is dropped
   * (a dropped bucket comes back full). Default 100 000 (about 16 MB when full: 160 bytes per key in `bench:micro`).
   */
  maxKeys?: number | undefined
  /**
   * This process is one of `replicas` that each keep their own state: every
   * quota is divided by it (capacity and refill). A cost above this share (but
   * within the whole quota) passes when the share is full and overdraws it
   * (`BucketRequest.overdraft`), so the replicas together still spend one quota
   * in the long run, plus at most one request's excess each. Default 1.
   */
  replicas?: number | undefined
  /** How often buckets that are full by now are dropped, in ms, from 1 to 2^31 − 1 (Node's longest timer). Default 60 000. */
  sweepIntervalMs?: number | undefined
}

const NONE = -1
/**
 * Slots reserved by the first allocation (capped by `maxKeys`). Reserving them at
 * once costs no resident memory until used (the OS maps zero pages lazily), and
 * growing by copies would leave the old arrays' pages resident in the allocator.
 */
const FIRST_SLOTS = 1 << 20
const defaultClock = (): number => performance.now()

export class MemoryStore implements Store {
  readonly quotaShare: number
  readonly maxKeys: number
  private readonly clock: () => number
  private readonly sweepIntervalMs: number
  private sweepTimer: NodeJS.Timeout | undefined

  private readonly slots = new Map<string, number>()
  private keys: Array<string | undefined> = []
  private tokens = new Float64Array(0)
  private lastMs = new Float64Array(0)
  /** When each bucket is full again (ms, store clock); it may be dropped after that. */
  private fullAtMs = new Float64Array(0)
  private newer = new Int32Array(0)
  private older = new Int32Array(0)
  /** Least and most recently used slots. */
  private oldest = NONE
  private newest = NONE
  private readonly freeSlots: number[] = []
  private slotCount = 0

  // Scratch space reused by every step: the hot path allocates no state objects.
  private readonly states: Array<BucketState | undefined> = []
  private readonly scratch: BucketState[] = []
  private readonly slotOf: number[] = []
  private readonly policies: BucketPolicy[] = []
  private readonly costs: number[] = []
  private readonly overdrafts: boolean[] = []

  /**
   * Its state is in this process: every replica counts alone, and every `edge.mode`
   * decides here. On the prototype, so that an object spread from a memory store
   * (a wrapper of your own) is not taken for one.
   */
  get [LOCAL_STORE] (): true {
    return true
  }

  constructor (options: MemoryStoreOptions = {}) {
    const fail = failOption
    checkKnownKeys(fail, 'memoryStore', checkObject(fail, 'memoryStore', options), keysOf(MEMORY_STORE_OPTIONS))
    const { clock = defaultClock, maxKeys = 100_000, replicas = 1, sweepIntervalMs = 60_000 } = options
    this.clock = checkFunction(fail, 'memoryStore.clock', clock)
    this.maxKeys = checkInteger(fail, 'memoryStore.maxKeys', maxKeys, 1)
    this.quotaShare = 1 / checkInteger(fail, 'memoryStore.replicas', replicas, 1)
    this.sweepIntervalMs = checkTimer(fail, 'memoryStore.sweepIntervalMs', sweepIntervalMs, 1, true)
  }

  /** This store's clock (ms): the `clock` option. */
  get localClock (): () => number {
    return this.clock
  }

  /** Number of buckets held now. */
  get size (): number {
    return this.slots.size
  }

  consume (buckets: readonly BucketRequest[]): BucketDecision {
    if (buckets.length === 1) return this.consumeOne(buckets[0] as BucketRequest)
    const nowMs = this.clock()
    const count = buckets.length
    const { states, slotOf, policies, costs, overdrafts } = this
    states.length = slotOf.length = policies.length = costs.length = overdrafts.length = count
    for (let i = 0; i < count; i++) {
      const bucket = buckets[i] as BucketRequest
      const slot = this.slots.get(bucket.key) ?? NONE
      slotOf[i] = slot
      policies[i] = bucket.policy
      costs[i] = bucket.cost
      overdrafts[i] = bucket.overdraft === true
      states[i] = this.stateOf(slot, i)
    }
    const decision = consume(states, policies, costs, nowMs, overdrafts)
    // Known buckets first, so that inserting a new one never evicts a bucket of this step.
    for (let i = 0; i < count; i++) {
      const slot = slotOf[i] as number
      states[i] = undefined
      if (slot === NONE) continue
      if (decision.allowed) this.write(slot, decision.tokens[i] as number, policies[i] as BucketPolicy, nowMs)
      // Touched even on a refusal: a hot abusive key is the last one that should be evicted.
      this.touch(slot)
    }
    if (decision.allowed) {
      for (let i = 0; i < count; i++) {
        if (slotOf[i] !== NONE) continue
        const slot = this.insert((buckets[i] as BucketRequest).key)
        this.write(slot, decision.tokens[i] as number, policies[i] as BucketPolicy, nowMs)
      }
    }
    return decision
  }

  /** The same step for one bucket, without the arrays: the common case (the edge, a route without a quota). */
  private consumeOne (bucket: BucketRequest): BucketDecision {
    const nowMs = this.clock()
    let slot = this.slots.get(bucket.key) ?? NONE
    const decision = consumeOne(this.stateOf(slot, 0), bucket.policy, bucket.cost, nowMs, bucket.overdraft === true)
    if (decision.allowed) {
      if (slot === NONE) slot = this.insert(bucket.key)
      this.write(slot, decision.tokens[0] as number, bucket.policy, nowMs)
    }
    if (slot !== NONE) this.touch(slot)
    return decision
  }

  /** Reads a bucket without taking, and without marking it used. */
  peek (bucket: BucketRequest): BucketReading {
    return read(this.stateOf(this.slots.get(bucket.key) ?? NONE, 0), bucket.policy, bucket.cost, this.clock(), bucket.overdraft === true)
  }

  /**
   * Gives `bucket.cost` tokens back (never above capacity; an absent bucket stays
   * absent); a negative cost takes tokens, from an absent (full) bucket too (see
   * `refund` in bucket.ts). Returns the tokens held then.
   */
  refund (bucket: BucketRequest): number {
    let slot = this.slots.get(bucket.key)
    if (slot === undefined && bucket.cost >= 0) return bucket.policy.capacity
    const nowMs = this.clock()
    const state = refund(slot === undefined ? undefined : this.stateOf(slot, 0), bucket.policy, bucket.cost, nowMs)
    if (state === undefined) {
      if (slot !== undefined) this.remove(bucket.key, slot)
      return bucket.policy.capacity
    }
    slot ??= this.insert(bucket.key)
    this.write(slot, state.tokens, bucket.policy, nowMs)
    this.touch(slot)
    return state.tokens
  }

  /** Deletes a bucket: it is full again. */
  reset (key: string): void {
    const slot = this.slots.get(key)
    if (slot !== undefined) this.remove(key, slot)
  }

  /** The state in `slot`, copied into scratch object `i` (`undefined` for an absent bucket). */
  private stateOf (slot: number, i: number): BucketState | undefined {
    if (slot === NONE) return undefined
    const state = this.scratch[i] ?? (this.scratch[i] = { tokens: 0, lastMs: 0 })
    state.tokens = this.tokens[slot] as number
    state.lastMs = this.lastMs[slot] as number
    return state
  }

  private write (slot: number, tokens: number, policy: BucketPolicy, nowMs: number): void {
    this.tokens[slot] = tokens
    this.lastMs[slot] = nowMs
    this.fullAtMs[slot] = nowMs + msUntilFull(tokens, policy)
  }

  /** Drops every bucket that is full by now (an absent bucket is a full one). */
  sweep (): void {
    const nowMs = this.clock()
    for (const [key, slot] of this.slots) {
      if ((this.fullAtMs[slot] as number) <= nowMs) this.remove(key, slot)
    }
    if (this.slots.size === 0) this.stopSweeping()
  }

  close (): void {
    this.stopSweeping()
    this.slots.clear()
    this.keys = []
    this.freeSlots.length = 0
    this.slotCount = 0
    this.oldest = this.newest = NONE
  }

  /** A slot for a new key, evicting the least recently used bucket when full. */
  private insert (key: string): number {
    if (this.slots.size >= this.maxKeys) this.remove(this.keys[this.oldest] as string, this.oldest)
    let slot = this.freeSlots.pop()
    if (slot === undefined) {
      slot = this.slotCount++
      if (slot >= this.tokens.length) this.grow()
    }
    this.keys[slot] = key
    this.slots.set(key, slot)
    this.older[slot] = this.newest
    this.newer[slot] = NONE
    if (this.newest !== NONE) this.newer[this.newest] = slot
    else this.oldest = slot
    this.newest = slot
    if (this.sweepTimer === undefined) {
      this.sweepTimer = setInterval(() => { this.sweep() }, this.sweepIntervalMs)
      this.sweepTimer.unref()
    }
    return slot
  }

  private remove (key: string, slot: number): void {
    this.unlink(slot)
    this.slots.delete(key)
    this.keys[slot] = undefined
    this.freeSlots.push(slot)
  }

  /** Marks `slot` as the most recently used. */
  private touch (slot: number): void {
    if (slot === this.newest) return
    this.unlink(slot)
    this.older[slot] = this.newest
    this.newer[slot] = NONE
    this.newer[this.newest] = slot
    this.newest = slot
  }

  private unlink (slot: number): void {
    const older = this.older[slot] as number
    const newer = this.newer[slot] as number
    if (older === NONE) this.oldest = newer
    else this.newer[older] = newer
    if (newer === NONE) this.newest = older
    else this.older[newer] = older
  }

  /** Reserves the slot arrays (FIRST_SLOTS), then doubles them, up to `maxKeys`. */
  private grow (): void {
    const size = Math.min(this.maxKeys, Math.max(FIRST_SLOTS, this.tokens.length * 2))
    const widen = <A extends Float64Array | Int32Array>(from: A, to: A): A => { to.set(from); return to }
    this.tokens = widen(this.tokens, new Float64Array(size))
    this.lastMs = widen(this.lastMs, new Float64Array(size))
    this.fullAtMs = widen(this.fullAtMs, new Float64Array(size))
    this.newer = widen(this.newer, new Int32Array(size))
    this.older = widen(this.older, new Int32Array(size))
  }

  private stopSweeping (): void {
    if (this.sweepTimer !== undefined) clearInterval(this.sweepTimer)
    this.sweepTimer = undefined
  }
}

/** Creates the in-process store (the default). */
export function memoryStore (options?: MemoryStoreOptions): MemoryStore {
  return new MemoryStore(options)
}
