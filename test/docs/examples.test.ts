/**
 * Every example in examples/: how it limits (inject, manual clock), and that it
 * starts as `npm run example <name>` does and limits over real HTTP (here, or in
 * readme.test.ts for those whose printed lines it pastes).
 */
import t, { type Test } from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import Fastify, { type FastifyInstance, type InjectOptions } from 'fastify'
import tollgate, { memoryStore, RateLimitedError } from 'fastify-tollgate'
import { EXAMPLES, type Example } from '../../examples/example.js'
import { example as server } from '../../examples/server.js'
import { example as edgeOnly } from '../../examples/edge-only.js'
import { example as jwtTiers } from '../../examples/jwt-tiers.js'
import { example as routeCost } from '../../examples/route-cost.js'
import { example as apiKey } from '../../examples/api-key.js'
import { example as shadow } from '../../examples/shadow.js'
import { example as replicaShare } from '../../examples/replica-share.js'
import { example as problemJson } from '../../examples/problem-json.js'
import { example as login } from '../../examples/login.js'
import { example as pricing } from '../../examples/pricing.js'
import { example as frlGlobal } from '../../examples/frl-global.js'
import { example as frlNotFound } from '../../examples/frl-not-found.js'
import { example as frlErrorResponse } from '../../examples/frl-error-response.js'
import { example as frlKeyGenerator } from '../../examples/frl-key-generator.js'
import { example as frlVariableMax } from '../../examples/frl-variable-max.js'
import { example as frlAllowList, INTERNAL_CLIENT_SECRET } from '../../examples/frl-allow-list.js'
import { example as frlHook } from '../../examples/frl-hook.js'
import { example as frlCustomStore } from '../../examples/frl-custom-store.js'
import { example as frlCallbacks } from '../../examples/frl-callbacks.js'
import { example as frlBan } from '../../examples/frl-ban.js'
import { example as frlRouteConfig } from '../../examples/frl-route-config.js'
import { example as frlGroup } from '../../examples/frl-group.js'
import { example as frlRouteOverride } from '../../examples/frl-route-override.js'
import { example as frlManual } from '../../examples/frl-manual.js'
import { buildRedisServer } from '../../examples/redis.js'
import { buildClusterServer } from '../../examples/redis-cluster.js'
import { freePort, requireRedis, startCluster, startRedis } from '../redis-server.js'
import { count, manualClock, statuses } from '../helpers.js'
import { PASTED, RUN, runExample, type Pasted } from '../run-example.js'
import { untracedEnv } from '../child-env.js'

// Most examples in a child process (some on Redis, one on a Redis cluster),
// four at a time: about 4 s each on a busy 2-core machine, far above tap's 30 s
// per file; 26 examples one after another took 110 s. Ten seconds each, and a
// minute for the rest.
t.setTimeout(60_000 + 10_000 * (EXAMPLES.length - PASTED.length))
// The tests below two at a time: the example processes' group beside the tests in this process (the login
// ones hash passwords). Not more: an in-process Redis store answers within its 50 ms only on a quiet event loop.
t.jobs = 2

/** The login example with scrypt's N at 2: the limits are what these tests count, not the hash (16 384 costs ~50 ms of CPU a check). */
const CHEAP_HASH = { SCRYPT_COST: '2' }

async function start (t: Test, example: Example, env: NodeJS.ProcessEnv = {}) {
  const clock = manualClock()
  const app = await example.build({ clock: clock.now, env })
  t.teardown(() => app.close())
  return { app, clock }
}

const bearer = async (app: FastifyInstance, query: string): Promise<string> =>
  `Bearer ${(await app.inject(`/token?${query}`)).json<{ token: string }>().token}`

t.test('server (npm start): edge, tiers and an export with a quota', async (t) => {
  const { app } = await start(t, server)
  const alice = await bearer(app, 'user=alice')
  const victor = await bearer(app, 'user=victor&tier=vip')
  const exportAs = (authorization: string) => statuses(app, 3, { method: 'POST', url: '/export', headers: { authorization } })
  t.same(await exportAs(alice), [200, 200, 429], 'default: 20 tokens, cost 10')
  t.same(await exportAs(victor), [200, 200, 200], 'vip: a larger quota')
  const home = await app.inject({ url: '/', headers: { authorization: victor } })
  t.match(home.json(), { hello: { sub: 'victor', tier: 'vip' } })
  t.match(home.headers['ratelimit'], /^"edge";r=\d+;t=\d+, "app";r=169;t=1$/)
  t.equal(count(await statuses(app, 12, { url: '/', remoteAddress: '198.51.100.3' }), 200), 10, 'anonymous: 10 per IP')
  const health = await app.inject('/health')
  t.equal(health.statusCode, 200)
  t.equal(health.headers['ratelimit'], undefined, 'exempt')
})

t.test('edge-only: 10 per IP at once, then 2 per second', async (t) => {
  const { app, clock } = await start(t, edgeOnly)
  t.same(count(await statuses(app, 12), 200), 10)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['ratelimit-policy'], '"edge";q=10;w=5')
  clock.advance(1000)
  t.same(await statuses(app, 3), [200, 200, 429], 'two tokens a second later')
  t.equal((await app.inject({ url: '/', remoteAddress: '203.0.113.9' })).statusCode, 200, 'another IP: its own bucket')
})

t.test('jwt-tiers: the tier claim picks the bucket; unknown tiers get default', async (t) => {
  const { app, clock } = await start(t, jwtTiers)
  const as = async (query: string) => count(await statuses(app, 60, { url: '/', headers: { authorization: await bearer(app, query) } }), 200)
  t.equal(await as('user=alice'), 10, 'default: 10')
  t.equal(await as('user=bob&tier=pro'), 50, 'pro: 50')
  t.equal(await as('user=eve&tier=admin'), 10, 'a tier that is not configured: default')
  clock.advance(30_000) // refills the anonymous IP bucket (3 tokens at 0.1/s) spent by the /token calls
  t.equal(count(await statuses(app, 6), 200), 3, 'anonymous: 3 per IP')
})

t.test('route-cost: costs, and an export quota of its own', async (t) => {
  const { app, clock } = await start(t, routeCost)
  const headers = { authorization: await bearer(app, 'user=alice') }
  const exportOnce: InjectOptions = { method: 'POST', url: '/export', headers }
  t.same(await statuses(app, 3, exportOnce), [200, 200, 429], 'two exports spend 20 tokens')
  clock.advance(10_000) // 20 tokens again, but the export quota refills one a minute
  const third = await app.inject(exportOnce)
  t.equal(third.statusCode, 429, 'the export quota is still empty')
  t.match(third.headers['ratelimit'], /"route";r=0/)
  const search = await app.inject({ url: '/search?size=100', headers })
  t.match(search.headers['ratelimit'], /^"app";r=16;/, 'size 100 costs 4')
  const items = await app.inject({ url: '/items', headers })
  t.match(items.headers['ratelimit'], /^"app";r=15;/, 'items cost 1')
  clock.advance(60_000)
  t.equal((await app.inject(exportOnce)).statusCode, 200, 'a minute later, one more export')
})

t.test('pricing: plans of three limits, a negotiated quota in the token, and an export quota of two', async (t) => {
  const { app, clock } = await start(t, pricing)
  const free = { authorization: await bearer(app, 'user=alice') }
  t.same(await statuses(app, 7, { url: '/', headers: free }), [200, 200, 200, 200, 200, 429, 429], 'the per-second limit: 5')
  const refused = await app.inject({ url: '/', headers: free })
  t.equal(refused.headers['ratelimit-policy'], '"second";q=5;w=1, "hour";q=100;w=3600, "day";q=1000;w=86400')
  t.equal(refused.headers['retry-after'], '1')
  for (let i = 0; i < 19; i++) {
    clock.advance(1000)
    await statuses(app, 5, { url: '/', headers: free })
  }
  const hourly = await app.inject({ url: '/', headers: free })
  t.equal(hourly.statusCode, 429, '100 in an hour')
  t.match(hourly.headers.ratelimit, /"hour";r=0;/)
  const pro = await app.inject({ url: '/', headers: { authorization: await bearer(app, 'user=bob&tier=pro') } })
  t.match(pro.headers['ratelimit-policy'], /^"second";q=20;w=1/)
  const acme = { authorization: await bearer(app, 'user=acme&capacity=500&refill=50') }
  t.equal((await app.inject({ url: '/', headers: acme })).headers['ratelimit-policy'], '"app";q=500;w=10')
  const greedy = await app.inject({ url: '/', headers: { authorization: await bearer(app, 'user=greedy&capacity=1e12&refill=1') } })
  t.match(greedy.headers['ratelimit-policy'], /^"second";q=5;w=1/, 'above maxQuota: the free plan')
  const exportOnce: InjectOptions = { method: 'POST', url: '/export', headers: acme }
  t.same(await statuses(app, 2, exportOnce), [200, 429], 'one export a minute')
  for (let i = 0; i < 4; i++) {
    clock.advance(60_000)
    t.equal((await app.inject(exportOnce)).statusCode, 200)
  }
  clock.advance(60_000)
  const daily = await app.inject(exportOnce)
  t.equal(daily.statusCode, 429, 'five a day')
  t.match(daily.headers.ratelimit, /"exports-minute";r=1;t=0?, "exports-day";r=0;/)
  const bot = { authorization: await bearer(app, 'user=bot') }
  const hammered = await statuses(app, 15, { url: '/', headers: bot })
  t.same(hammered, [...Array<number>(5).fill(200), ...Array<number>(10).fill(429)])
  const shutOut = await app.inject({ url: '/', headers: bot })
  t.equal(shutOut.headers['retry-after'], '120', 'refused 10 times at once: 2 minutes out')
  clock.advance(60_000)
  t.equal((await app.inject({ url: '/', headers: bot })).statusCode, 429, 'still out a minute later, the quota full again')
})

t.test('api-key: known keys have their own bucket; invented keys stay in the IP bucket', async (t) => {
  const { app } = await start(t, apiKey)
  const withKey = (key: string): InjectOptions => ({ url: '/', headers: { 'x-api-key': key } })
  t.same(await statuses(app, 6, withKey('key-acme-0001')), [200, 200, 200, 200, 200, 429])
  t.same(await statuses(app, 1, withKey('key-globex-0002')), [200], 'another customer')
  const invented = []
  for (let i = 0; i < 8; i++) invented.push((await app.inject(withKey(`made-up-${i}`))).statusCode)
  t.same(invented, [401, 401, 401, 401, 401, 429, 429, 429], 'rotating keys does not escape the IP bucket')
})

t.test('shadow: never refuses, counts would-be refusals', async (t) => {
  const { app } = await start(t, shadow)
  t.same(count(await statuses(app, 8), 200), 8)
  const last = await app.inject('/')
  t.equal(last.headers['ratelimit'], '"edge";r=0;t=5', 'headers still tell the truth')
  t.match((await app.inject('/shadow-report')).json(), {
    shadow: true, minutes: 1, wouldRefuse: 4,
    clients: [{ client: '{ip:127.0.0.1}', layer: 'edge', wouldRefuse: 4, error: 0, limits: { edge: 4 } }],
    tiers: [{ layer: 'edge', wouldRefuse: 4, limits: { edge: 4 } }]
  })
})

t.test('replica-share: each replica enforces its share of the quota', async (t) => {
  for (const [replicas, share] of [['3', 10], ['2', 15], ['1', 30]] as const) {
    const { app } = await start(t, replicaShare, { REPLICAS: replicas })
    t.equal(count(await statuses(app, 40), 200), share, `${replicas} replicas: ${share} each`)
  }
})

t.test('problem-json: refusals as RFC 9457 problem details, headers kept', async (t) => {
  const { app } = await start(t, problemJson)
  await statuses(app, 3)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.match(refused.headers['content-type'], /^application\/problem\+json/)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['ratelimit'], '"edge";r=0;t=3')
  t.same(refused.json(), {
    type: 'about:blank', title: 'Too Many Requests', status: 429, detail: 'Rate limit exceeded, retry in 1 second', instance: '/', retryAfterSeconds: 1
  })
  const missing = await app.inject('/nowhere')
  t.equal(missing.statusCode, 429, 'the edge covers unknown routes too')
})

const HOME = '198.51.100.20'
const loginAs = (account: string, password: string, remoteAddress = HOME): InjectOptions =>
  ({ method: 'POST', url: '/login', payload: { account, password }, remoteAddress })
const ALICE = 'correct horse battery staple'

t.test('login: only failures count, per account and address; a success clears them; refused from that address even with the right password', async (t) => {
  const { app, clock } = await start(t, login, CHEAP_HASH)
  const wrong = loginAs('alice', 'guess')
  const right = loginAs('alice', ALICE)
  t.same(await statuses(app, 3, wrong), [401, 401, 401])
  t.match((await app.inject(wrong)).json(), { attemptsLeft: 1 })
  t.same(await statuses(app, 1, right), [200], 'the right password, within the budget')
  clock.advance(60_000) // the route's guard: 10 a minute per address
  t.same(await statuses(app, 6, loginAs('Alice ', 'guess')), [401, 401, 401, 401, 401, 429], 'a success cleared the 4 failures: 5 again (the account name is normalised)')
  const refused = await app.inject(right)
  t.equal(refused.statusCode, 429, 'refused from this address even with the right password')
  t.equal(refused.headers['retry-after'], '60')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.match(refused.json(), { code: 'TOLLGATE_RATE_LIMITED', message: 'Rate limit exceeded, retry in 60 seconds' })
  t.same(await statuses(app, 1, loginAs('alice', ALICE, '192.0.2.50')), [200], 'from another address, alice logs in')
  t.same(await statuses(app, 1, loginAs('bob', 'nope')), [401], "another account's failures are its own")
  clock.advance(59_999)
  t.equal((await app.inject(right)).statusCode, 429, 'a millisecond early')
  clock.advance(1)
  t.equal((await app.inject(right)).statusCode, 200, 'one token back a minute later: the right password passes, and clears the address')
  t.same(await statuses(app, 6, wrong), [401, 401, 401, 401, 401, 429], 'five failures again')
  clock.advance(3_600_000)
  const burst = await Promise.all(Array.from({ length: 12 }, async () => (await app.inject(loginAs('bob', 'guess', '192.0.2.60'))).statusCode))
  t.same([count(burst, 401), count(burst, 429)], [5, 7], 'twelve wrong guesses at once: five are checked, not twelve')
  const sprayed = []
  for (let i = 0; i < 12; i++) sprayed.push((await app.inject(loginAs(`user${i}`, 'guess', '192.0.2.70'))).statusCode)
  t.same(sprayed, [...Array<number>(10).fill(401), 429, 429], 'one address, many accounts: the route guard, 10 a minute')
  t.equal((await app.inject({ method: 'POST', url: '/login', payload: { account: '' } })).statusCode, 400, 'the body is validated')
})

/**
 * The recipe examples/login.ts replaced: failures counted per account alone, so
 * that anyone could spend an account's budget and keep its owner out.
 */
async function accountOnlyLogin (clock: () => number): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ clock }), edge: { capacity: 20, refillPerSecond: 1 } })
  app.post<{ Body: { account: string, password: string } }>('/login', async (request, reply) => {
    const key = `login:${request.body.account}`
    const attempt = await app.tollgate.consume(key, { capacity: 5, refillPerSecond: 1 / 60 })
    if (!attempt.allowed) throw new RateLimitedError(attempt)
    if (request.body.password !== ALICE) return reply.code(401).send({})
    await app.tollgate.reset(key)
    return {}
  })
  return app
}

/**
 * An attacker sends five wrong passwords for alice, then one a minute, each from
 * another address, each just before the owner logs in from her own with the
 * right password; resolves to the owner's statuses over an hour.
 */
async function ownerUnderAttack (app: FastifyInstance, advance: (ms: number) => void): Promise<number[]> {
  for (let i = 0; i < 5; i++) await app.inject(loginAs('alice', 'guess', '203.0.113.1'))
  const owner = []
  for (let minute = 0; minute < 60; minute++) {
    advance(60_000)
    await app.inject(loginAs('alice', 'guess', `203.0.113.${minute + 2}`))
    owner.push((await app.inject(loginAs('alice', ALICE))).statusCode)
  }
  return owner
}

t.test('login: others cannot lock the owner out, as they could when failures counted per account alone', async (t) => {
  const old = manualClock()
  const accountOnly = await accountOnlyLogin(old.now)
  t.teardown(() => accountOnly.close())
  t.same(await ownerUnderAttack(accountOnly, old.advance), Array<number>(60).fill(429), 'per account alone: the owner refused in 60 of 60 minutes')

  const { app, clock } = await start(t, login, CHEAP_HASH)
  t.same(await ownerUnderAttack(app, clock.advance), Array<number>(60).fill(200), 'per account and address: the owner in, 60 of 60 minutes')

  clock.advance(60_000) // the ceiling full again
  // 30 addresses, 5 wrong guesses each, at once: the ceiling lets 100 be checked.
  const guesses = await Promise.all(Array.from({ length: 150 }, async (_, i) => (await app.inject(loginAs('alice', 'guess', `203.0.114.${Math.floor(i / 5) + 1}`))).statusCode))
  t.same([count(guesses, 401), count(guesses, 429)], [100, 50], 'many addresses: 100 failures an hour per account')
  t.equal((await app.inject(loginAs('alice', ALICE))).statusCode, 200, 'the owner, from an address she logged in from: in')
  const newAddress = await app.inject(loginAs('alice', ALICE, '192.0.2.80'))
  t.equal(newAddress.statusCode, 429, 'the price: from a new address, refused while the ceiling is spent')
  // 36 s for one token at 100 an hour; 100 / 3600 as a float makes it 36.000000000000004 s, rounded up.
  t.match(newAddress.headers['retry-after'], /^3[67]$/, 'one failure back every 36 s')
  clock.advance(Number(newAddress.headers['retry-after']) * 1000)
  t.equal((await app.inject(loginAs('alice', ALICE, '192.0.2.80'))).statusCode, 200, 'and in after Retry-After')
})

t.test('frl-global: 100 a minute as a bucket: 100 at once, then one every 0.6 s, with FRL\'s headers', async (t) => {
  const { app, clock } = await start(t, frlGlobal)
  t.equal(count(await statuses(app, 100), 200), 100)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1', 'not the rest of the minute')
  t.match(refused.headers, { 'x-ratelimit-limit': '100', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '60' })
  t.equal(refused.headers['ratelimit'], undefined, 'legacy headers only')
  clock.advance(600)
  t.same(await statuses(app, 2), [200, 429], 'a token every 0.6 s')
})

t.test('frl-not-found: the edge counts 404s; a 404 budget of its own on top', async (t) => {
  const { app, clock } = await start(t, frlNotFound)
  t.equal((await app.inject('/guess-0')).headers.ratelimit, '"edge";r=1;t=1, "not-found";r=3;t=15', "the limiter's member after the edge's")
  clock.advance(15_000)
  t.same(await statuses(app, 3, { url: '/guess-1' }), [404, 404, 429], 'the edge: 2 at once')
  clock.advance(1000)
  t.same(await statuses(app, 2, { url: '/guess-2' }), [404, 404], 'four misses in all')
  clock.advance(1000)
  const refused = await app.inject('/guess-3')
  t.equal(refused.statusCode, 429, 'the 404 budget is spent')
  t.equal(refused.headers['retry-after'], '13', '1 token at 4 a minute, less the 2 s refilled since the first miss')
  t.equal(refused.json().code, 'TOLLGATE_RATE_LIMITED')
  t.equal((await app.inject('/')).statusCode, 200, 'routes that exist: the edge alone')
  t.equal((await app.inject({ url: '/guess-4', remoteAddress: '203.0.113.9' })).statusCode, 404, 'per IP')
})

t.test('frl-error-response: the 429 body built in setErrorHandler from the decision', async (t) => {
  const { app } = await start(t, frlErrorResponse)
  t.same(await statuses(app, 5), [200, 200, 200, 200, 200])
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '12')
  t.match(refused.headers['ratelimit'], /^"edge";r=0;t=60$/, 'the headers are kept')
  t.match(refused.json(), {
    statusCode: 429,
    error: 'Too Many Requests',
    message: 'I only allow 5 requests at once, then one every 12 seconds. Try again in 12 seconds.',
    date: Number,
    expiresIn: 12000
  })
})

t.test('frl-key-generator: trustProxy for the client IP, a session user in the app layer', async (t) => {
  const { app } = await start(t, frlKeyGenerator)
  const as = (headers: Record<string, string>): InjectOptions => ({ url: '/', headers })
  t.same(await statuses(app, 6, as({ cookie: 'sid=s-alice' })), [200, 200, 200, 200, 200, 429], 'alice: 5')
  t.equal((await app.inject(as({ cookie: 'theme=dark; sid=s-bob' }))).statusCode, 200, 'bob: his own')
  t.same(await statuses(app, 6, as({ 'x-forwarded-for': '203.0.113.7' })), [200, 200, 200, 200, 200, 429], 'anonymous: per client IP')
  t.same((await app.inject(as({ 'x-forwarded-for': '198.51.100.9' }))).json(), { user: null, ip: '198.51.100.9' }, 'the proxy names the client')
  const untrusted = await app.inject({ url: '/', remoteAddress: '192.0.2.1', headers: { 'x-forwarded-for': '198.51.100.10' } })
  t.equal(untrusted.json().ip, '192.0.2.1', 'a client that is not the proxy cannot pick its IP')
})

t.test('frl-variable-max: a max per caller, as tiers; unknown keys count per IP', async (t) => {
  const { app, clock } = await start(t, frlVariableMax)
  const withKey = (key: string): InjectOptions => ({ url: '/', headers: { 'service-key': key } })
  t.same(await statuses(app, 4, withKey('key-pro-0001')), [200, 200, 200, 429], 'pro: 3')
  t.same(await statuses(app, 3, withKey('key-basic-0002')), [200, 200, 429], 'default: 2')
  const invented = []
  for (let i = 0; i < 3; i++) invented.push((await app.inject(withKey(`made-up-${i}`))).statusCode)
  t.same(invented, [200, 200, 429], 'invented keys share one IP bucket')
  clock.advance(1000)
  t.same(await statuses(app, 4, withKey('key-pro-0001')), [200, 200, 200, 429], 'pro: 3 a second')
})

t.test('frl-allow-list: addresses, ranges and a secret header are never limited, and get no headers', async (t) => {
  const { app } = await start(t, frlAllowList)
  t.same(await statuses(app, 4), [200, 200, 200, 429], 'others: 3 at once')
  for (const remoteAddress of ['192.168.0.10', '10.20.30.40', '::ffff:10.0.0.1']) {
    t.same(await statuses(app, 6, { url: '/', remoteAddress }), [200, 200, 200, 200, 200, 200], `${remoteAddress}: allowed`)
  }
  const internal: InjectOptions = { url: '/', remoteAddress: '203.0.113.9', headers: { 'x-app-client-id': INTERNAL_CLIENT_SECRET } }
  t.same(await statuses(app, 6, internal), [200, 200, 200, 200, 200, 200], 'the internal secret: allowed')
  const allowed = await app.inject(internal)
  t.equal(allowed.headers['ratelimit'], undefined, 'no bucket, no header')
  t.equal(allowed.headers['ratelimit-policy'], undefined)
  const guessed: InjectOptions = { url: '/', remoteAddress: '203.0.113.9', headers: { 'x-app-client-id': 'internal-usage' } }
  t.same(await statuses(app, 4, guessed), [200, 200, 200, 429], 'FRL\'s header value is no secret')
})

t.test('frl-hook: the app layer keyed by a user id an earlier preHandler set, else by IP', async (t) => {
  const { app, clock } = await start(t, frlHook)
  t.same(await statuses(app, 6, { url: '/?userId=alice' }), [200, 200, 200, 200, 200, 429], 'alice: 5')
  t.same((await app.inject('/?userId=bob')).json(), { hello: 'bob' }, 'bob: his own')
  t.same(await statuses(app, 6), [200, 200, 200, 200, 200, 429], 'no user: per IP')
  clock.advance(12_000)
  t.same(await statuses(app, 2, { url: '/?userId=alice' }), [200, 429], 'one back every 12 s')
})

t.test('frl-custom-store: a Map store on the exported engine limits like the memory store', async (t) => {
  const { app, clock } = await start(t, frlCustomStore)
  t.equal(count(await statuses(app, 12), 200), 10)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['ratelimit'], '"edge";r=0;t=5')
  clock.advance(1000)
  t.same(await statuses(app, 3), [200, 200, 429], 'two tokens a second later')
  t.equal((await app.inject({ url: '/', remoteAddress: '203.0.113.9' })).statusCode, 200, 'another IP: its own bucket')
})

t.test('frl-callbacks: a hook after the edge sees admitted requests, onLimit the refusals', async (t) => {
  const { app } = await start(t, frlCallbacks)
  t.same(await statuses(app, 5), [200, 200, 200, 429, 429])
  t.same((await app.inject('/stats')).json(), { admitted: 3, refused: 2, lastRefused: '127.0.0.1: edge, retry in 1000 ms' }, '/stats itself is left out')
})

t.test('frl-ban: the penalty: after two 429s, 403 for a minute, and onBanReach once', async (t) => {
  const { app, clock } = await start(t, frlBan)
  t.same(await statuses(app, 6), [200, 200, 200, 429, 429, 403], 'FRL ban: 2 is after: 3')
  const banned = await app.inject('/')
  t.equal(banned.statusCode, 403)
  t.equal(banned.headers['retry-after'], '60', 'until the penalty ends')
  t.match(banned.json(), { code: 'TOLLGATE_PENALIZED', message: 'Refused for 60 seconds: too many requests after being limited' })
  t.same((await app.inject('/banned')).json(), { banned: ['127.0.0.1 ({ip:127.0.0.1}:edge)'] }, 'called when the penalty starts')
  t.equal((await app.inject({ url: '/', remoteAddress: '203.0.113.9' })).statusCode, 200, 'other clients are not concerned')
  clock.advance(59_000)
  t.equal((await app.inject('/')).statusCode, 403, 'still banned a second before the end')
  clock.advance(1000)
  t.same(await statuses(app, 4), [200, 429, 429, 403], 'a minute later: a token back, and two more 429s before the next ban')
})

t.test('frl-route-config: only the routes that ask are limited, each with its own bucket', async (t) => {
  const { app, clock } = await start(t, frlRouteConfig)
  t.same(await statuses(app, 4), [200, 200, 200, 429], '/: 3 at once')
  t.same(await statuses(app, 4, { url: '/private' }), [200, 200, 200, 429], '/private: its own 3')
  const publicRoute = await app.inject('/public')
  t.equal(publicRoute.headers['ratelimit'], undefined, '/public: no limit at all')
  t.same(await statuses(app, 20, { url: '/public' }), Array.from({ length: 20 }, () => 200))
  const sub = await app.inject('/public/sub-rated-1')
  t.equal(sub.statusCode, 200)
  t.equal(sub.headers['ratelimit'], undefined, '127.0.0.1 is allowed on sub-rated-1')
  const other = await app.inject({ url: '/public/sub-rated-1', remoteAddress: '203.0.113.9' })
  t.match(other.headers['ratelimit-policy'], /"edge-route";q=3000;w=60/, 'others: 3000, then 50/s')
  t.same(await statuses(app, 4, { url: '/', remoteAddress: '192.168.0.10' }), [200, 200, 200, 200], 'the global allow-list')
  clock.advance(20_000)
  t.same(await statuses(app, 2), [200, 429], 'one back every 20 s')
})

t.test('frl-route-override: /public left out, /private stricter and counted in the client bucket too', async (t) => {
  const { app } = await start(t, frlRouteOverride)
  t.same(await statuses(app, 10, { url: '/private' }), [...Array.from({ length: 9 }, () => 200), 429], '/private: 9')
  const home = await app.inject('/')
  t.equal(home.statusCode, 200)
  t.match(home.headers['ratelimit'], /^"edge";r=90;/, 'the nine to /private were taken from the 100 too')
  const publicRoute = await app.inject('/public')
  t.equal(publicRoute.headers['ratelimit'], undefined, '/public: left out')
  t.equal(count(await statuses(app, 95), 200), 90, 'the rest of the 100')
})

t.test('frl-group: two routes share one bucket per client', async (t) => {
  const { app, clock } = await start(t, frlGroup)
  const responses = []
  for (const url of ['/otp/send', '/otp/resend', '/otp/send', '/otp/resend']) responses.push(await app.inject(url))
  t.same(responses.map((response) => response.statusCode), [200, 200, 200, 429], 'alternating buys nothing')
  t.equal(responses[1]?.headers.ratelimit, '"edge";r=98;t=1, "otp";r=1;t=40', "the group's member after the edge's")
  const refused = await app.inject('/otp/send')
  t.equal(refused.headers['retry-after'], '20')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.equal(refused.json().code, 'TOLLGATE_RATE_LIMITED')
  t.equal((await app.inject({ url: '/otp/resend', remoteAddress: '203.0.113.9' })).statusCode, 200, 'per client')
  clock.advance(20_000)
  t.same(await statuses(app, 2, { url: '/otp/resend' }), [200, 429], 'one back every 20 s')
})

t.test('frl-manual: limits checked by hand in the handler', async (t) => {
  const { app } = await start(t, frlManual)
  t.same(await statuses(app, 4, { url: '/custom' }), [200, 200, 200, 429])
  const refused = await app.inject('/custom')
  t.equal(refused.body, 'Limit exceeded')
  t.equal(refused.headers['retry-after'], '20')
  t.match(refused.headers['ratelimit'], /^"edge";r=\d+;t=\d+$/, 'the edge still applies; check() sets no header')
  t.equal((await app.inject('/')).body, 'Hello world', '/ has its own bucket')
  t.equal(count(await statuses(app, 100), 200), 99, 'of 100 a minute, one spent just before')
})

t.test('redis: two replicas share one quota', async (t) => {
  if (!requireRedis(t)) return
  const redis = await startRedis(t)
  const url = `redis://127.0.0.1:${redis.port}`
  const replicas = [await buildRedisServer(url), await buildRedisServer(url)] as const
  t.teardown(async () => { for (const app of replicas) await app.close() })
  const authorization = await bearer(replicas[0], 'user=alice')
  const exportOn = async (app: FastifyInstance) => (await app.inject({ method: 'POST', url: '/export', headers: { authorization } })).statusCode
  t.same([await exportOn(replicas[0]), await exportOn(replicas[1]), await exportOn(replicas[0])], [200, 200, 429], '20 tokens shared: two exports in all')
  t.equal((await redis.client(t).keys('tollgate:{user:alice}:*')).length, 2, 'the user and route buckets live in Redis')
})

t.test('redis: the app closes while Redis is away (the client is disconnected, not quit)', async (t) => {
  const app = await buildRedisServer(`redis://127.0.0.1:${await freePort()}`) // nothing listens there
  await t.resolves(app.close())
})

t.test('redis-cluster: two replicas share one quota on a 3-master cluster', async (t) => {
  if (!requireRedis(t)) return
  const cluster = await startCluster(t)
  const nodes = cluster.ports.map((port) => `127.0.0.1:${port}`).join(',')
  const replicas = [await buildClusterServer(nodes), await buildClusterServer(nodes)] as const
  t.teardown(async () => { for (const app of replicas) await app.close() })
  for (const app of replicas) await app.ready()
  const tokens = await Promise.all(['alice', 'bob', 'carol'].map(async (user) => bearer(replicas[0], `user=${user}`)))
  for (const authorization of tokens) {
    const codes = []
    for (let i = 0; i < 3; i++) codes.push((await (i % 2 === 0 ? replicas[0] : replicas[1]).inject({ method: 'POST', url: '/export', headers: { authorization } })).statusCode)
    t.same(codes, [200, 200, 429], 'two exports per user across both replicas')
  }
})

/**
 * Sends `times` requests at once, so that on a busy machine the bucket does not
 * refill while they arrive; returns their statuses. (The exact counts, over
 * time, are the inject tests' job above.)
 */
async function codes (url: string, times: number, init: RequestInit = {}): Promise<number[]> {
  return Promise.all(Array.from({ length: times }, async () => {
    const response = await fetch(url, init)
    await response.arrayBuffer()
    return response.status
  }))
}

async function token (url: string, query: string): Promise<RequestInit> {
  const { token } = await (await fetch(`${url}/token?${query}`)).json() as { token: string }
  return { headers: { authorization: `Bearer ${token}` } }
}

/** The demo API's POST /export: 20 tokens at cost 10, so two pass. */
const twoExports = async (url: string): Promise<{ statuses: number[], passes: number }> =>
  ({ statuses: await codes(`${url}/export`, 3, { method: 'POST', ...await token(url, 'user=alice') }), passes: 2 })

/**
 * For each example that readme.test.ts does not paste the printed lines of (PASTED): a burst that should meet
 * its limit, and how many of it pass at least.
 */
const probes: Record<Exclude<(typeof EXAMPLES)[number], Pasted>, (url: string) => Promise<{ statuses: number[], passes: number }>> = {
  'edge-only': async (url) => ({ statuses: await codes(`${url}/`, 25), passes: 10 }),
  'api-key': async (url) => ({ statuses: await codes(`${url}/`, 7, { headers: { 'x-api-key': 'key-acme-0001' } }), passes: 5 }),
  shadow: async (url) => {
    const statuses = await codes(`${url}/`, 8)
    const { wouldRefuse } = await (await fetch(`${url}/shadow-report`)).json() as { wouldRefuse: number }
    // Shadow mode never refuses: all 8 pass, and the would-be refusals stand in for a 429.
    return { statuses: [...statuses, wouldRefuse >= 1 ? 429 : 200], passes: 8 }
  },
  'problem-json': async (url) => ({ statuses: await codes(`${url}/`, 5), passes: 3 }),
  login: async (url) => {
    const send = (account: string, password: string) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ account, password }) })
    const welcome = await codes(`${url}/login`, 1, send('bob', 'hunter2'))
    const guesses = await codes(`${url}/login`, 6, send('alice', 'guess'))
    // Five wrong guesses are checked (401); the sixth finds the account empty.
    return { statuses: [...welcome, ...guesses.map((status) => status === 401 ? 200 : status)], passes: 6 }
  },
  redis: twoExports,
  'redis-cluster': twoExports,
  pricing: async (url) => ({ statuses: await codes(`${url}/`, 8, await token(url, 'user=alice')), passes: 5 }),
  metrics: async (url) => ({ statuses: await codes(`${url}/`, 25), passes: 10 }),
  'frl-global': async (url) => ({ statuses: await codes(`${url}/`, 110), passes: 100 }),
  // A 404 is an answer the limit let through.
  'frl-not-found': async (url) => ({ statuses: (await codes(`${url}/nowhere`, 4)).map((code) => code === 404 ? 200 : code), passes: 2 })
}

type Probed = keyof typeof probes
const PROBED = EXAMPLES.filter((name): name is Probed => !(PASTED as readonly string[]).includes(name))

t.test('every example readme.test.ts does not paste starts with `npm run example <name>`, answers, and limits', { jobs: 4 }, async (t) => {
  t.same(PROBED.length + PASTED.length, EXAMPLES.length, 'every example, here or there')
  for (const name of PROBED) {
    void t.test(name, async (t) => {
      let env: NodeJS.ProcessEnv = {}
      if (name === 'redis' || name === 'redis-cluster') {
        if (!requireRedis(t)) return
        env = name === 'redis'
          ? { REDIS_URL: `redis://127.0.0.1:${(await startRedis(t)).port}` }
          : { REDIS_CLUSTER: (await startCluster(t)).ports.map((port) => `127.0.0.1:${port}`).join(',') }
      }
      const { url, banner } = await runExample(t, name, env)
      t.notMatch(banner, /NOT connected/, 'no warning when Redis is there')
      const { statuses, passes } = await probes[name](url)
      t.ok(count(statuses, 200) >= passes, `at least ${passes} pass (${count(statuses, 200)} of ${statuses.length})`)
      t.ok(count(statuses, 429) >= 1, `and the limit answers 429 (${count(statuses, 429)})`)
    })
  }
})

t.test('npm run example redis / redis-cluster say so when Redis is not connected at startup', async (t) => {
  const nowhere = `127.0.0.1:${await freePort()}` // nothing listens there
  // Both at once: each waits for its client to give up connecting.
  const examples = [['redis', { REDIS_URL: `redis://${nowhere}` }, `redis://${nowhere}`], ['redis-cluster', { REDIS_CLUSTER: nowhere }, nowhere]] as const
  const banners = await Promise.all(examples.map(async ([name, env]) => (await runExample(t, name, env)).banner))
  examples.forEach(([name, , where], i) => {
    t.match(banners[i], `WARNING: Redis at ${where} is NOT connected`, name)
    t.match(banners[i], /each replica limits alone/, name)
  })
})

t.test('npm run example with an unknown name lists the examples and fails', async (t) => {
  const child = spawn(process.execPath, [RUN, 'nope'], { env: untracedEnv(), stdio: ['ignore', 'ignore', 'pipe'] })
  let errors = ''
  child.stderr.on('data', (chunk: Buffer) => { errors += String(chunk) })
  const code = await new Promise((resolve) => child.once('close', resolve)) // 'close': after stderr is read
  t.equal(code, 1)
  t.match(errors, /npm run example edge-only/)
})

t.test('the examples run without tap\'s process tracking (its spawn hook puts its variables back; child-env.ts takes them out)', async (t) => {
  const tracking = 'console.log(Object.keys(process.env).filter((name) => /^(NODE_OPTIONS|_TAPJS_)/.test(name)).join())'
  t.equal(String(spawnSync(process.execPath, ['-e', tracking], { env: untracedEnv() }).stdout).trim(), '')
})
