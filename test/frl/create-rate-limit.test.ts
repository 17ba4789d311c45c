/**
 * FRL's test/create-rate-limit.test.js: `fastify.createRateLimit()`, a check by
 * hand. Here (MIGRATING.md, "fastify.createRateLimit()"): a limiter's
 * `check(request)` counts the request as the limiter's hook would and resolves
 * to a decision, never throwing for a refusal. FRL's fields map as: `isAllowed`
 * → `allowListed`, `!isExceeded` → `allowed`, `remaining` → `buckets[0].tokens`,
 * `max` → `buckets[0].capacity`, `key` → `buckets[0].key` (the store key),
 * `ttl` → `retryAfterMs` (until this request would pass, not a window's end),
 * `isBanned` → `penalty.state`. FRL's `{ increment: false }` reads a bucket
 * without taking: `fastify.tollgate.peek(key, policy)`, on a key of the caller's.
 */
import t from 'tap'
import Fastify from 'fastify'
import tollgate, { type LimitDecision, type LimiterDecision, type Store } from '../../lib/index.js'
import { frlApp, mapStore } from './frl.js'

const TWO_A_SECOND = { capacity: 2, refillPerSecond: 2 }

/** What FRL's result says, read from a decision (tokens and waits rounded: the bucket's are fractional). */
function view (decision: LimitDecision): { allowed: boolean, key: string | undefined, capacity: number | undefined, tokens: number, retryAfterMs: number } {
  const bucket = decision.buckets[0]
  return { allowed: decision.allowed, key: bucket?.key, capacity: bucket?.capacity, tokens: Math.round((bucket?.tokens ?? NaN) * 1e6) / 1e6, retryAfterMs: Math.round(decision.retryAfterMs) }
}

/** FRL's result, read from a limiter's decision: `view`, with `allowListed` and the penalty's state (FRL's `isBanned`). */
function checked (decision: LimiterDecision) {
  return { ...view(decision), allowListed: decision.allowListed, penalty: decision.penalty?.state ?? null }
}

t.test('FRL: With global rate limit options', async (t) => {
  // Differs: FRL's `createRateLimit()` takes the plugin's options; here a limiter has a
  // policy of its own (the plugin needs a layer: `edge: { global: false }`), keyed by the
  // client address as the edge keys it. `ttl` is `retryAfterMs`: 500 ms until one token,
  // where FRL's window says 1000.
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  const limit = app.tollgate.limiter({ name: 'check', ...TWO_A_SECOND })
  app.get('/', async (request) => checked(await limit.check(request)))
  const key = '{ip:127.0.0.1}:limiter:check'
  const first = await app.inject('/')
  t.equal(first.statusCode, 200)
  t.strictSame(first.json(), { allowed: true, key, capacity: 2, tokens: 1, retryAfterMs: 0, allowListed: false, penalty: null })
  t.strictSame((await app.inject('/')).json(), { allowed: true, key, capacity: 2, tokens: 0, retryAfterMs: 0, allowListed: false, penalty: null })
  const exceeded = await app.inject('/')
  t.equal(exceeded.statusCode, 200, 'check() resolves, never throws, for a refusal')
  t.strictSame(exceeded.json(), { allowed: false, key, capacity: 2, tokens: 0, retryAfterMs: 500, allowListed: false, penalty: null })
  t.equal(exceeded.headers['x-ratelimit-limit'], undefined, 'check() sets no header')
  clock.advance(1100)
  t.strictSame((await app.inject('/')).json(), { allowed: true, key, capacity: 2, tokens: 1, retryAfterMs: 0, allowListed: false, penalty: null })
})

t.test('FRL: With custom rate limit options', async (t) => {
  // Differs: FRL's `ban: 1` is the limiter's `penalty` after 2 refusals (FRL's `isBanned`
  // is `penalty.state`), for a fixed time: FRL's window, 1 s.
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  const limit = app.tollgate.limiter({ name: 'custom', ...TWO_A_SECOND, penalty: { after: 2, withinSeconds: 1, seconds: 1 } })
  app.get('/', async (request) => checked(await limit.check(request)))
  const results = []
  for (let i = 0; i < 5; i++) results.push((await app.inject('/')).json())
  t.match(results, [
    { allowed: true, tokens: 1, penalty: null },
    { allowed: true, tokens: 0, penalty: null },
    { allowed: false, tokens: 0, retryAfterMs: 500, penalty: null },
    { allowed: false, retryAfterMs: 1000, penalty: 'started' },
    { allowed: false, retryAfterMs: 1000, penalty: 'in force' }
  ])
  clock.advance(1100)
  t.match((await app.inject('/')).json(), { allowed: true, tokens: 1, penalty: null })
})

t.test('FRL: With allow list', async (t) => {
  // Differs: the allow-list is the plugin's, which exempts requests from a limiter as from
  // the layers (a limiter can only opt out: `allowList: false`). An allowed request resolves
  // `allowListed: true` and takes nothing (FRL: `{ isAllowed: true, key }`).
  const { app } = await frlApp({ edge: { global: false }, allowList: ['127.0.0.1'] })
  t.teardown(() => app.close())
  const limit = app.tollgate.limiter({ name: 'listed', capacity: 1, refillPerSecond: 1 })
  const strict = app.tollgate.limiter({ name: 'strict', capacity: 1, refillPerSecond: 1, allowList: false })
  app.get('/', async (request) => limit.check(request))
  app.get('/strict', async (request) => (await strict.check(request)).allowed)
  for (let i = 0; i < 3; i++) {
    t.strictSame((await app.inject('/')).json(), { layer: 'limiter', allowed: true, allowListed: true, cost: 0, retryAfterMs: 0, buckets: [] }, 'allowed, nothing taken from a bucket of 1')
  }
  t.match([(await app.inject({ url: '/', remoteAddress: '1.1.1.1' })).json(), (await app.inject({ url: '/', remoteAddress: '1.1.1.1' })).json()], [{ allowed: true, allowListed: false }, { allowed: false }])
  t.strictSame([(await app.inject('/strict')).json(), (await app.inject('/strict')).json()], [true, false], '`allowList: false` limits the listed address too')
})

t.test('FRL: With { increment: false } it reads the state without consuming it', async (t) => {
  // Same, as `peek`: the tokens held now and `fullInMs` (FRL's ttl 0 on a clean state: 0).
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  const peek = async (ip: string) => { const decision = await app.tollgate.peek(`check:${ip}`, TWO_A_SECOND); return { ...view(decision), fullInMs: Math.round(decision.buckets[0]?.fullInMs ?? NaN) } }
  app.get('/peek', async (request) => peek(request.ip))
  app.get('/consume', async (request) => view(await app.tollgate.consume(`check:${request.ip}`, TWO_A_SECOND)))
  t.match((await app.inject('/peek')).json(), { allowed: true, capacity: 2, tokens: 2, fullInMs: 0 }, 'a clean state, nothing taken')
  t.match((await app.inject('/consume')).json(), { allowed: true, tokens: 1 })
  t.match((await app.inject('/peek')).json(), { allowed: true, tokens: 1, fullInMs: 500 }, 'reads without taking')
  t.match((await app.inject('/consume')).json(), { allowed: true, tokens: 0 })
  t.match((await app.inject('/peek')).json(), { allowed: false, tokens: 0, retryAfterMs: 500, fullInMs: 1000 })
  clock.advance(1100)
  t.match((await app.inject('/peek')).json(), { allowed: true, tokens: 2, fullInMs: 0 }, 'full again')
})

t.test('FRL: With { increment: false } and continueExceeding the peek mirrors the active window', async (t) => {
  // Differs by design: no `continueExceeding`. A refusal takes nothing, and `peek` shows the
  // bucket as the last admitted request left it, refilled since.
  const policy = { capacity: 1, refillPerSecond: 1 }
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/peek', async (request) => view(await app.tollgate.peek(`check:${request.ip}`, policy)))
  app.get('/consume', async (request) => view(await app.tollgate.consume(`check:${request.ip}`, policy)))
  t.match((await app.inject('/consume')).json(), { allowed: true, tokens: 0 })
  clock.advance(100)
  t.match((await app.inject('/consume')).json(), { allowed: false, tokens: 0.1 }, 'refused, nothing taken')
  clock.advance(100)
  t.strictSame((await app.inject('/peek')).json(), { allowed: false, key: '{manual:check:127.0.0.1}:manual', capacity: 1, tokens: 0.2, retryAfterMs: 800 })
  t.match((await app.inject('/peek')).json(), { tokens: 0.2 }, 'a peek changes nothing either')
  clock.advance(1000)
  t.match((await app.inject('/peek')).json(), { allowed: true, tokens: 1, retryAfterMs: 0 })
})

t.test('FRL: With { increment: false } and exponentialBackoff the peek reports the base window without escalating it', async (t) => {
  // Differs by design: no `exponentialBackoff`: refusals never lengthen the wait.
  const policy = { capacity: 1, refillPerSecond: 1 }
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/peek', async (request) => view(await app.tollgate.peek(`check:${request.ip}`, policy)))
  app.get('/consume', async (request) => view(await app.tollgate.consume(`check:${request.ip}`, policy)))
  const consumed = []
  for (let i = 0; i < 3; i++) { consumed.push((await app.inject('/consume')).json().retryAfterMs); clock.advance(100) }
  t.strictSame(consumed, [0, 900, 800], 'each refusal waits for the same token, no longer')
  t.match((await app.inject('/peek')).json(), { allowed: false, tokens: 0.3, retryAfterMs: 700 })
  clock.advance(1000)
  t.match((await app.inject('/peek')).json(), { allowed: true, tokens: 1, retryAfterMs: 0 })
})

t.test('FRL: With { increment: false } it throws a clear error when the store has no read method', async (t) => {
  // Same: a custom store may leave out `peek`; only a call of it fails, 500
  // TOLLGATE_STORE_UNSUPPORTED naming the method (FRL names its `read`).
  const full = mapStore(() => 0)
  const store: Store = { consume: (buckets) => full.consume(buckets), close: () => full.close() }
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(tollgate, { store, edge: { global: false } })
  app.get('/peek', async (request) => app.tollgate.peek(`check:${request.ip}`, TWO_A_SECOND))
  const response = await app.inject('/peek')
  t.equal(response.statusCode, 500)
  t.equal(response.json().code, 'TOLLGATE_STORE_UNSUPPORTED')
  t.match(response.json().message, 'does not implement peek()')
})
