/**
 * The Redis store's micro-batching: decisions asked in one event-loop turn wait in
 * a queue, and at the next check phase (`setImmediate`) go to Redis as one script
 * call per node (one call on a single Redis), at most `maxBatch` decisions each.
 * Also how a batch is written into a call of the consume script, and how its
 * reply is read back (the layout is documented in scripts/consume.lua).
 */
import type { BucketPolicy } from '../../types/engine.js'
import type { BucketRequest, StoreDecision } from '../../types/store.js'
import { readRefusal, type ScriptRefusal } from './deny-cache.js'
import type { RedisClientLike, ScriptCall } from './client.js'
import { chunksByNode } from './cluster-slot.js'
import { parseNumber } from './reply.js'

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
    chunksByNode(queue, this.nodeOf, this.options.maxBatch, this.sendBatch)
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

/** What a call of the consume script (or the settle script) needs besides its batch. */
export interface ScriptCallOptions {
  client: RedisClientLike
  /** The script as defined on the client (the Cluster variant on a Cluster). */
  command: ScriptCall
  /** A Cluster: the keys go at the end of ARGV, and KEYS holds only the first. */
  cluster: boolean
  /** Prepended to every bucket key. */
  prefix: string
  /** TTL of a bucket that never refills, in ms. */
  neverFullTtlMs: number
  /** Tests only: the time passed to the script (ms); undefined: Redis `TIME`. */
  clock: (() => number) | undefined
}

/** One decision of a script call, and for a refusal what the deny cache keeps of it. */
export interface ScriptDecision {
  decision: StoreDecision
  refusal: ScriptRefusal | undefined
}

/**
 * Calls the consume script for `batch`; resolves with one decision per entry, in
 * order. Anything that throws, the client included, rejects instead.
 */
export async function callScript (options: ScriptCallOptions, batch: readonly Pending[]): Promise<ScriptDecision[]> {
  const { client, command, cluster, prefix, neverFullTtlMs, clock } = options
  const keys: string[] = []
  const args: Array<string | number> = []
  // Each distinct policy is sent once; a bucket refers to it by number.
  const policyNumbers = new Map<BucketPolicy, number>()
  const policies: number[] = []
  for (const { buckets } of batch) {
    args.push(buckets.length)
    for (const bucket of buckets) {
      keys.push(prefix + bucket.key)
      let number = policyNumbers.get(bucket.policy)
      if (number === undefined) {
        number = policyNumbers.size + 1
        policyNumbers.set(bucket.policy, number)
        policies.push(bucket.policy.capacity, bucket.policy.refillPerSecond)
      }
      args.push(number, bucket.cost)
    }
  }
  const now = clock === undefined ? '' : clock()
  const fixedTtl = clock === undefined ? '0' : '1'
  const head = [now, neverFullTtlMs, fixedTtl, batch.length]
  const reply = await (cluster
    ? command.call(client, 1, keys[0] as string, head, keys.length, policyNumbers.size, policies, args, keys)
    : command.call(client, keys.length, keys, head, 0, policyNumbers.size, policies, args))
  return parseReply(reply, batch)
}

/** The script's reply, one decision per entry of `batch` (layout in scripts/consume.lua). */
function parseReply (reply: unknown, batch: readonly Pending[]): ScriptDecision[] {
  const values = reply as unknown[]
  let at = 0
  return batch.map(({ buckets }) => {
    const allowed = values[at] === '1'
    const retryAfterMs = parseNumber(values[at + 1])
    const tokens = buckets.map((_bucket, i) => parseNumber(values[at + 2 + i]))
    at += 2 + buckets.length
    const decision = { allowed, tokens, retryAfterMs }
    if (allowed) return { decision, refusal: undefined }
    const { refusal, next } = readRefusal(values, at, buckets.length)
    at = next
    return { decision, refusal }
  })
}
