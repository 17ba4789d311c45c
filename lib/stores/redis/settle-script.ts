/**
 * The Redis store's settlement, behind `edge.mode: 'settle'`: what replicas spent
 * locally, debited from the shared buckets, and their next reservations, in one
 * call of the settle script (scripts/settle.lua) per node, at most `maxBatch`
 * buckets each.
 */
import type { BucketDebit, BucketSettlement } from '../../types/store.js'
import type { ScriptCallOptions } from './batcher.js'
import { parseNumber } from './reply.js'

/**
 * Settles `debits` (one node) with `options.command`, the settle script; resolves
 * with each bucket's tokens and reservation then, in order.
 */
export async function callSettleScript (options: ScriptCallOptions, debits: readonly BucketDebit[]): Promise<BucketSettlement[]> {
  const { client, command, cluster, prefix, neverFullTtlMs, clock } = options
  const keys = debits.map((debit) => prefix + debit.key)
  const args: number[] = []
  for (const { policy, spent, reserve } of debits) args.push(policy.capacity, policy.refillPerSecond, spent, reserve)
  const head = [clock === undefined ? '' : clock(), neverFullTtlMs, clock === undefined ? '0' : '1', debits.length]
  const reply = (await (cluster
    ? command.call(client, 1, keys[0] as string, head, keys.length, args, keys)
    : command.call(client, keys.length, keys, head, 0, args))) as unknown[]
  return debits.map((_debit, i) => ({ tokens: parseNumber(reply[2 * i]), reserved: parseNumber(reply[2 * i + 1]) }))
}
