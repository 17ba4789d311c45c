/**
 * FRL's test/redis-rate-limit.test.js, `describe('Global rate limit')`. FRL's
 * `redis` option is `store: redisStore({ client })`, `nameSpace` its `prefix`,
 * `skipOnError` its `failMode`. A private redis-server (never the one on 6379),
 * and the test's clock for the script's time instead of sleeps.
 */
import t from 'tap'
import { requireRedis, startRedis } from '../redis-server.js'
import { JSON_TYPE, tooMany, trio } from './frl.js'
import { redisApp } from './redis.js'

if (requireRedis(t)) {
  const server = await startRedis(t)
  const inspect = server.client(t)
  const TWO_A_SECOND = { capacity: 2, refillPerSecond: 2 }

  t.test('FRL: Global rate limit > With redis store', async (t) => {
    // Same.
    const { app, clock } = await redisApp(t, server, 'g1:', { edge: TWO_A_SECOND })
    app.get('/', async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
    clock.advance(100)
    const refused = await app.inject('/')
    t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
    t.equal(refused.headers['content-type'], JSON_TYPE)
    t.strictSame(refused.json(), tooMany(1))
    t.equal(await inspect.exists('g1:{ip:127.0.0.1}:edge'), 1, 'the bucket lives in Redis')
    clock.advance(1100)
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  })

  t.test('FRL: Global rate limit > With redis store (ban)', async (t) => {
    // Differs: `ban: 1` is a penalty after 2 refusals, status 403, kept in Redis (every
    // replica refuses), for a fixed time: FRL's window, 1 s.
    const { app, clock } = await redisApp(t, server, 'g2:', { edge: { capacity: 1, refillPerSecond: 1, penalty: { after: 2, withinSeconds: 1, seconds: 1, status: 403 } } })
    app.get('/', async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1', remaining: '0', reset: '1' })
    t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '1', retryAfter: '1' })
    const banned = await app.inject('/')
    t.strictSame(trio(banned), { status: 403, limit: '1', remaining: '0', reset: '1', retryAfter: '1' })
    t.equal(banned.headers['content-type'], JSON_TYPE)
    t.strictSame(banned.json(), { statusCode: 403, code: 'TOLLGATE_PENALIZED', error: 'Forbidden', message: 'Refused for 1 second: too many requests after being limited' })
    clock.advance(1100)
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1', remaining: '0', reset: '1' })
  })

  t.test('FRL: Global rate limit > Skip on redis error', async (t) => {
    // Differs: `skipOnError: true` is `failMode: 'open'`: let through uncounted and logged;
    // an uncounted answer carries the limit alone, no remaining or reset, unknown while
    // uncounted (FRL: `remaining` = max, reset 0).
    const { app, client, lines } = await redisApp(t, server, 'g3:', { edge: TWO_A_SECOND }, { failMode: 'open' })
    app.get('/', async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
    client.disconnect()
    for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2' })
    t.ok(lines.some((line) => /fastify-tollgate: Redis (call failed|unavailable)/.test(line.msg)), 'the outage is logged')
  })

  t.test('FRL: Global rate limit > Throw on redis error', async (t) => {
    // Differs: `skipOnError: false` (FRL: the store's error, a 500) is `failMode: 'closed'`:
    // 503 TOLLGATE_STORE_UNAVAILABLE with Retry-After: 1. (The default, 'local', decides on
    // this replica's share meanwhile.)
    const { app, client } = await redisApp(t, server, 'g4:', { edge: TWO_A_SECOND }, { failMode: 'closed' })
    app.get('/', async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
    client.disconnect()
    const failed = await app.inject('/')
    t.strictSame(trio(failed), { status: 503, retryAfter: '1' })
    t.equal(failed.json().code, 'TOLLGATE_STORE_UNAVAILABLE')
  })

  t.test('FRL: Global rate limit > When continue exceeding is on (Redis)', async (t) => {
    // Differs by design: no `continueExceeding`; the first refusal's numbers are FRL's.
    const { app } = await redisApp(t, server, 'g5:', { edge: { capacity: 1, refillPerSecond: 1 / 5 } })
    app.get('/', async () => 'hello!')
    t.equal((await app.inject('/')).statusCode, 200)
    t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '5', retryAfter: '5' })
  })

  t.test('FRL: Global rate limit > Redis with continueExceeding should not always return the timeWindow as ttl', async (t) => {
    // Differs by design: a bucket of 2 refilled at 2 per 3 s. Reset is the time until full,
    // exact (2 s at 1 s, with 2/3 of a token left), Retry-After until the next token (0.5 s
    // here, where FRL's pushed-back window says 3), and a refusal costs nothing: a second
    // later the client passes (FRL: 429).
    const { app, clock } = await redisApp(t, server, 'g6:', { edge: { capacity: 2, refillPerSecond: 2 / 3 } })
    app.get('/', async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '2' })
    clock.advance(1000)
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '2' }, '2/3 of a token left, full in 2 s')
    const refused = await app.inject('/')
    t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '2', retryAfter: '1' })
    t.strictSame(refused.json(), tooMany(1))
    clock.advance(1000)
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '3' })
  })

  t.test('FRL: Global rate limit > When use a custom nameSpace', async (t) => {
    // Same: `nameSpace` is `redisStore({ prefix })`; FRL's header key is `edge.key`, stored as a digest.
    const { app, clock } = await redisApp(t, server, 'my-namespace:', { edge: { ...TWO_A_SECOND, key: (request) => request.headers['x-my-header'] } })
    app.get('/', async () => 'hello!')
    const request = { method: 'GET' as const, url: '/', headers: { 'x-my-header': 'custom name space' } }
    t.strictSame(trio(await app.inject(request)), { status: 200, limit: '2', remaining: '1', reset: '1' })
    t.strictSame(trio(await app.inject(request)), { status: 200, limit: '2', remaining: '0', reset: '1' })
    const refused = await app.inject(request)
    t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
    t.strictSame(refused.json(), tooMany(1))
    const keys = await inspect.keys('my-namespace:*')
    t.equal(keys.length, 1)
    t.match(keys[0], /^my-namespace:\{key:[\w-]+\}:edge$/)
    clock.advance(1100)
    t.strictSame(trio(await app.inject(request)), { status: 200, limit: '2', remaining: '1', reset: '1' })
  })

  t.test('FRL: Global rate limit > With redis store and exponential backoff', async (t) => {
    // Differs by design: no `exponentialBackoff`; the second refusal waits 1 s too (FRL: 2).
    const { app } = await redisApp(t, server, 'g8:', { edge: TWO_A_SECOND })
    app.get('/', async () => 'hello!')
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
    t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
    for (let i = 0; i < 2; i++) {
      const refused = await app.inject('/')
      t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
      t.strictSame(refused.json(), tooMany(1))
    }
  })

  t.test('FRL: Global rate limit > With { increment: false } it reads the state without consuming it', async (t) => {
    // Same, as `fastify.tollgate.peek` and `consume` on the Redis store.
    const { app } = await redisApp(t, server, 'g9:', { edge: { global: false } })
    app.get('/peek', async (request) => (await app.tollgate.peek(`check:${request.ip}`, TWO_A_SECOND)).buckets[0]?.tokens)
    app.get('/consume', async (request) => (await app.tollgate.consume(`check:${request.ip}`, TWO_A_SECOND)).buckets[0]?.tokens)
    const remaining = []
    for (const url of ['/peek', '/consume', '/peek', '/consume', '/peek']) remaining.push((await app.inject(url)).json())
    t.strictSame(remaining, [2, 1, 1, 0, 0])
  })

  t.test('FRL: Global rate limit > With { increment: false } it throws on redis error', async (t) => {
    // Differs: `peek` follows `failMode`; with 'closed' it rejects with
    // TOLLGATE_STORE_UNAVAILABLE, a 503 (FRL: the connection's error, a 500).
    const { app, client } = await redisApp(t, server, 'g10:', { edge: { global: false } }, { failMode: 'closed' })
    app.get('/peek', async (request) => app.tollgate.peek(`check:${request.ip}`, TWO_A_SECOND))
    await app.ready()
    client.disconnect()
    const failed = await app.inject('/peek')
    t.equal(failed.statusCode, 503)
    t.equal(failed.json().code, 'TOLLGATE_STORE_UNAVAILABLE')
  })
}
