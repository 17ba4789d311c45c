/** The `store` option, checked, and what the other checks need to know of it. */
import type { Store } from '../types/store.js'
import { expected, failOption } from './check.js'

/**
 * Marks a store that keeps its state in this process (the memory store): every
 * replica counts alone, and every `edge.mode` decides here already.
 */
export const LOCAL_STORE: unique symbol = Symbol('fastify-tollgate: a store local to this process')

/** Whether `store` (`undefined`: the default memory store) keeps its state in this process. */
export function isLocalStore (store: Store | undefined): boolean {
  return store === undefined || (store as { [LOCAL_STORE]?: unknown })[LOCAL_STORE] === true
}

/** A penalty is written to the store by a refund that takes tokens (see layers/penalty.ts). */
export const PENALTY_NEEDS_REFUND = 'Expected a store with `refund()` (as memoryStore and redisStore have) for a `penalty`: the penalty is kept in the store, got a store without'

/** The user's store, checked; `undefined` when none is given (the default memory store). */
export function checkStore (value: unknown): Store | undefined {
  if (value === undefined) return undefined
  const store = (typeof value === 'object' && value !== null ? value : {}) as Partial<Store>
  if (typeof store.consume !== 'function' || typeof store.close !== 'function') {
    expected(failOption, 'store', 'a store with consume() and close(), such as memoryStore()', value)
  }
  const quotaShare = store.quotaShare ?? 1
  if (typeof quotaShare !== 'number' || !(quotaShare > 0 && quotaShare <= 1)) {
    expected(failOption, 'store.quotaShare', 'a number in (0, 1]', quotaShare)
  }
  return store as Store
}
