/** A store's optional methods (`peek`, `refund`, `reset`), for the callers that need one. */
import { StoreUnsupportedError } from '../output/errors.js'
import type { Store } from '../types/store.js'

/** The store's optional method `name`, bound; `TOLLGATE_STORE_UNSUPPORTED` when the store has none. */
export function storeMethod<K extends 'peek' | 'refund' | 'reset'> (store: Store, name: K): NonNullable<Store[K]> {
  const method = store[name]
  if (typeof method !== 'function') throw new StoreUnsupportedError(name)
  return method.bind(store) as NonNullable<Store[K]>
}
