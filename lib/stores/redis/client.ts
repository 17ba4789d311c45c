/** The Redis client as the store sees it: the part of ioredis (or iovalkey) it uses, and a script command defined on it. */
import type { StoreLogger } from '../../types/store.js'

/**
 * The part of an ioredis `Redis` or `Cluster` (or iovalkey) this store uses.
 * The store defines its scripts on it and never closes it. The commands it defines
 * must flatten array arguments one level, as ioredis and iovalkey do.
 */
export interface RedisClientLike {
  defineCommand (name: string, definition: { lua: string, numberOfKeys?: number }): void
  /** ioredis `Cluster` only: slot → node keys, master first. */
  readonly slots?: ReadonlyArray<readonly string[] | undefined>
  /** ioredis: `'ready'` once connected. */
  readonly status?: string
  once? (event: 'ready', listener: () => void): unknown
}

/**
 * A script command as ioredis defines it on the client. ioredis (and iovalkey)
 * flatten array arguments one level, so a batch goes as a few arrays: spreading
 * 100 000 arguments into one call would overflow the stack (RangeError).
 */
export type ScriptCall = (this: RedisClientLike, ...args: Array<string | number | ReadonlyArray<string | number>>) => Promise<unknown>

/**
 * Waits (up to `waitMs`) for a client that is still connecting (ioredis: a status
 * other than `'ready'` or `'wait'`); warns (`log.logger`) when it is still not ready then.
 */
export async function whenConnected (client: RedisClientLike, waitMs: number, log: { readonly logger: StoreLogger }): Promise<void> {
  if (client.status !== undefined && client.status !== 'ready' && client.status !== 'wait' && typeof client.once === 'function') {
    let timer: NodeJS.Timeout | undefined
    await new Promise<void>((resolve) => {
      client.once?.('ready', resolve)
      timer = setTimeout(resolve, waitMs)
    })
    clearTimeout(timer)
    if (client.status !== 'ready') {
      log.logger.warn({ status: client.status }, 'fastify-tollgate: Redis is not connected yet; deciding by failMode until it is')
    }
  }
}
