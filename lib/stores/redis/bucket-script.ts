/**
 * The Redis store's single-bucket operations, behind `fastify.tollgate.peek`,
 * `refund` and `reset`: one call of the bucket script (scripts/bucket.lua) each, sent
 * at once, not batched (they are rare next to consumes). Writes how a call is made
 * and how its reply is read back; a refund or a reset also clears the key's deny-cache state.
 */
import { randomUUID } from 'node:crypto'
import type { BucketPolicy, BucketReading } from '../../types/engine.js'
import type { BucketRequest } from '../../types/store.js'
import { StoreUnavailableError } from '../../output/errors.js'
import type { RedisCalls } from './calls.js'
import type { RedisClientLike, ScriptCall } from './client.js'
import type { DenyCache } from './deny-cache.js'
import type { OutageLog } from './outage-log.js'
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

/**
 * How long (ms) Redis remembers a refund's id (bucket.lua): longer than ioredis 6,
 * under its default options, keeps a call to re-send while it reconnects (it
 * gives the call up after 20 attempts, 50 ms doubling up to 5 s each: about 75 s),
 * short enough that the ids of a flood of refunds (a give-back per refusal
 * between registrations) stay few.
 */
export const REFUND_ID_TTL_MS = 120_000

/**
 * Calls the bucket script for `operation` on the store key `key` (prefixed); resolves with its raw reply.
 * `refundId`: a refund's own id, so that the script applies it once however often it is sent.
 */
export async function callBucketScript (options: BucketScriptOptions, operation: BucketOperation, key: string, policy: BucketRequest['policy'] | undefined, amount: number, refundId?: string): Promise<unknown> {
  const { client, command, neverFullTtlMs, clock } = options
  const now = clock === undefined ? '' : clock()
  const head = [key, now, neverFullTtlMs, clock === undefined ? '0' : '1', operation, policy?.capacity ?? 0, policy?.refillPerSecond ?? 0, amount] as const
  return refundId === undefined ? command.call(client, ...head) : command.call(client, ...head, refundId, REFUND_ID_TTL_MS)
}

/** A `'peek'` reply: tokens, ms until the amount, ms until full. Throws on anything else. */
export function parseReading (reply: unknown): BucketReading {
  if (!Array.isArray(reply) || reply.length !== 3) throw new Error(`fastify-tollgate: unexpected reply from the Redis bucket script: ${String(reply)}`)
  const [tokens, retryAfterMs, fullInMs] = reply.map(parseNumber) as [number, number, number]
  return { tokens, retryAfterMs, fullInMs }
}

/** What the bucket calls of a store need besides the script. */
export interface BucketCallsOptions extends BucketScriptOptions {
  /** Prepended to every bucket key. */
  prefix: string
  calls: RedisCalls
  /** The store's deny cache; `undefined` when off. */
  denials: DenyCache | undefined
  log: OutageLog
  /** The store's clock (ms), for the breaker. */
  now: () => number
}

/** A store's calls of the bucket script. */
export class BucketCalls {
  constructor (private readonly options: BucketCallsOptions) {}

  /**
   * A refund or a reset. The key's deny-cache state is dropped when it goes, none
   * is kept while it is on its way, and it is dropped again once it is answered:
   * a refusal read by Redis before this call, whose reply is read in the same turn,
   * may have been kept meanwhile. Throws `StoreUnavailableError` when the breaker
   * is open or the call fails (logged).
   */
  async write (operation: BucketOperation, key: string, policy: BucketPolicy | undefined, amount: number): Promise<unknown> {
    const { calls, denials, log } = this.options
    const keys = [{ key }]
    denials?.forget(keys)
    if (!calls.allows(this.options.now())) {
      log.line('warn', 'write-refused', { operation }, 'fastify-tollgate: Redis unavailable; refund or reset not applied to the shared quota')
      throw new StoreUnavailableError()
    }
    denials?.sending(keys)
    // The reply is returned after the try: a return inside it would leave the way out
    // of the catch (which always throws) a branch that no call can take.
    let reply: unknown
    try {
      reply = await this.call(operation, key, policy, amount, keys, operation === 'refund' ? randomUUID() : undefined)
    } catch (error) {
      log.line('error', 'write-failed', { err: error, operation, breaker: calls.state },
        'fastify-tollgate: Redis call failed; refund or reset may or may not have been applied to the shared quota')
      throw new StoreUnavailableError()
    } finally {
      denials?.forget(keys)
    }
    return reply
  }

  /**
   * One call of the bucket script, bounded by `timeoutMs`, counted by the breaker; `inFlight`: settles the deny cache's count;
   * `refundId`: a refund's id (applied once however often the client sends it).
   */
  call (operation: BucketOperation, key: string, policy: BucketPolicy | undefined, amount: number, inFlight?: ReadonlyArray<{ key: string }>, refundId?: string): Promise<unknown> {
    const stored = this.options.prefix + key
    const call = callBucketScript(this.options, operation, stored, policy, amount, refundId)
    if (inFlight !== undefined) this.options.denials?.settle([{ buckets: inFlight }], call)
    return this.options.calls.counted(call, stored)
  }
}
