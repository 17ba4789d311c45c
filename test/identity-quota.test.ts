/**
 * A quota carried by the identity (a customer's negotiated quota): from a JWT
 * claim or from `identify`, checked per request against `app.maxQuota`; anything
 * malformed or above it gets `default` and a log line, never a better quota or a 500.
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import jwt from '@fastify/jwt'
import tollgate, { memoryStore, per, redisStore, type Store, type TollgateOptions } from '../lib/index.js'
import { count, logSink, manualClock, readyWith, SECRET, statuses } from './helpers.js'
import { requireRedis, startRedis } from './redis-server.js'

const tiers = { default: { capacity: 5, refillPerSecond: 1 }, pro: { capacity: 50, refillPerSecond: 5 } }
const maxQuota = { capacity: 10_000, refillPerSecond: 1000 }

/** The plugin with `app` options, @fastify/jwt verifying bearer tokens, GET / and POST /export (cost 20, a route quota by tier). */
async function build (store: Store, app: Partial<Exclude<TollgateOptions['app'], false | undefined>>, logger: object | boolean = false): Promise<FastifyInstance> {
  const fastify = Fastify({ logger })
  await fastify.register(jwt, { secret: SECRET })
  fastify.addHook('onRequest', async (request) => {
    if (request.headers.authorization !== undefined) await request.jwtVerify().catch(() => {})
  })
  await fastify.register(tollgate, { store, app: { tiers, maxQuota, quotaClaim: 'rateLimit', ...app } })
  fastify.get('/', async () => 'ok')
  fastify.post('/export', { config: { rateLimit: { cost: 4, quota: { default: { capacity: 1, refillPerSecond: 0 }, pro: { capacity: 3, refillPerSecond: 0 } } } } }, async () => 'ok')
  await fastify.ready()
  return fastify
}

const bearer = (app: FastifyInstance, claims: object): { authorization: string } => ({ authorization: `Bearer ${app.jwt.sign(claims)}` })

const stores: Array<[string, (t: Test, now: () => number) => Promise<Store>]> = [
  ['memory', async (_t, now) => memoryStore({ clock: now })]
]
if (requireRedis(t)) {
  stores.push(['redis', async (t, now) => redisStore({ client: (await startRedis(t)).client(t), clock: now, heartbeatIntervalMs: 0 })])
}

for (const [name, makeStore] of stores) {
  t.test(`${name}: a token carrying { capacity: 500, refillPerSecond: 50 } gets that quota`, async (t) => {
    const clock = manualClock(1_000_000)
    const app = await build(await makeStore(t, clock.now), {})
    const headers = bearer(app, { sub: 'acme', rateLimit: { capacity: 500, refillPerSecond: 50 } })
    const first = await app.inject({ url: '/', headers })
    t.equal(first.headers['ratelimit-policy'], '"app";q=500;w=10')
    t.equal(first.headers.ratelimit, '"app";r=499;t=1')
    const codes = await statuses(app, 500, { url: '/', headers })
    t.equal(count(codes, 200), 499, '500 in all')
    t.equal(codes.at(-1), 429)
    clock.advance(1000)
    t.equal(count(await statuses(app, 51, { url: '/', headers }), 200), 50, '50 a second after')
    await app.close()
  })

  t.test(`${name}: an absurd or malformed quota gets default, and a log line`, async (t) => {
    const clock = manualClock(1_000_000)
    const sink = logSink()
    const app = await build(await makeStore(t, clock.now), {}, sink.logger)
    const bad: Array<[string, unknown]> = [
      ['capacity 1e12 (no refill given)', { capacity: 1e12 }],
      ['above app.maxQuota', { capacity: 1e12, refillPerSecond: 1 }],
      ['a refill above app.maxQuota', { capacity: 10, refillPerSecond: 5000 }],
      ['a string', 'unlimited'],
      ['a number', 500],
      ['an empty list', []],
      ['a capacity as text', { capacity: '500', refillPerSecond: 50 }],
      ['an extra key', { capacity: 500, refillPerSecond: 50, burst: 9 }],
      ['a negative refill', { capacity: 500, refillPerSecond: -1 }],
      ['a limit without a name', [{ capacity: 500, refillPerSecond: 50 }]],
      ['null', null]
    ]
    for (const [what, quota] of bad) {
      const headers = bearer(app, { sub: `user-${what}`, tier: 'pro', rateLimit: quota })
      const response = await app.inject({ url: '/', headers })
      t.equal(response.statusCode, 200, `${what}: answered`)
      t.equal(response.headers['ratelimit-policy'], '"app";q=5;w=5', `${what}: default, not pro, not the quota`)
    }
    const lines = sink.lines.filter((line) => /an identity's quota was refused/.test(line.msg))
    t.equal(lines.length, 1, 'logged once a minute')
    t.match(lines[0], { level: 40, user: 'user-capacity 1e12 (no refill given)', reason: /`quota\.refillPerSecond` to be a finite number ≥ 0, got `undefined`/, since: 0 })
    await app.close()
  })
}

t.test('keys of one user under different quotas never meet', async (t) => {
  const clock = manualClock(1_000_000)
  const app = await build(memoryStore({ clock: clock.now }), {})
  const small = bearer(app, { sub: 'acme', rateLimit: { capacity: 3, refillPerSecond: 0.001 } })
  const larger = bearer(app, { sub: 'acme', rateLimit: { capacity: 4, refillPerSecond: 0.001 } })
  const tier = bearer(app, { sub: 'acme' })
  t.same(await statuses(app, 4, { url: '/', headers: small }), [200, 200, 200, 429])
  t.same(await statuses(app, 5, { url: '/', headers: larger }), [200, 200, 200, 200, 429], 'another quota: other buckets')
  t.same(await statuses(app, 6, { url: '/', headers: tier }), [200, 200, 200, 200, 200, 429], 'the tier: its own bucket')
  t.equal((await app.inject({ url: '/', headers: small })).statusCode, 429, 'back to the first quota: still empty')
  const peek = await app.tollgate.peek({ layer: 'app', user: 'acme' })
  t.equal(peek.buckets[0]?.key, '{user:acme}:app', 'the tier\'s key is unchanged')
  await app.close()
})

t.test('identify may give several limits; the route quota is still the tier\'s', async (t) => {
  const clock = manualClock(1_000_000)
  const quota = [{ name: 'second', ...per(10, 'second') }, { name: 'day', ...per(1000, 'day') }]
  const app = await build(memoryStore({ clock: clock.now }), {
    identify: (request) => ({ id: 'acme', tier: 'pro', quota: request.headers['x-deal'] === 'yes' ? quota : undefined })
  })
  const deal = { 'x-deal': 'yes' }
  const first = await app.inject({ method: 'POST', url: '/export', headers: deal })
  t.equal(first.headers['ratelimit-policy'], '"second";q=10;w=1, "day";q=1000;w=86400, "route";q=3')
  t.equal(first.headers.ratelimit, '"second";r=6;t=1, "day";r=996;t=346, "route";r=2')
  const codes = []
  for (let i = 0; i < 3; i++) {
    clock.advance(1000) // the per-second limit full again
    codes.push((await app.inject({ method: 'POST', url: '/export', headers: deal })).statusCode)
  }
  t.same(codes, [200, 200, 429], 'the pro route quota: 3')
  t.equal((await app.inject({ url: '/' })).headers['ratelimit-policy'], '"app";q=50;w=10', 'without the deal: the pro tier')
  await app.close()
})

t.test('a quota below a route\'s cost gets default for that request, logged', async (t) => {
  const sink = logSink()
  const app = await build(memoryStore(), {}, sink.logger)
  const headers = bearer(app, { sub: 'tiny', rateLimit: { capacity: 3, refillPerSecond: 1 } })
  const response = await app.inject({ method: 'POST', url: '/export', headers })
  t.equal(response.statusCode, 200)
  t.equal(response.headers['ratelimit-policy'], '"app";q=5;w=5, "route";q=1', 'default, with default\'s route quota')
  t.match(sink.lines.find((line) => /quota was refused/.test(line.msg)), { user: 'tiny', reason: 'its capacity 3 is below the cost 4 of POST /export' })
  t.equal((await app.inject({ url: '/', headers })).headers['ratelimit-policy'], '"app";q=3;w=3', 'its own quota where the cost fits')
  await app.close()
})

t.test('without app.maxQuota an identity\'s quota is ignored, with TOLLGATE_IDENTITY_QUOTA_IGNORED once', async (t) => {
  const sink = logSink()
  const app = Fastify({ logger: sink.logger })
  await app.register(tollgate, { store: memoryStore(), app: { tiers, identify: () => ({ id: 'u', tier: 'pro', quota: { capacity: 9, refillPerSecond: 9 } }) } })
  app.get('/', async () => 'ok')
  for (let i = 0; i < 3; i++) t.equal((await app.inject('/')).headers['ratelimit-policy'], '"app";q=50;w=10', 'the tier applies')
  t.equal(sink.lines.filter((line) => line.code === 'TOLLGATE_IDENTITY_QUOTA_IGNORED').length, 1)
  await app.close()
})

t.test('quota options are checked at startup', async (t) => {
  await t.rejects(readyWith({ app: { tiers, quotaClaim: 'rateLimit' } }), { code: 'TOLLGATE_INVALID_OPTION', message: /Expected `app\.maxQuota` with `app\.quotaClaim`/ })
  await t.rejects(readyWith({ app: { tiers, maxQuota, quotaClaim: '' } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`app\.quotaClaim` to be a non-empty string, got `""`/ })
  await t.rejects(readyWith({ app: { tiers, maxQuota: { capacity: 0, refillPerSecond: 1 } } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`app\.maxQuota\.capacity` to be a finite number ≥ 1, got `0`/ })
})
