/**
 * The consume script's call: how a batch of decisions is written into one call
 * of scripts/consume.lua, and how its reply is read back (the layout is
 * documented in the script).
 */
import type { BucketPolicy } from '../../types/engine.js'
import type { StoreDecision } from '../../types/store.js'
import type { Pending } from './batcher.js'
import type { RedisClientLike, ScriptCall } from './client.js'
import { readRefusal, type ScriptRefusal } from './deny-cache.js'
import { parseNumber } from './reply.js'

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
