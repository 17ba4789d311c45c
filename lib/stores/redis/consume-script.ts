/**
 * The consume script's call: how a batch of decisions is written into one call
 * of scripts/consume.lua, and how its reply is read back (the layout is
 * documented in the script).
 */
import type { BucketPolicy } from '../../types/engine.js'
import type { BucketRequest, StoreDecision } from '../../types/store.js'
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

/** The numbers of the last call of one decision, and that decision's policies and costs. */
export interface LastNumbers {
  policies: readonly BucketPolicy[]
  costs: readonly number[]
  text: string
}

/** What a call of the consume script needs besides its batch. */
export interface ConsumeCallOptions extends ScriptCallOptions {
  /** Kept for the next call of one decision under the same policies and costs (updated in place). */
  readonly last: LastNumbers
}

/** A store's `ConsumeCallOptions`, with nothing kept yet. */
export function consumeCallOptions (options: ScriptCallOptions): ConsumeCallOptions {
  return { ...options, last: { policies: [], costs: [], text: '' } }
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
export function callScript (options: ConsumeCallOptions, batch: readonly Pending[]): Promise<unknown> {
  const { client, command, cluster, prefix } = options
  const keys: string[] = []
  for (const { buckets } of batch) for (const bucket of buckets) keys.push(prefix + bucket.key)
  const numbers = batch.length === 1 && options.clock === undefined
    ? numbersOfOne(options, (batch[0] as Pending).buckets)
    : numbersOf(options, batch, keys.length)
  const first = keys[0] as string
  if (cluster) return command.call(client, '1', first, numbers, keys)
  return keys.length === 1 ? command.call(client, '1', first, numbers) : command.call(client, String(keys.length), keys, numbers)
}

/**
 * The numbers of a call of one decision on Redis's clock: the last call's when its
 * policies and costs were the same (most calls: a route's tier and cost), else made
 * and kept as a sequential string. The client measures each argument with
 * `Buffer.byteLength`, which takes a slow path (about 1k instructions more) for a
 * concatenation (a V8 cons string); `toLowerCase` returns the flattened text itself
 * when it has no capital letter, as here (digits, signs, commas, `null`, `e`).
 */
function numbersOfOne (options: ConsumeCallOptions, buckets: readonly BucketRequest[]): string {
  const last = options.last
  let same = buckets.length === last.policies.length
  for (let i = 0; same && i < buckets.length; i++) {
    const bucket = buckets[i] as BucketRequest
    same = bucket.policy === last.policies[i] && bucket.cost === last.costs[i]
  }
  if (!same) {
    last.policies = buckets.map((bucket) => bucket.policy)
    last.costs = buckets.map((bucket) => bucket.cost)
    last.text = numbersOf(options, [{ buckets }], buckets.length).toLowerCase()
  }
  return last.text
}

/** The numbers of a call (layout in scripts/consume.lua); `keyCount`: the batch's keys. */
function numbersOf (options: ScriptCallOptions, batch: ReadonlyArray<Pick<Pending, 'buckets'>>, keyCount: number): string {
  const { cluster, neverFullTtlMs, clock } = options
  let decisions = ''
  // Each distinct policy is sent once; a bucket refers to it by number (its place in
  // `policies`, from 1). One decision's few buckets are looked up in the list.
  const policies: BucketPolicy[] = []
  const numbered = batch.length === 1 ? undefined : new Map<BucketPolicy, number>()
  for (const { buckets } of batch) {
    decisions += `,${buckets.length}`
    for (const bucket of buckets) {
      const policy = bucket.policy
      let number = numbered === undefined ? policies.indexOf(policy) + 1 : numbered.get(policy) ?? 0
      if (number === 0) {
        number = policies.push(policy)
        numbered?.set(policy, number)
      }
      decisions += `,${number},${bucket.cost}`
    }
  }
  let policyValues = ''
  for (const policy of policies) policyValues += `,${policy.capacity},${policy.refillPerSecond}`
  // The test clock's time, and its flag: every key gets the never-full TTL.
  const clockHead = clock === undefined ? '[null,' : `[${clock()},`
  const fixedTtl = clock === undefined ? ',0,' : ',1,'
  return `${clockHead}${neverFullTtlMs}${fixedTtl}${batch.length},${cluster ? keyCount : 0},${policies.length}${policyValues}${decisions}]`
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
