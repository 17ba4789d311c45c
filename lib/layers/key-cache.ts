/**
 * Per-request key strings, computed once per distinct input (or per connection).
 * A repeated client then costs one lookup, and the key returned is the same string
 * object each time: V8 keeps its hash, so the store's own lookup by key is cheap too.
 */
import type { FastifyRequest } from 'fastify'

/** Inputs longer than this (characters) are computed each time, never cached. */
export const MAX_CACHED_INPUT_LENGTH = 256
/** Results kept per cache; when full, the cache starts over (an attacker rotating inputs cannot grow it). */
export const MAX_CACHED_RESULTS = 10_000

/**
 * `compute` with its results cached: up to MAX_CACHED_RESULTS inputs of at most
 * MAX_CACHED_INPUT_LENGTH characters (about 3 MB at most with both bounds reached),
 * each kept as a copy of its own.
 * `compute` must be pure: the same input always gives the same string.
 */
export function memoize<T extends NonNullable<unknown>> (compute: (input: string) => T): (input: string) => T {
  const cache = new Map<string, T>()
  return (input) => {
    let result = cache.get(input)
    if (result === undefined) {
      if (input.length > MAX_CACHED_INPUT_LENGTH) return compute(input)
      // A copy: `input` may be a slice of a whole header (request.ip from X-Forwarded-For,
      // an edge.key value split from Authorization), which V8 keeps alive with the slice;
      // cached, 10 000 of them held about 160 MB of headers.
      const own = Buffer.from(input, 'utf16le').toString('utf16le')
      result = compute(own)
      if (cache.size >= MAX_CACHED_RESULTS) cache.clear()
      cache.set(own, result)
    }
    return result
  }
}

/**
 * `of(request.ip)`, a function of the request's client address (its key, whether
 * it is allowed). When the address comes from the connection alone
 * (`perConnection`: Fastify's trustProxy off), it cannot change while the
 * connection lasts, and the result is kept per connection: the requests of a
 * keep-alive connection skip the address lookup. With trustProxy, the address may
 * differ per request (X-Forwarded-For), and is read each time.
 */
export function ofClientAddress<T extends NonNullable<unknown>> (of: (ip: string) => T, perConnection: boolean): (request: FastifyRequest) => T {
  // request.ip is undefined once the socket is gone; of('') is then the `unknown` client.
  const read = (request: FastifyRequest): T => of(request.ip ?? '')
  if (!perConnection) return read
  const byConnection = new WeakMap<object, T>()
  return (request) => {
    const socket = request.raw.socket as object | null | undefined
    if (socket === null || socket === undefined) return read(request)
    let key = byConnection.get(socket)
    if (key === undefined) byConnection.set(socket, key = read(request))
    return key
  }
}
