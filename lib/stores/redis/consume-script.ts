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
import { ReplyReader } from './reply.js'

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
 * Calls the consume script for `batch`; resolves with its raw reply (`parseReply`
 * reads it). Throws when the client throws.
 *
 * Every number goes in one argument, a JSON array (layout in scripts/consume.lua):
 * the client (ioredis) spends about 1.5k instructions on each argument of a
 * command (flattening, writing), and the script reads the array in one cjson call.
 * The keys go as they are, the only one of a batch of one as an argument itself,
 * several as one array, which the client flattens (one level): spreading 100 000
 * arguments into one call would overflow the stack.
 */
export function callScript (options: ScriptCallOptions, batch: readonly Pending[]): Promise<unknown> {
  const { client, command, cluster, prefix, neverFullTtlMs, clock } = options
  const keys: string[] = []
  let policies = ''
  let decisions = ''
  // Each distinct policy is sent once; a bucket refers to it by number.
  const policyNumbers = new Map<BucketPolicy, number>()
  for (const { buckets } of batch) {
    decisions += `,${buckets.length}`
    for (const bucket of buckets) {
      keys.push(prefix + bucket.key)
      const policy = bucket.policy
      let number = policyNumbers.get(policy)
      if (number === undefined) {
        number = policyNumbers.size + 1
        policyNumbers.set(policy, number)
        policies += `,${policy.capacity},${policy.refillPerSecond}`
      }
      decisions += `,${number},${bucket.cost}`
    }
  }
  // The test clock's time, and its flag: every key gets the never-full TTL.
  const clockHead = clock === undefined ? '[null,' : `[${clock()},`
  const fixedTtl = clock === undefined ? ',0,' : ',1,'
  const numbers = `${clockHead}${neverFullTtlMs}${fixedTtl}${batch.length},${cluster ? keys.length : 0},${policyNumbers.size}${policies}${decisions}]`
  const first = keys[0] as string
  if (cluster) return command.call(client, '1', first, numbers, keys)
  return keys.length === 1 ? command.call(client, '1', first, numbers) : command.call(client, String(keys.length), keys, numbers)
}

/** The script's reply, one decision per entry of `batch` (layout in scripts/consume.lua). Throws on a reply it cannot read. */
export function parseReply (reply: unknown, batch: readonly Pending[]): ScriptDecision[] {
  const values = new ReplyReader(reply)
  const decisions: ScriptDecision[] = []
  for (const { buckets } of batch) {
    const allowed = values.one()
    const retryAfterMs = values.number()
    const tokens: number[] = []
    for (let i = 0; i < buckets.length; i++) tokens.push(values.number())
    decisions.push({ decision: { allowed, tokens, retryAfterMs }, refusal: allowed ? undefined : readRefusal(values, buckets.length) })
  }
  values.end()
  return decisions
}
