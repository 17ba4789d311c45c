/**
 * The one place every call to Redis goes through: the bounded wait (bounded-wait.ts:
 * `timeoutMs` of silence from the call's node), the circuit breaker
 * (circuit-breaker.ts: whether a call may go, and every call's outcome counted),
 * and the node a key's call goes to (cluster-slot.ts), by which calls are grouped.
 */
import { BoundedWait, type Watch } from './bounded-wait.js'
import { CircuitBreaker, type BreakerState } from './circuit-breaker.js'
import type { RedisClientLike } from './client.js'
import { chunksByNode, clusterSlot, SINGLE_NODE } from './cluster-slot.js'

export interface RedisCallsOptions {
  client: RedisClientLike
  timeoutMs: number
  breakerThreshold: number
  probeIntervalMs: number
  /** The store's clock (ms), for the breaker's probe times. */
  now: () => number
  /** The breaker closed again: Redis answers. */
  restored: () => void
  /** The breaker opened: Redis is gone. */
  degraded: () => void
}

export class RedisCalls {
  /** A Redis Cluster (the client knows slots): calls are grouped by node. */
  readonly cluster: boolean
  private readonly bounded: BoundedWait
  private readonly breaker: CircuitBreaker

  constructor (private readonly options: RedisCallsOptions) {
    this.cluster = Array.isArray(options.client.slots)
    this.bounded = new BoundedWait(options.timeoutMs)
    this.breaker = new CircuitBreaker(options.breakerThreshold, options.probeIntervalMs)
  }

  /** The breaker's state: `'closed'` (Redis in use), `'open'` (failing over), `'probing'`. */
  get state (): BreakerState {
    return this.breaker.state
  }

  /** Whether a call may go to Redis at `nowMs` (the breaker's say; may make this call the probe). */
  allows (nowMs: number): boolean {
    return this.breaker.allows(nowMs)
  }

  /** The node serving `key`: on a Cluster its slot's (the slot itself while the slots are unknown), else `SINGLE_NODE`. */
  nodeOf (key: string): string {
    if (!this.cluster) return SINGLE_NODE
    const slot = clusterSlot(key)
    return this.options.client.slots?.[slot]?.[0] ?? `slot:${slot}`
  }

  /**
   * Calls `each(chunk, node)` once per call to make for `items`: grouped by the node
   * of `keyOf(item)`, in order, at most `maxBatch` items each.
   */
  byNode<T> (items: readonly T[], keyOf: (item: T) => string, maxBatch: number, each: (chunk: T[], node: string) => void): void {
    chunksByNode(items, this.cluster ? (item) => this.nodeOf(keyOf(item)) : undefined, maxBatch, each)
  }

  /**
   * Waits for a call just sent to `node`, bounded by `timeoutMs` of silence from it
   * (bounded-wait.ts): `expired` if it times out first; not counted by the breaker.
   */
  watch (node: string, expired: (error: Error) => void): Watch {
    return this.bounded.watch(node, expired)
  }

  /** `call`, bounded by `timeoutMs` of silence from `node` (bounded-wait.ts); not counted by the breaker. */
  wait<T> (call: Promise<T>, node: string): Promise<T> {
    return this.bounded.wait(call, node)
  }

  /** `call` on the node of `key`, bounded, and its outcome counted by the breaker. */
  counted<T> (call: Promise<T>, key: string): Promise<T> {
    return this.bounded.wait(call, this.nodeOf(key)).then(
      (reply) => { this.answered(); return reply },
      (error: unknown) => { this.failed(); throw error })
  }

  /** A call answered: when this closes an open breaker, `restored`. */
  answered (): void {
    if (this.breaker.succeeded()) this.options.restored()
  }

  /** A call failed (an error or a timeout): when this opens the breaker, `degraded`. */
  failed (): void {
    if (this.breaker.failed(this.options.now())) this.options.degraded()
  }
}
