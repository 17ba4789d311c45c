/**
 * FRL's test/create-rate-limit.test.js: `fastify.createRateLimit()`, a check by
 * hand. Here (MIGRATING.md, "fastify.createRateLimit()"): `fastify.tollgate.consume(key,
 * policy)` resolves to a decision and never throws for a refusal; `peek` reads
 * without taking (FRL's `{ increment: false }`). FRL's fields map as: `!isExceeded`
 * → `allowed`, `remaining` → `buckets[0].tokens`, `max` → `buckets[0].capacity`,
 * `ttl` → `retryAfterMs` (until this request would pass, not a window's end). The
 * key is the caller's; `isAllowed` and `isBanned` are the caller's too.
 */
import t from 'tap'
import Fastify from 'fastify'
import tollgate, { type LimitDecision, type Store } from '../../lib/index.js'
import { frlApp, mapStore } from './frl.js'

const TWO_A_SECOND = { capacity: 2, refillPerSecond: 2 }

/** What FRL's result says, read from a decision (tokens and waits rounded: the bucket's are fractional). */
function view (decision: LimitDecision): { allowed: boolean, key: string | undefined, capacity: number | undefined, tokens: number, retryAfterMs: number } {
  const bucket = decision.buckets[0]
  return { allowed: decision.allowed, key: bucket?.key, capacity: bucket?.capacity, tokens: Math.round((bucket?.tokens ?? NaN) * 1e6) / 1e6, retryAfterMs: Math.round(decision.retryAfterMs) }
}

t.test('FRL: With global rate limit options', async (t) => {
  // Differs: the plugin needs a layer (`edge: { global: false }`); the policy is passed to
  // each call, the key built by the caller (FRL: the plugin's options and keyGenerator).
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', async (request) => view(await app.tollgate.consume(`check:${request.ip}`, TWO_A_SECOND)))
  const key = '{manual:check:127.0.0.1}:manual'
  const first = await app.inject('/')
  t.equal(first.statusCode, 200)
  t.strictSame(first.json(), { allowed: true, key, capacity: 2, tokens: 1, retryAfterMs: 0 })
  t.strictSame((await app.inject('/')).json(), { allowed: true, key, capacity: 2, tokens: 0, retryAfterMs: 0 })
  const exceeded = await app.inject('/')
  t.equal(exceeded.statusCode, 200, 'a refusal is a decision, not an error')
  t.strictSame(exceeded.json(), { allowed: false, key, capacity: 2, tokens: 0, retryAfterMs: 500 }, 'FRL: ttl 1000, the window; here 500 ms until one token')
  clock.advance(1100)
  t.strictSame((await app.inject('/')).json(), { allowed: true, key, capacity: 2, tokens: 1, retryAfterMs: 0 })
})

t.test('FRL: With custom rate limit options', async (t) => {
  // Differs: a policy of the call's own (FRL: `{ max: 2, timeWindow: 1000 }`); `ban` has no
  // counterpart in `consume`, so FRL's `isBanned` is a second bucket of strikes taken on each
  // refusal (as examples/frl-ban.ts does): `ban: 1` is one strike, back within the window.
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', async (request) => {
    const decision = await app.tollgate.consume(`custom:${request.ip}`, TWO_A_SECOND)
    const banned = !decision.allowed && !(await app.tollgate.consume(`strikes:${request.ip}`, { capacity: 1, refillPerSecond: 1 })).allowed
    return { ...view(decision), banned }
  })
  const results = []
  for (let i = 0; i < 4; i++) results.push((await app.inject('/')).json())
  t.match(results, [
    { allowed: true, tokens: 1, banned: false },
    { allowed: true, tokens: 0, banned: false },
    { allowed: false, tokens: 0, banned: false },
    { allowed: false, tokens: 0, banned: true }
  ])
  clock.advance(1100)
  t.match((await app.inject('/')).json(), { allowed: true, tokens: 1, banned: false })
})

t.test('FRL: With allow list', async (t) => {
  // Differs: the allow-list applies to the layers, not to `consume` (FRL's `isAllowed`):
  // a call takes from its bucket even for an allowed address; the caller checks the list.
  const allowList = ['127.0.0.1']
  const { app } = await frlApp({ edge: { global: false }, allowList })
  t.teardown(() => app.close())
  app.get('/', async (request) => {
    if (allowList.includes(request.ip)) return { isAllowed: true, key: request.ip }
    return view(await app.tollgate.consume(`check:${request.ip}`, TWO_A_SECOND))
  })
  app.get('/unchecked', async (request) => view(await app.tollgate.consume(`check:${request.ip}`, TWO_A_SECOND)))
  const response = await app.inject('/')
  t.equal(response.statusCode, 200)
  t.strictSame(response.json(), { isAllowed: true, key: '127.0.0.1' })
  t.match((await app.inject('/unchecked')).json(), { allowed: true, tokens: 1 }, "the plugin's allow-list does not exempt consume")
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
