/**
 * The key a client is kept by at the edge: the value of a key function (`edge.key`,
 * a route's `rateLimit.edge.key`) digested, else the client address. A function
 * that returns a promise is awaited (lookup.ts); a throw, a rejection, a late answer
 * or a value that is not a non-empty string or a finite number (LOOKUP_FAILED
 * included): the address.
 */
import type { FastifyRequest } from 'fastify'
import type { LookupName, Lookups } from './lookup.js'
import { isThenable } from './promises.js'

/** Where a client's key comes from. */
export interface KeySource {
  /** The key function; `undefined`: the address alone. */
  fn: ((request: FastifyRequest) => unknown) | undefined
  /** Its name in logs. */
  name: LookupName
  /** A value → its bucket key (`{key:<digest>}:edge`); cached. */
  keyOfValue: (value: string) => string
  /** The request → its address's bucket key (`{ip:<address>}:edge`); cached. */
  addressKeyOf: (request: FastifyRequest) => string
  /** Awaits a promise the function returned. */
  lookups: Lookups
}

/** The bucket key of `request` from `source`: now, or a promise of it (which never rejects). */
export function keyOf (request: FastifyRequest, source: KeySource): string | Promise<string> {
  if (source.fn === undefined) return source.addressKeyOf(request)
  let value: unknown
  try {
    value = source.fn(request)
  } catch (error) {
    request.log.error({ err: error }, `fastify-tollgate: ${source.name} threw; keyed by client IP`)
  }
  if (isThenable(value)) {
    // The address now: once the client has gone, request.ip is undefined (and would share one `unknown` bucket).
    const address = source.addressKeyOf(request)
    return source.lookups.wait(source.name, value).then((settled) => valueKey(source, settled) ?? address)
  }
  return valueKey(source, value) ?? source.addressKeyOf(request)
}

/** The bucket key of a key function's answer `value`; `undefined` for anything but a non-empty string or a finite number (LOOKUP_FAILED included). */
function valueKey (source: KeySource, value: unknown): string | undefined {
  if (typeof value === 'number' && Number.isFinite(value)) return source.keyOfValue(String(value))
  if (typeof value === 'string' && value !== '') return source.keyOfValue(value)
  return undefined
}
