/**
 * The Redis store's settlement, behind `edge.mode: 'settle'`: what replicas spent
 * locally, debited from the shared buckets, and their next reservations, in one
 * call of the settle script (scripts/settle.lua) per node, at most `maxBatch`
 * buckets each.
 */
import type { BucketDebit, BucketSettlement } from '../../types/store.js'
import type { ScriptCallOptions } from './consume-script.js'
import type { RedisCalls } from './calls.js'
import { parseNumber } from './reply.js'

/**
 * Settles `debits`: one call of the script per node and `maxBatch` debits, each
 * counted by the breaker (not bounded by `timeoutMs`: a slow call may still have
 * been applied). Resolves once every call answered or failed, with `tokens: NaN`
 * for the debits of a call that failed (each failure told to `failed`).
 */
/** The settle script's call: `debt` says how far a debit may take a bucket (see scripts/settle.lua). */
export interface SettleCallOptions extends ScriptCallOptions {
  /** `'any'`: into debt (settlements); `'none'`: down to zero at most (the fallback's charge-back). */
  debt: 'any' | 'none'
}

export async function settleByNode (
  options: SettleCallOptions, calls: RedisCalls, maxBatch: number, debits: readonly BucketDebit[], failed: (error: unknown) => void
): Promise<BucketSettlement[]> {
  const settlements = debits.map((): BucketSettlement => ({ tokens: NaN, reserved: 0 }))
  const sent: Array<Promise<void>> = []
  calls.byNode(debits.map((_debit, i) => i), (i) => (debits[i] as BucketDebit).key, maxBatch, (chunk) => {
    sent.push(callSettleScript(options, chunk.map((i) => debits[i] as BucketDebit)).then((answer) => {
      calls.answered()
      chunk.forEach((i, j) => { settlements[i] = answer[j] as BucketSettlement })
    }))
  })
  await Promise.all(sent.map(async (call) => call.catch((error: unknown) => {
    calls.failed()
    failed(error)
  })))
  return settlements
}

/**
 * Settles `debits` (one node) with `options.command`, the settle script; resolves
 * with each bucket's tokens and reservation then, in order.
 */
export async function callSettleScript (options: SettleCallOptions, debits: readonly BucketDebit[]): Promise<BucketSettlement[]> {
  const { client, command, cluster, prefix, neverFullTtlMs, clock, debt } = options
  const keys = debits.map((debit) => prefix + debit.key)
  const args: number[] = []
  for (const { policy, spent, reserve } of debits) args.push(policy.capacity, policy.refillPerSecond, spent, reserve)
  const head = [clock === undefined ? '' : clock(), neverFullTtlMs, clock === undefined ? '0' : '1', debits.length]
  const noDebt = debt === 'none' ? '1' : '0'
  const reply = (await (cluster
    ? command.call(client, 1, keys[0] as string, head, keys.length, noDebt, args, keys)
    : command.call(client, keys.length, keys, head, 0, noDebt, args))) as unknown[]
  return debits.map((_debit, i) => ({ tokens: parseNumber(reply[2 * i]), reserved: parseNumber(reply[2 * i + 1]) }))
}
