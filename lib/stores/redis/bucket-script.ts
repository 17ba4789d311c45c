/**
 * The Redis store's single-bucket operations, behind `fastify.tollgate.peek`,
 * `refund` and `reset`: one call of the bucket script (scripts/bucket.lua) each, sent
 * at once, not batched (they are rare next to consumes). Writes how a call is made
 * and how its reply is read back.
 */
import type { BucketReading } from '../../types/engine.js'
import type { BucketRequest } from '../../types/store.js'
import type { RedisClientLike, ScriptCall } from './client.js'
import { parseNumber } from './reply.js'

/** What a call of the bucket script needs. */
export interface BucketScriptOptions {
  client: RedisClientLike
  /** The bucket script as defined on the client (one key: a Cluster routes it). */
  command: ScriptCall
  /** TTL of a bucket that never refills, in ms. */
  neverFullTtlMs: number
  /** Tests only: the time passed to the script (ms); undefined: Redis `TIME`. */
  clock: (() => number) | undefined
}

/** The script's operations. `'peek'` reads, `'refund'` gives back, `'reset'` deletes. */
export type BucketOperation = 'peek' | 'refund' | 'reset'

/** Calls the bucket script for `operation` on the store key `key` (prefixed); resolves with its raw reply. */
export async function callBucketScript (options: BucketScriptOptions, operation: BucketOperation, key: string, policy: BucketRequest['policy'] | undefined, amount: number): Promise<unknown> {
  const { client, command, neverFullTtlMs, clock } = options
  const now = clock === undefined ? '' : clock()
  return command.call(client, key, now, neverFullTtlMs, clock === undefined ? '0' : '1', operation, policy?.capacity ?? 0, policy?.refillPerSecond ?? 0, amount)
}

/** A `'peek'` reply: tokens, ms until the amount, ms until full. Throws on anything else. */
export function parseReading (reply: unknown): BucketReading {
  if (!Array.isArray(reply) || reply.length !== 3) throw new Error(`fastify-tollgate: unexpected reply from the Redis bucket script: ${String(reply)}`)
  const [tokens, retryAfterMs, fullInMs] = reply.map(parseNumber) as [number, number, number]
  return { tokens, retryAfterMs, fullInMs }
}
