/**
 * The Redis store's single-bucket operations, behind `fastify.tollgate.peek`,
 * `refund` and `reset`: one call of the bucket script (scripts/bucket.lua) each, sent
 * at once, not batched (they are rare next to consumes). Writes how a call is made
 * and how its reply is read back; a refund or a reset also clears the key's deny-cache state.
 */
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
      reply = await this.call(operation, key, policy, amount, keys)
    } catch (error) {
      log.line('error', 'write-failed', { err: error, operation, breaker: calls.state },
        'fastify-tollgate: Redis call failed; refund or reset not applied to the shared quota')
      throw new StoreUnavailableError()
    } finally {
      denials?.forget(keys)
    }
    return reply
  }

  /** One call of the bucket script, bounded by `timeoutMs`, counted by the breaker; `inFlight`: settles the deny cache's count. */
  call (operation: BucketOperation, key: string, policy: BucketPolicy | undefined, amount: number, inFlight?: ReadonlyArray<{ key: string }>): Promise<unknown> {
    const stored = this.options.prefix + key
    const call = callBucketScript(this.options, operation, stored, policy, amount)
    if (inFlight !== undefined) this.options.denials?.settle([{ buckets: inFlight }], call)
    return this.options.calls.counted(call, stored)
  }
}
