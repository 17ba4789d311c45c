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
import { isOne, parseNumber } from './reply.js'

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
 * The arguments go as one array of strings, which the client flattens (one level)
 * and sends as they are: nested arrays and numbers each cost the client (ioredis)
 * a conversion per argument, about as much again as writing it.
 */
export function callScript (options: ScriptCallOptions, batch: readonly Pending[]): Promise<unknown> {
  const { client, command, cluster, prefix, neverFullTtlMs, clock } = options
  const keys: string[] = []
  const args: string[] = []
  // Each distinct policy is sent once; a bucket refers to it by number.
  const policyNumbers = new Map<BucketPolicy, string>()
  const policies: string[] = []
  for (const { buckets } of batch) {
    args.push(argOf(buckets.length))
    for (const bucket of buckets) {
      keys.push(prefix + bucket.key)
      let number = policyNumbers.get(bucket.policy)
      if (number === undefined) {
        number = argOf(policyNumbers.size + 1)
        policyNumbers.set(bucket.policy, number)
        policies.push(argOf(bucket.policy.capacity), argOf(bucket.policy.refillPerSecond))
      }
      args.push(number, argOf(bucket.cost))
    }
  }
  const now = clock === undefined ? '' : argOf(clock())
  const fixedTtl = clock === undefined ? '0' : '1'
  const head = [now, argOf(neverFullTtlMs), fixedTtl, argOf(batch.length)]
  const count = argOf(policyNumbers.size)
  const argv = cluster ? ['1', keys[0] as string, ...head, argOf(keys.length), count] : [argOf(keys.length)]
  if (!cluster) append(argv, keys).push(...head, '0', count)
  append(append(argv, policies), args)
  return command.call(client, cluster ? append(argv, keys) : argv)
}

/** Appends `items` to `to` (`concat` takes a slow path for these arrays); returns `to`. */
function append (to: string[], items: readonly string[]): string[] {
  for (let i = 0; i < items.length; i++) to.push(items[i] as string)
  return to
}

/** The strings of the small counts and costs, made once. */
const SMALL = Array.from({ length: 256 }, (_, i) => String(i))

/**
 * A number as a script argument, written as ioredis writes one (`String`, but an
 * integer beyond 2^53 in full digits), so the client leaves it as it is.
 */
export function argOf (value: number): string {
  if (value >= 0 && value < 256 && Number.isInteger(value)) return SMALL[value] as string
  return Number.isInteger(value) && !Number.isSafeInteger(value) ? BigInt(value).toString() : String(value)
}

/** The script's reply, one decision per entry of `batch` (layout in scripts/consume.lua). Throws on a reply it cannot read. */
export function parseReply (reply: unknown, batch: readonly Pending[]): ScriptDecision[] {
  const values = reply as unknown[]
  const decisions: ScriptDecision[] = []
  let at = 0
  for (const { buckets } of batch) {
    const allowed = isOne(values[at])
    const retryAfterMs = parseNumber(values[at + 1])
    const tokens: number[] = []
    for (let i = 0; i < buckets.length; i++) tokens.push(parseNumber(values[at + 2 + i]))
    at += 2 + buckets.length
    const decision = { allowed, tokens, retryAfterMs }
    if (allowed) {
      decisions.push({ decision, refusal: undefined })
      continue
    }
    const { refusal, next } = readRefusal(values, at, buckets.length)
    at = next
    decisions.push({ decision, refusal })
  }
  return decisions
}
