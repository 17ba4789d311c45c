/**
 * Helpers of the @fastify/rate-limit (FRL) suite translated (test/frl/): an app on
 * a memory store driven by a manual clock with FRL's default header trio
 * (`headers: 'legacy'`), the trio read back from a response, the default 429
 * body, and a custom store on the exported engine. README.md in this folder maps
 * every FRL case to its test.
 */
import Fastify, { type FastifyInstance, type FastifyServerOptions, type LightMyRequestResponse } from 'fastify'
import tollgate, { consume, memoryStore, type BucketRequest, type BucketState, type MemoryStore, type Store, type StoreDecision, type TollgateOptions } from '../../lib/index.js'
import { manualClock } from '../helpers.js'

export type Clock = ReturnType<typeof manualClock>

export interface FrlApp {
  app: FastifyInstance
  clock: Clock
  store: MemoryStore
}

/**
 * Fastify with the plugin registered (awaited, first) on a memory store whose
 * clock the test moves, `headers: 'legacy'` unless `options` says otherwise.
 */
export async function frlApp (options: Omit<TollgateOptions, 'store'>, fastifyOptions: FastifyServerOptions = {}): Promise<FrlApp> {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now })
  const app = Fastify(fastifyOptions)
  await app.register(tollgate, { headers: 'legacy', ...options, store })
  return { app, clock, store }
}

/** What FRL's tests read of a response: the status and the rate-limit headers present (absent ones are left out). */
export interface Trio {
  status: number
  limit?: string
  remaining?: string
  reset?: string
  retryAfter?: string
}

/** The status, `X-RateLimit-Limit`, `-Remaining`, `-Reset` and `Retry-After` of a response, those present only. */
export function trio (response: LightMyRequestResponse): Trio {
  const read: Trio = { status: response.statusCode }
  const pick = (field: 'limit' | 'remaining' | 'reset' | 'retryAfter', header: string): void => {
    const value = response.headers[header]
    if (value !== undefined) read[field] = String(value)
  }
  pick('limit', 'x-ratelimit-limit')
  pick('remaining', 'x-ratelimit-remaining')
  pick('reset', 'x-ratelimit-reset')
  pick('retryAfter', 'retry-after')
  return read
}

/** The default 429 body: FRL's, with the error's `code`. */
export function tooMany (seconds: number): { statusCode: number, code: string, error: string, message: string } {
  return { statusCode: 429, code: 'TOLLGATE_RATE_LIMITED', error: 'Too Many Requests', message: `Rate limit exceeded, retry in ${seconds} second${seconds === 1 ? '' : 's'}` }
}

export const JSON_TYPE = 'application/json; charset=utf-8'

/** A store of the test's own (FRL's `store` option): buckets in a Map, decided by the exported engine; `calls` records each `consume`. */
export function mapStore (clock: () => number): Store & { calls: BucketRequest[][] } {
  const buckets = new Map<string, BucketState>()
  const calls: BucketRequest[][] = []
  return {
    calls,
    consume (requests: readonly BucketRequest[]): StoreDecision {
      calls.push([...requests])
      const now = clock()
      const decision = consume(requests.map((request) => buckets.get(request.key)), requests.map((request) => request.policy), requests.map((request) => request.cost), now)
      if (decision.allowed) requests.forEach((request, i) => buckets.set(request.key, { tokens: decision.tokens[i] as number, lastMs: now }))
      return decision
    },
    close () { buckets.clear() }
  }
}
