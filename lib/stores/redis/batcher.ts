/**
 * The Redis store's micro-batching: decisions asked in one event-loop turn wait in
 * a queue, and at the next check phase (`setImmediate`) go to Redis as one script
 * call per node (one call on a single Redis), at most `maxBatch` decisions each.
 * How a batch becomes a script call is consume-script.ts.
 */
import type { BucketRequest, StoreDecision } from '../../types/store.js'
import { chunksByNode, SINGLE_NODE } from './cluster-slot.js'

/**
 * The bound on `maxBatch`. A script call holds Redis for its whole run: 10 000
 * two-bucket decisions took 0.4 s of Redis time on the (busy) test machine.
 */
export const MAX_BATCH = 10_000

/** A decision waiting for its batch. */
export interface Pending {
  readonly buckets: readonly BucketRequest[]
  resolve (decision: StoreDecision): void
  reject (error: unknown): void
}

export interface MicroBatcherOptions {
  /** Most decisions in one batch (the store's `maxBatch`, default 500). */
  maxBatch: number
  /**
   * A Redis Cluster: the node (or, while unknown, the slot) serving a decision's
   * keys; decisions of one node share a batch. Undefined: one node.
   */
  nodeOf: ((buckets: readonly BucketRequest[]) => string) | undefined
  /** Sends one batch to `node` (`SINGLE_NODE` on a single Redis); settles each of its decisions, now or later. */
  send: (batch: Pending[], node: string) => void
}

/** Queues decisions and sends them in batches, once per event-loop turn. */
export class MicroBatcher {
  private queue: Pending[] = []
  private flushScheduled = false
  private readonly flushNow = (): void => { this.flush() }
  /** A pending decision's node; undefined: one node. */
  private readonly nodeOf: ((pending: Pending) => string) | undefined

  constructor (private readonly options: MicroBatcherOptions) {
    const nodeOf = options.nodeOf
    this.nodeOf = nodeOf === undefined ? undefined : (pending) => nodeOf(pending.buckets)
  }

  /** Queues a decision for the next flush; settles when its batch is answered. */
  add (buckets: readonly BucketRequest[]): Promise<StoreDecision> {
    return new Promise<StoreDecision>((resolve, reject) => {
      this.queue.push({ buckets, resolve, reject })
      if (!this.flushScheduled) {
        this.flushScheduled = true
        setImmediate(this.flushNow)
      }
    })
  }

  /** Sends the queued decisions: one batch per node, at most `maxBatch` decisions each. */
  private flush (): void {
    this.flushScheduled = false
    const queue = this.queue
    this.queue = []
    // One node and one call's worth (a single Redis, most turns): the queue is the batch.
    if (this.nodeOf === undefined && queue.length <= this.options.maxBatch) this.sendBatch(queue, SINGLE_NODE)
    else chunksByNode(queue, this.nodeOf, this.options.maxBatch, this.sendBatch)
  }

  /** Sends one batch. */
  private readonly sendBatch = (batch: Pending[], node: string): void => {
    // A throw here would be uncaught (this runs in setImmediate): the process would
    // die and every queued decision hang. The batch's decisions fail instead (503s).
    const send = this.options.send
    try {
      send(batch, node)
    } catch (error) {
      for (const pending of batch) pending.reject(error)
    }
  }
}
