/**
 * FRL's test/redis-rate-limit.test.js, `describe('Route rate limit')`: a route's
 * own edge bucket (`config.rateLimit.edge`) on the Redis store. `skipOnError` is
 * plugin-wide here (`redisStore({ failMode })`).
 */
import t from 'tap'
import { readyWith, failure } from '../helpers.js'
import { requireRedis, startRedis } from '../redis-server.js'
import { JSON_TYPE, tooMany, trio } from './frl.js'
import { redisApp } from './redis.js'

if (requireRedis(t)) {
  const server = await startRedis(t)
  const TWO_A_SECOND = { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 } }, someOtherPlugin: { someValue: 1 } }
  const ONE_PER_5S = { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 / 5 } } }

  t.test('FRL: Route rate limit > With redis store', async (t) => {
    // Same.
    const { app, clock } = await redisApp(t, server, 'r1:', { edge: { global: false } })
    app.get('/', { config: TWO_A_SECOND }, async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
    const refused = await app.inject('/')
    t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
    t.equal(refused.headers['content-type'], JSON_TYPE)
    t.strictSame(refused.json(), tooMany(1))
    clock.advance(1100)
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  })

  t.test('FRL: Route rate limit > Throw on redis error', async (t) => {
    // Differs: no `skipOnError` per route (a route config naming it fails startup);
    // `failMode: 'closed'` is the store's: 503 TOLLGATE_STORE_UNAVAILABLE (FRL: a 500).
    const option = await failure(() => readyWith({ edge: { global: false } }, (app) => {
      app.get('/', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 }, skipOnError: false } as never } }, async () => 'x')
    }))
    t.equal(option.code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
    t.match(option.message, 'Unknown option `rateLimit.skipOnError`')
    const { app, client } = await redisApp(t, server, 'r2:', { edge: { global: false } }, { failMode: 'closed' })
    app.get('/', { config: TWO_A_SECOND }, async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
    client.disconnect()
    const failed = await app.inject('/')
    t.strictSame(trio(failed), { status: 503, retryAfter: '1' })
    t.equal(failed.json().code, 'TOLLGATE_STORE_UNAVAILABLE')
  })

  t.test('FRL: Route rate limit > Skip on redis error', async (t) => {
    // Differs: `failMode: 'open'`, the store's: uncounted, and the limit alone (no remaining
    // or reset, unknown while uncounted).
    const { app, client } = await redisApp(t, server, 'r3:', { edge: { global: false } }, { failMode: 'open' })
    app.get('/', { config: TWO_A_SECOND }, async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
    client.disconnect()
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2' })
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2' })
  })

  t.test('FRL: Route rate limit > When continue exceeding is on (Redis)', async (t) => {
    // Differs by design: no `continueExceeding`; the first refusal's numbers are FRL's.
    const { app } = await redisApp(t, server, 'r4:', { edge: { global: false } })
    app.get('/', { config: ONE_PER_5S }, async () => 'hello!')
    t.equal((await app.inject('/')).statusCode, 200)
    t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '5', retryAfter: '5' })
  })

  t.test('FRL: Route rate limit > When continue exceeding is off under route (Redis)', async (t) => {
    // Same: without `continueExceeding` the wait runs from the admitted request: 3 s left after 2 s.
    const { app, clock } = await redisApp(t, server, 'r5:', { edge: { global: false } })
    app.get('/', { config: ONE_PER_5S }, async () => 'hello!')
    t.equal((await app.inject('/')).statusCode, 200)
    t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '5', retryAfter: '5' })
    clock.advance(2000)
    t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '3', retryAfter: '3' })
  })

  t.test('FRL: Route rate limit > Route-specific exponential backoff with redis store', async (t) => {
    // Differs by design: no `exponentialBackoff`; every refusal waits 1 s (FRL: 1, 2, 4).
    const { app } = await redisApp(t, server, 'r6:', { edge: { global: false } })
    app.get('/', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 } } } }, async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1', remaining: '0', reset: '1' })
    for (let i = 0; i < 3; i++) {
      const refused = await app.inject('/')
      t.strictSame(trio(refused), { status: 429, limit: '1', remaining: '0', reset: '1', retryAfter: '1' })
      t.strictSame(refused.json(), tooMany(1))
    }
  })
}
