/**
 * @fastify/rate-limit's custom `store`, translated. FRL's store is a class
 * with `incr(key, callback, timeWindow, max)` returning a count, and `child()`
 * per route. Here a store is an object with `consume(buckets)`: it takes each
 * bucket's cost all or nothing, and decides with the engine this package
 * exports (`consume`), so every store applies the same rules. `close()` runs
 * when the app closes. A store for a database must read, decide and write in
 * one atomic step (a transaction, or a script as the Redis store does), or two
 * replicas could both spend the last token.
 *
 * This one keeps buckets in a Map, to show the contract: it limits like the
 * edge-only example. Unlike `memoryStore()` (at most `maxKeys`, full buckets
 * swept) and `redisStore()` (keys expire once full), it never forgets a key.
 */
import Fastify from 'fastify'
import tollgate, { consume, type BucketRequest, type BucketState, type Store, type StoreDecision } from 'fastify-tollgate'
import type { Example } from './example.js'

/** Buckets in a Map; `clock` in milliseconds (monotonic by default). */
export function mapStore (clock: () => number = () => performance.now()): Store {
  const buckets = new Map<string, BucketState>()
  return {
    consume (requests: readonly BucketRequest[]): StoreDecision {
      const now = clock()
      const decision = consume(
        requests.map((request) => buckets.get(request.key)), // absent: a full bucket
        requests.map((request) => request.policy),
        requests.map((request) => request.cost),
        now
      )
      // A refusal changes nothing; an admission records every bucket's tokens.
      if (decision.allowed) requests.forEach((request, i) => buckets.set(request.key, { tokens: decision.tokens[i] as number, lastMs: now }))
      return decision
    },
    close () { buckets.clear() }
  }
}

export const example: Example = {
  about: 'A store of your own: buckets in a Map, decided by the exported engine (edge: 10 per IP at once, then 2/s).',
  async build ({ clock, logger = false } = {}) {
    const app = Fastify({ logger })
    await app.register(tollgate, { store: mapStore(clock), edge: { capacity: 10, refillPerSecond: 2 } })
    app.get('/', async () => ({ hello: 'world' }))
    return app
  },
  tryIt: (url) => `for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' ${url}/; done; echo   # 200 … 429 …: ten, then 429
curl -i ${url}/   # 429, Retry-After: 1 and the RateLimit headers`
}
