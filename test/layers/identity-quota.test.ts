/**
 * A quota carried by the identity (a customer's negotiated quota): from a JWT
 * claim or from `identify`, checked per request against `app.maxQuota`; anything
 * malformed or above it gets `default` and a log line, never a better quota or a 500.
 */
import t, { type Test } from 'tap'
import { createHash, createHmac } from 'node:crypto'
import Fastify, { type FastifyInstance } from 'fastify'
import jwt from '@fastify/jwt'
import tollgate, { memoryStore, per, redisStore, type Store, type TollgateOptions } from '../../lib/index.js'
import { count, logSink, manualClock, readyWith, SECRET, statuses } from '../helpers.js'
import { PATIENT_TIMEOUT_MS, requireRedis, startRedis } from '../redis-server.js'

const tiers = { default: { capacity: 5, refillPerSecond: 1 }, pro: { capacity: 50, refillPerSecond: 5 } }
const maxQuota = { capacity: 10_000, refillPerSecond: 1000 }

/** The plugin with `app` options, @fastify/jwt verifying bearer tokens, GET / and POST /export (cost 20, a route quota by tier). */
async function build (store: Store, app: Partial<Exclude<TollgateOptions['app'], false | undefined>>, logger: object | boolean = false): Promise<FastifyInstance> {
  const fastify = Fastify({ logger })
  await fastify.register(jwt, { secret: SECRET })
  fastify.addHook('onRequest', async (request) => {
    if (request.headers.authorization !== undefined) await request.jwtVerify().catch(() => {})
  })
  await fastify.register(tollgate, { store, app: { tiers, maxQuota, ...(app.identify === undefined ? { quotaClaim: 'rateLimit' } : {}), ...app } })
  fastify.get('/', async () => 'ok')
  fastify.get('/fn', { config: { rateLimit: { cost: () => 4 } } }, async () => 'ok')
  fastify.post('/export', { config: { rateLimit: { cost: 4, quota: { default: { capacity: 1, refillPerSecond: 0 }, pro: { capacity: 3, refillPerSecond: 0 } } } } }, async () => 'ok')
  await fastify.ready()
  return fastify
}

const bearer = (app: FastifyInstance, claims: object): { authorization: string } => ({ authorization: `Bearer ${app.jwt.sign(claims)}` })

const stores: Array<[string, (t: Test, now: () => number) => Promise<Store>]> = [
  ['memory', async (_t, now) => memoryStore({ clock: now })]
]
if (requireRedis(t)) {
  stores.push(['redis', async (t, now) => redisStore({ client: (await startRedis(t)).client(t), clock: now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS })])
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

  t.test(`${name}: an absurd or malformed quota gets the token's tier (default without one), and a log line`, async (t) => {
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
      ['a limit named like the route quota', [{ name: 'route', capacity: 50, refillPerSecond: 5 }]]
    ]
    for (const [what, quota] of bad) {
      for (const [tier, policy] of [[undefined, '"app";q=5;w=5'], ['pro', '"app";q=50;w=10']]) {
        const headers = bearer(app, { sub: `user-${what}-${tier ?? 'none'}`, tier, rateLimit: quota })
        const response = await app.inject({ method: 'POST', url: '/export', headers })
        t.equal(response.statusCode, 200, `${what}: answered`)
        t.match(response.headers['ratelimit-policy'], policy, `${what}: the tier ${tier ?? 'default'}, not the quota`)
      }
    }
    const nullClaim = await app.inject({ url: '/', headers: bearer(app, { sub: 'n', tier: 'pro', rateLimit: null }) })
    t.equal(nullClaim.headers['ratelimit-policy'], '"app";q=50;w=10', 'a null claim is no quota')
    const lines = sink.lines.filter((line) => /an identity's quota was refused/.test(line.msg))
    t.equal(lines.length, 1, 'logged once a minute')
    t.match(lines[0], { level: 40, user: 'user-capacity 1e12 (no refill given)-none', reason: /`quota\.refillPerSecond` to be a finite number ≥ 0, got `undefined`/, since: 0 })
    await app.close()
  })
}

t.test('app.digestIds: a refused quota\'s log line names the user by the digest the keys hold, never the id', async (t) => {
  const secret = 'a-secret-of-at-least-16-characters'
  const id = 'alice@example.com'
  const digests: Array<[string, string | undefined, string]> = [
    ['HMAC-SHA256 with edge.keySecret', secret, createHmac('sha256', secret).update(id).digest('base64url')],
    ['SHA-256 without', undefined, createHash('sha256').update(id).digest('base64url')]
  ]
  // Refused where the identity is read (a malformed quota), and on a route (a limit named like the route's quota).
  const refusals: Array<[string, 'GET' | 'POST', string, unknown, RegExp]> = [
    ['a malformed quota', 'GET', '/', { capacity: 1e12 }, /`quota\.refillPerSecond`/],
    ['a limit named like the route quota', 'POST', '/export', [{ name: 'route', capacity: 50, refillPerSecond: 5 }], /like one of the quota of POST \/export/]
  ]
  for (const [label, keySecret, digest] of digests) {
    for (const [what, method, url, quota, reason] of refusals) {
      const sink = logSink()
      const fastify = Fastify({ logger: sink.logger })
      const edge = keySecret === undefined ? {} : { edge: { capacity: 100, refillPerSecond: 1, keySecret } }
      await fastify.register(tollgate, { store: memoryStore(), ...edge, app: { tiers, maxQuota, digestIds: true, identify: () => ({ id, quota: quota as never }) } })
      fastify.get('/', async () => 'ok')
      fastify.post('/export', { config: { rateLimit: { quota: { default: { capacity: 1, refillPerSecond: 0 } } } } }, async () => 'ok')
      t.equal((await fastify.inject({ method, url })).statusCode, 200, `${label}, ${what}: answered`)
      const lines = sink.lines.filter((line) => /an identity's quota was refused/.test(line.msg))
      t.match(lines, [{ user: digest, reason }], `${label}, ${what}: the digest`)
      t.equal(lines.length, 1)
      t.notMatch(JSON.stringify(sink.lines), /alice/, `${label}, ${what}: the id in clear nowhere in the log`)
      const peek = await fastify.tollgate.peek({ layer: 'app', user: id })
      t.equal(peek.buckets[0]?.key, `{user:${digest}}:app`, `${label}, ${what}: as the keys hold it`)
      await fastify.close()
    }
  }
})

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

t.test('a quota below a route\'s cost never passes there (a 429 without Retry-After), never a better quota nor a 500', async (t) => {
  const app = await build(memoryStore(), {
    identify: (request) => ({ id: 'tiny', quota: { capacity: 3, refillPerSecond: 1 }, tier: request.headers['x-tier'] as string })
  })
  for (const url of ['/export', '/fn']) {
    const response = await app.inject({ method: url === '/fn' ? 'GET' : 'POST', url })
    t.equal(response.statusCode, 429, url)
    t.equal(response.headers['retry-after'], undefined, `${url}: it never passes`)
    t.equal(response.json().message, 'Rate limit exceeded: this request costs more than the quota holds')
  }
  t.equal((await app.inject('/')).headers['ratelimit-policy'], '"app";q=3;w=3', 'its own quota where the cost fits')
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
  await t.rejects(readyWith({ app: { tiers, maxQuota, quotaClaim: 'rateLimit', identify: () => undefined } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`app\.quotaClaim` without `app\.identify`/ })
  await t.rejects(readyWith({ app: { tiers, maxQuota, quotaClaim: 'tier' } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`app\.quotaClaim` to be a claim other than `sub` and `tier`/ })
  await t.rejects(readyWith({ app: { tiers, maxQuota, quotaClaim: '' } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`app\.quotaClaim` to be a non-empty string, got `""`/ })
  await t.rejects(readyWith({ app: { tiers, maxQuota: { capacity: 0, refillPerSecond: 1 } } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`app\.maxQuota\.capacity` to be a finite number ≥ 1, got `0`/ })
})

t.test('hostile quotas from identify: no 500, no better quota', async (t) => {
  const hostile: Record<string, () => unknown> = {
    'a throwing getter': () => ({ get capacity () { throw new Error('boom') }, refillPerSecond: 1 }),
    'a revoked proxy': () => { const { proxy, revoke } = Proxy.revocable({}, {}); revoke(); return proxy },
    'a getter throwing a revoked proxy': () => ({ get capacity () { const { proxy, revoke } = Proxy.revocable({}, {}); revoke(); throw proxy as Error } }),
    'an array with its own map': () => Object.assign([{ name: 'a', capacity: 1e9, refillPerSecond: 1 }], { map: () => [] }),
    'a length that changes': () => {
      let reads = 0
      return new Proxy([{ name: 'a', capacity: 1, refillPerSecond: 1 }], { get: (target, key) => key === 'length' ? (reads++ === 0 ? 1 : 20_000) : Reflect.get(target, key) as unknown })
    },
    'an array with a hole': () => [, { name: 'a', capacity: 1, refillPerSecond: 1 }] // eslint-disable-line no-sparse-arrays
  }
  const app = await build(memoryStore(), { identify: (request) => ({ id: 'h', quota: (hostile[request.headers['x-case'] as string] as () => unknown)() as never }) })
  for (const name of Object.keys(hostile)) {
    const response = await app.inject({ url: '/', headers: { 'x-case': name } })
    t.equal(response.statusCode, 200, name)
    t.notMatch(String(response.headers['ratelimit-policy']), /q=1000000000/, `${name}: never the hostile quota`)
  }
  const lengthChanges = await app.inject({ url: '/', headers: { 'x-case': 'a length that changes' } })
  t.equal(lengthChanges.headers['ratelimit-policy'], '"a";q=1;w=1', 'the length is read once')
  const throwingIdentity = await build(memoryStore(), { identify: () => ({ get id (): string { throw new Error('no id') } }) })
  t.equal((await throwingIdentity.inject('/')).statusCode, 200, 'an identity whose fields throw is anonymous')
  await app.close()
  await throwingIdentity.close()
})

t.test('checked quotas are kept for 1 000 policies, then the cache starts again', async (t) => {
  const app = await build(memoryStore({ clock: () => 0 }), { identify: (request) => ({ id: 'c', quota: { capacity: Number(request.headers['x-capacity']), refillPerSecond: 1 } }) })
  for (let capacity = 1; capacity <= 1001; capacity++) {
    const response = await app.inject({ url: '/', headers: { 'x-capacity': String(capacity) } })
    if (capacity % 500 === 1) t.equal(response.headers['ratelimit-policy'], `"app";q=${capacity};w=${capacity}`)
  }
  t.equal((await app.inject({ url: '/', headers: { 'x-capacity': '7' } })).headers.ratelimit, '"app";r=5;t=2', 'a quota seen before the cache started again keeps its bucket')
  await app.close()
})
