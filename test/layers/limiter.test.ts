/**
 * `fastify.tollgate.limiter(options)`: a limiter as a hook (a 404 handler's
 * budget, a group of routes on one bucket, a route with a key function of its
 * own), its headers, allow-list, penalty, `onLimit`, decision events and shadow
 * mode, its `check()`, numeric keys of the manual calls, and a group of routes
 * sharing one bucket on Redis.
 */
import t, { type Test } from 'tap'
import { createHash, createHmac } from 'node:crypto'
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import Fastify, { type FastifyInstance, type FastifyServerOptions, type InjectOptions } from 'fastify'
import tollgate, {
  DECISION_CHANNEL, InvalidCostError, memoryStore, per, redisStore,
  type DecisionMessage, type LimitDecision, type Store, type TollgateOptions
} from '../../lib/index.js'
import { count, logSink, manualClock, statuses, unhandledRejections } from '../helpers.js'
import { requireRedis, startRedis } from '../redis-server.js'

const GENEROUS = { capacity: 1000, refillPerSecond: 100 }
const ok = async (): Promise<string> => 'ok'

interface Built {
  app: FastifyInstance
  clock: ReturnType<typeof manualClock>
  refusals: LimitDecision[]
}

/** The plugin on a memory store with a manual clock, `onLimit` recording; `routes` declared, then ready. */
async function build (t: Test, options: Omit<TollgateOptions, 'store'>, routes: (app: FastifyInstance) => void, fastify: FastifyServerOptions = {}): Promise<Built> {
  const clock = manualClock(1_000_000)
  const refusals: LimitDecision[] = []
  const app = Fastify(fastify)
  t.teardown(() => app.close())
  await app.register(tollgate, { store: memoryStore({ clock: clock.now }), onLimit: (_request, decision) => { refusals.push(decision) }, ...options })
  routes(app)
  await app.ready()
  return { app, clock, refusals }
}

const sha256 = (value: string): string => createHash('sha256').update(value).digest('base64url')

/** The decision messages published for the rest of test `t`. */
function decisions (t: Test): DecisionMessage[] {
  const messages: DecisionMessage[] = []
  const onMessage = (message: unknown): void => { messages.push(message as DecisionMessage) }
  subscribe(DECISION_CHANNEL, onMessage)
  t.teardown(() => { unsubscribe(DECISION_CHANNEL, onMessage) })
  return messages
}

t.test("a 404 handler's budget: 404s take from a bucket of their own, on top of the edge's", async (t) => {
  const { app, clock, refusals } = await build(t, { edge: GENEROUS }, (app) => {
    app.setNotFoundHandler({ preHandler: app.tollgate.limiter({ name: 'not-found', ...per(2, 'minute') }) }, async (_request, reply) => reply.code(404).send({ missing: true }))
    app.get('/', ok)
  })
  const first = await app.inject('/guess-1')
  t.equal(first.statusCode, 404)
  t.equal(first.headers['ratelimit-policy'], '"edge";q=1000;w=10, "not-found";q=2;w=60', "the limiter's member after the edge's")
  t.equal(first.headers.ratelimit, '"edge";r=999;t=1, "not-found";r=1;t=30')
  t.equal((await app.inject('/guess-2')).statusCode, 404)
  const refused = await app.inject('/guess-3')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '30')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.match(refused.json(), { code: 'TOLLGATE_RATE_LIMITED', message: 'Rate limit exceeded, retry in 30 seconds' })
  t.match(refusals, [{ layer: 'limiter', allowed: false, cost: 1, buckets: [{ name: 'not-found', key: '{ip:127.0.0.1}:limiter:not-found', capacity: 2, tokens: 0 }] }])
  t.same(await statuses(app, 3), [200, 200, 200], 'routes that exist: the edge alone')
  t.equal((await app.inject({ url: '/guess-4', remoteAddress: '203.0.113.9' })).statusCode, 404, 'per client address')
  clock.advance(30_000)
  t.equal((await app.inject('/guess-5')).statusCode, 404, 'one miss back after 30 s')
})

t.test('a group of routes shares one bucket; another limiter keeps its own; a request counts once per limiter', async (t) => {
  const { app } = await build(t, { edge: GENEROUS }, (app) => {
    const otp = app.tollgate.limiter({ name: 'otp', capacity: 3, refillPerSecond: 3 / 60 })
    app.get('/otp/send', { onRequest: otp }, ok)
    app.get('/otp/resend', { preValidation: otp }, ok)
    app.get('/otp/check', { preHandler: app.tollgate.limiter({ name: 'otp-check', capacity: 1, refillPerSecond: 1 / 60 }) }, ok)
    app.register(async (scoped) => {
      scoped.addHook('onRequest', otp)
      scoped.get('/otp/twice', { preHandler: otp }, ok)
    })
  })
  const codes: number[] = []
  for (const url of ['/otp/send', '/otp/resend', '/otp/twice']) codes.push((await app.inject(url)).statusCode)
  t.same(codes, [200, 200, 200], 'the route that carries it twice took one token')
  const refused = await app.inject('/otp/resend')
  t.equal(refused.statusCode, 429, 'three in all, whichever route')
  t.equal(refused.headers['retry-after'], '20')
  t.equal(refused.headers.ratelimit, '"edge";r=996;t=1, "otp";r=0;t=60')
  t.same(await statuses(app, 2, { url: '/otp/check' }), [200, 429], 'another name, another bucket')
})

t.test("a route keyed by an async key function: a user's own bucket, the address without one", async (t) => {
  const { app, refusals } = await build(t, { edge: GENEROUS }, (app) => {
    const perUser = app.tollgate.limiter({
      name: 'per-user',
      capacity: 2,
      refillPerSecond: 1,
      key: async (request) => {
        await new Promise((resolve) => setImmediate(resolve))
        return request.headers['x-user'] as string | undefined
      }
    })
    app.get('/report', { preHandler: perUser }, ok)
  })
  const as = (user?: string): InjectOptions => ({ url: '/report', headers: user === undefined ? {} : { 'x-user': user } })
  t.same(await statuses(app, 3, as('alice')), [200, 200, 429])
  t.same(await statuses(app, 3, as('bob')), [200, 200, 429], 'another user: another bucket')
  t.same(await statuses(app, 3, as()), [200, 200, 429], 'no user: the client address')
  t.same(refusals.map((refusal) => refusal.buckets[0]?.key), [
    `{lim:${sha256('alice')}}:limiter:per-user`,
    `{lim:${sha256('bob')}}:limiter:per-user`,
    '{ip:127.0.0.1}:limiter:per-user'
  ], 'values kept as digests, never in clear')
})

t.test('key values: numbers, digests under edge.keySecret, IPv6 by the edge subnet, and fallbacks logged once a minute', async (t) => {
  const { lines, logger } = logSink()
  const escaped = unhandledRejections(t)
  const secret = 'limiter-test-secret-0123456789'
  const { app } = await build(t, { edge: { ...GENEROUS, keySecret: secret, ipv6Subnet: 48 } }, (app) => {
    const limiter = app.tollgate.limiter({
      name: 'keyed',
      capacity: 5,
      refillPerSecond: 1,
      key: (request) => {
        const how = request.headers['x-key']
        if (how === 'number') return 42
        if (how === 'string') return '42'
        if (how === 'throw') throw new Error('no key')
        if (how === 'reject') return Promise.reject(new Error('no key later'))
        if (how === 'nan') return Number.NaN
        if (how === 'empty') return ''
        return undefined
      }
    })
    app.get('/', async (request) => (await limiter.check(request)).buckets[0]?.key)
  }, { logger })
  const keyOf = async (how: string, remoteAddress = '192.0.2.1'): Promise<string> => (await app.inject({ url: '/', headers: { 'x-key': how }, remoteAddress })).body
  const hmac = createHmac('sha256', secret).update('42').digest('base64url')
  t.equal(await keyOf('number'), `{lim:${hmac}}:limiter:keyed`, 'a number keys the bucket of its string, HMAC-digested')
  t.equal(await keyOf('string'), `{lim:${hmac}}:limiter:keyed`)
  t.equal(await keyOf('nan'), '{ip:192.0.2.1}:limiter:keyed', 'NaN is no key')
  t.equal(await keyOf('empty'), '{ip:192.0.2.1}:limiter:keyed', "'' is no key")
  t.equal(await keyOf('none', '2001:db8:aa:bb::1'), '{ip:2001:db8:aa::/48}:limiter:keyed', 'IPv6 grouped as the edge groups it')
  t.equal(await keyOf('none', '::ffff:198.51.100.4'), '{ip:198.51.100.4}:limiter:keyed', 'IPv4-mapped unmapped')
  t.equal(await keyOf('throw'), '{ip:192.0.2.1}:limiter:keyed', 'a throw: the address')
  t.equal(await keyOf('reject'), '{ip:192.0.2.1}:limiter:keyed', 'a rejection: the address')
  t.equal(await keyOf('throw'), '{ip:192.0.2.1}:limiter:keyed')
  await keyOf('reject')
  t.equal(lines.filter((line) => line.msg === 'fastify-tollgate: limiter.key threw; keyed by client IP').length, 2, 'each throw logged, as edge.key\'s')
  t.match(lines.filter((line) => line.code === 'TOLLGATE_LOOKUP_FAILED'), [{ function: 'limiter.key' }], 'a rejection logged once a minute')
  t.same(escaped, [], 'no unhandled rejection')
})

t.test('costs: a number, a function, a promise; a mistake fails the request with a 500 (a failed lookup a 503), never a free pass', async (t) => {
  const { app } = await build(t, { edge: GENEROUS }, (app) => {
    const costly = app.tollgate.limiter({ name: 'costly', capacity: 10, refillPerSecond: 1, cost: 4 })
    const byBody = app.tollgate.limiter({
      name: 'by-header',
      capacity: 10,
      refillPerSecond: 1,
      cost: (request) => {
        const cost = request.headers['x-cost']
        if (cost === 'throw') throw new Error('boom')
        if (cost === 'reject') return Promise.reject(new Error('boom later'))
        if (cost === 'later') return Promise.resolve(3)
        return Number(cost)
      }
    })
    app.get('/costly', { onRequest: costly }, ok)
    app.get('/priced', { preHandler: byBody }, ok)
    app.setNotFoundHandler({ preHandler: byBody }, async (_request, reply) => reply.code(404).send())
  })
  t.same(await statuses(app, 3, { url: '/costly' }), [200, 200, 429], 'cost 4 of 10')
  const priced = async (cost: string, url = '/priced'): Promise<[number, string | undefined]> => {
    const response = await app.inject({ url, headers: { 'x-cost': cost } })
    return [response.statusCode, response.statusCode === 500 ? response.json<{ message: string }>().message : response.headers.ratelimit as string]
  }
  t.same(await priced('2'), [200, '"edge";r=996;t=1, "by-header";r=8;t=2'])
  t.same(await priced('later'), [200, '"edge";r=995;t=1, "by-header";r=5;t=5'], 'a promise is awaited')
  t.same(await priced('throw'), [500, "The rate-limit cost of route GET /priced is invalid: limiter `by-header`'s cost function threw"])
  t.same(await priced('reject'), [503, '"edge";r=993;t=1'], 'a cost lookup that failed: 503 TOLLGATE_LOOKUP_FAILED')
  t.same(await priced('-1'), [500, "The rate-limit cost of route GET /priced is invalid: limiter `by-header`'s cost function returned `-1` (number); expected a finite number ≥ 0"])
  t.same(await priced('11'), [500, "The rate-limit cost of route GET /priced is invalid: limiter `by-header`'s cost function returned 11, above its capacity 10: it could never pass"])
  t.same(await priced('x', '/nowhere'), [500, "The rate-limit cost of route GET (not found) is invalid: limiter `by-header`'s cost function returned `NaN` (number); expected a finite number ≥ 0"])
  t.same(await priced('5'), [200, '"edge";r=989;t=1, "by-header";r=0;t=10'], 'the mistakes took nothing')
})

t.test('headers in each style', async (t) => {
  const drive = async (headers: TollgateOptions['headers']): Promise<Array<Record<string, unknown>>> => {
    const { app } = await build(t, { edge: { capacity: 10, refillPerSecond: 1 }, headers }, (app) => {
      app.get('/', { onRequest: app.tollgate.limiter({ name: 'tight', capacity: 2, refillPerSecond: 0.5 }) }, ok)
    })
    const shown = []
    for (let i = 0; i < 3; i++) {
      const { headers: h, statusCode } = await app.inject('/')
      shown.push({ statusCode, policy: h['ratelimit-policy'], state: h.ratelimit, limit: h['x-ratelimit-limit'], remaining: h['x-ratelimit-remaining'], reset: h['x-ratelimit-reset'], retryAfter: h['retry-after'] })
    }
    return shown
  }
  const none = { policy: undefined, state: undefined, limit: undefined, remaining: undefined, reset: undefined }
  t.same(await drive('draft'), [
    { statusCode: 200, policy: '"edge";q=10;w=10, "tight";q=2;w=4', state: '"edge";r=9;t=1, "tight";r=1;t=2', limit: undefined, remaining: undefined, reset: undefined, retryAfter: undefined },
    { statusCode: 200, policy: '"edge";q=10;w=10, "tight";q=2;w=4', state: '"edge";r=8;t=2, "tight";r=0;t=4', limit: undefined, remaining: undefined, reset: undefined, retryAfter: undefined },
    { statusCode: 429, policy: '"edge";q=10;w=10, "tight";q=2;w=4', state: '"edge";r=7;t=3, "tight";r=0;t=4', limit: undefined, remaining: undefined, reset: undefined, retryAfter: '2' }
  ])
  t.same(await drive('legacy'), [
    { statusCode: 200, policy: undefined, state: undefined, limit: '2', remaining: '1', reset: '2', retryAfter: undefined },
    { statusCode: 200, policy: undefined, state: undefined, limit: '2', remaining: '0', reset: '4', retryAfter: undefined },
    { statusCode: 429, policy: undefined, state: undefined, limit: '2', remaining: '0', reset: '4', retryAfter: '2' }
  ], 'the bucket with the fewest tokens: the limiter')
  t.same(await drive(false), [
    { statusCode: 200, ...none, retryAfter: undefined },
    { statusCode: 200, ...none, retryAfter: undefined },
    { statusCode: 429, ...none, retryAfter: '2' }
  ], 'none, but Retry-After on a refusal')
})

t.test("the plugin's allow-list exempts (no bucket, no header) unless the limiter says allowList: false", async (t) => {
  const { app } = await build(t, { edge: GENEROUS, allowList: ['10.0.0.0/8'] }, (app) => {
    app.get('/listed', { onRequest: app.tollgate.limiter({ name: 'listed', capacity: 1, refillPerSecond: 0 }) }, ok)
    const strict = app.tollgate.limiter({ name: 'strict', capacity: 1, refillPerSecond: 0, allowList: false })
    app.get('/strict', { onRequest: strict }, ok)
    app.get('/check', async (request) => strict.check(request))
  })
  const internal = { remoteAddress: '10.1.2.3' }
  const listed = await app.inject({ url: '/listed', ...internal })
  t.equal(listed.headers.ratelimit, undefined, 'no header')
  t.same(await statuses(app, 3, { url: '/listed', ...internal }), [200, 200, 200], 'never limited')
  t.same(await statuses(app, 2, { url: '/listed' }), [200, 429], 'others are')
  const strict = await app.inject({ url: '/strict', ...internal })
  t.equal(strict.headers.ratelimit, '"strict";r=0', 'allowList: false counts the listed client (the edge does not)')
  t.equal((await app.inject({ url: '/strict', ...internal })).statusCode, 429)
  t.match((await app.inject({ url: '/check', ...internal })).json(), { allowed: false, allowListed: false })
})

t.test("penalty strikes: after 2 refusals in a minute, 403 for 2 minutes, kept per limiter", async (t) => {
  const messages = decisions(t)
  const { app, clock, refusals } = await build(t, { edge: GENEROUS }, (app) => {
    app.post('/login', { preHandler: app.tollgate.limiter({ name: 'login', capacity: 1, refillPerSecond: 1, penalty: { after: 2, withinSeconds: 60, seconds: 120, status: 403 } }) }, ok)
    app.post('/other', { preHandler: app.tollgate.limiter({ name: 'other', capacity: 5, refillPerSecond: 1 }) }, ok)
  })
  const login: InjectOptions = { method: 'POST', url: '/login' }
  t.same(await statuses(app, 3, login), [200, 429, 403], 'the second refusal starts the penalty')
  const shut = await app.inject(login)
  t.match(shut.json(), { code: 'TOLLGATE_PENALIZED', message: 'Refused for 120 seconds: too many requests after being limited' })
  t.equal(shut.headers['retry-after'], '120')
  t.match(refusals.map((refusal) => refusal.penalty), [undefined, { state: 'started', seconds: 120 }, { state: 'in force', seconds: 120 }])
  t.equal(messages.filter((m) => m.penalty?.state === 'started').length, 1, 'published as started')
  t.equal((await app.inject({ method: 'POST', url: '/other' })).statusCode, 200, "another limiter's bucket: no penalty there")
  clock.advance(60_000)
  t.equal((await app.inject(login)).statusCode, 403, 'still out a minute later, the bucket full again')
  clock.advance(60_000)
  t.equal((await app.inject(login)).statusCode, 200, 'back after two minutes')
})

t.test('onLimit and the decision channel see the limiter', async (t) => {
  const messages = decisions(t)
  const { app, refusals } = await build(t, { edge: GENEROUS }, (app) => {
    app.get('/items/:id', { onRequest: app.tollgate.limiter({ name: 'items', capacity: 5, refillPerSecond: 1 }) }, ok)
  })
  await statuses(app, 6, { url: '/items/7' })
  const limiter = messages.filter((m) => m.layer === 'limiter')
  t.same(limiter.map((m) => m.outcome), ['allowed', 'allowed', 'allowed', 'near-limit', 'near-limit', 'refused'])
  t.match(limiter[5], { route: 'GET /items/:id', shadow: false, tier: undefined, cost: 1, retryAfterMs: 1000, buckets: [{ name: 'items', key: '{ip:127.0.0.1}:limiter:items', tokens: 0 }] })
  t.equal(messages.filter((m) => m.layer === 'edge').length, 6, "the edge's own, apart")
  t.equal(refusals.length, 1)
  t.match(refusals[0], { layer: 'limiter', allowed: false, retryAfterMs: 1000, buckets: [{ name: 'items', capacity: 5, refillPerSecond: 1 }] })
})

t.test('shadow mode: a refusal passes, with its headers, onLimit, event and report', async (t) => {
  const messages = decisions(t)
  const { app, refusals } = await build(t, { edge: GENEROUS, shadow: true }, (app) => {
    app.get('/', { onRequest: app.tollgate.limiter({ name: 'shadowed', capacity: 2, refillPerSecond: 1 }) }, ok)
  })
  t.same(await statuses(app, 4), [200, 200, 200, 200])
  t.equal((await app.inject('/')).headers.ratelimit, '"edge";r=995;t=1, "shadowed";r=0;t=2')
  t.equal(refusals.length, 3)
  t.same(messages.filter((m) => m.layer === 'limiter').map((m) => m.outcome).slice(2), ['would-refuse', 'would-refuse', 'would-refuse'])
  t.match(app.tollgate.shadowReport(), { shadow: true, wouldRefuse: 3, clients: [{ client: '{ip:127.0.0.1}', layer: 'limiter', wouldRefuse: 3, limits: { shadowed: 3 } }], tiers: [{ layer: 'limiter', wouldRefuse: 3 }] })
})

t.test('check(): counts, resolves to the decision, sets no header, never throws for a refusal', async (t) => {
  const messages = decisions(t)
  const { app, refusals } = await build(t, { edge: GENEROUS, allowList: (request) => request.headers['x-internal'] === 'yes' }, (app) => {
    const graphql = app.tollgate.limiter({ name: 'graphql', capacity: 3, refillPerSecond: 0.5, cost: async () => 2, penalty: { after: 1, withinSeconds: 60, seconds: 30 } })
    app.post('/graphql', { config: { rateLimit: false } }, async (request) => graphql.check(request))
    const broken = app.tollgate.limiter({ name: 'broken', capacity: 3, refillPerSecond: 1, cost: () => -1 })
    app.get('/broken', async (request) => broken.check(request).catch((error: unknown) => ({ rejected: error instanceof InvalidCostError })))
  })
  const ask = async (headers: Record<string, string> = {}): Promise<{ body: unknown, ratelimit: unknown }> => {
    const response = await app.inject({ method: 'POST', url: '/graphql', headers })
    return { body: response.json(), ratelimit: response.headers.ratelimit }
  }
  t.same(await ask(), {
    body: { layer: 'limiter', allowed: true, cost: 2, retryAfterMs: 0, buckets: [{ name: 'graphql', key: '{ip:127.0.0.1}:limiter:graphql', capacity: 3, refillPerSecond: 0.5, tokens: 1 }], allowListed: false },
    ratelimit: undefined
  }, 'allowed, with the tokens left; no header')
  t.same(await ask(), {
    body: { layer: 'limiter', allowed: false, cost: 2, retryAfterMs: 30_000, penalty: { state: 'started', seconds: 30 }, buckets: [{ name: 'graphql', key: '{ip:127.0.0.1}:limiter:graphql', capacity: 3, refillPerSecond: 0.5, tokens: 1 }], allowListed: false },
    ratelimit: undefined
  }, 'refused, reported; the refusal started the penalty')
  t.same(await ask({ 'x-internal': 'yes' }), { body: { layer: 'limiter', allowed: true, allowListed: true, cost: 0, retryAfterMs: 0, buckets: [] }, ratelimit: undefined }, 'allow-listed: nothing counted')
  t.same(refusals, [], 'onLimit is not called')
  t.same(messages.filter((m) => m.layer === 'limiter'), [], 'nothing is published')
  t.same((await app.inject('/broken')).json(), { rejected: true }, "a cost function's mistake rejects")
})

t.test('quota share: the policy is this replica\'s share; a cost within the whole overdraws it', async (t) => {
  const { app } = await build(t, { edge: GENEROUS }, (app) => {
    app.post('/bulk', { preHandler: app.tollgate.limiter({ name: 'bulk', capacity: 10, refillPerSecond: 1, cost: 8 }) }, ok)
  })
  void app
  const clock = manualClock()
  const shared = Fastify()
  t.teardown(() => shared.close())
  await shared.register(tollgate, { store: memoryStore({ clock: clock.now, replicas: 2 }), edge: GENEROUS })
  shared.post('/bulk', { preHandler: shared.tollgate.limiter({ name: 'bulk', capacity: 10, refillPerSecond: 1, cost: 8 }) }, ok)
  const first = await shared.inject({ method: 'POST', url: '/bulk' })
  t.equal(first.statusCode, 200, 'a cost of 8 passes a share of 5, overdrawn')
  t.match(first.headers['ratelimit-policy'], /"bulk";q=5;w=10$/)
  t.equal((await shared.inject({ method: 'POST', url: '/bulk' })).statusCode, 429)
})

t.test('a store that cannot decide (and keeps no clock): 503 from the hook, a rejection from check()', async (t) => {
  const { lines, logger } = logSink()
  const down: Store = { consume: () => { throw new Error('the store is down') }, close () {} }
  const app = Fastify({ logger })
  t.teardown(() => app.close())
  await app.register(tollgate, { store: down, app: { tiers: { default: GENEROUS } } })
  const limiter = app.tollgate.limiter({ name: 'down', capacity: 5, refillPerSecond: 1, key: () => { throw new Error('no key') } })
  app.get('/hook', { config: { rateLimit: false }, onRequest: limiter }, ok)
  app.get('/check', { config: { rateLimit: false } }, async (request) => limiter.check(request).then(() => 'decided', (error: Error) => error.message))
  t.equal((await app.inject('/hook')).statusCode, 503)
  t.equal((await app.inject('/check')).body, 'the store is down')
  t.equal(lines.filter((line) => line.msg === 'fastify-tollgate: limiter.key threw; keyed by client IP').length, 2, "the key function's throws, logged")
})

t.test('manual calls take a numeric key: the key of its string', async (t) => {
  const { app } = await build(t, { edge: GENEROUS }, () => {})
  const policy = { capacity: 3, refillPerSecond: 1 }
  t.match(await app.tollgate.consume(42, policy, 2), { allowed: true, buckets: [{ key: '{manual:42}:manual', tokens: 1 }] })
  t.match(await app.tollgate.peek('42', policy), { buckets: [{ key: '{manual:42}:manual', tokens: 1 }] }, "the bucket of '42'")
  t.match(await app.tollgate.refund(42, policy), { key: '{manual:42}:manual', tokens: 2 })
  t.match(await app.tollgate.consume(-1.5, policy), { buckets: [{ key: '{manual:-1.5}:manual' }] })
  await app.tollgate.reset(42)
  t.match(await app.tollgate.peek(42, policy), { buckets: [{ tokens: 3 }] }, 'reset')
  await t.rejects(app.tollgate.consume(Number.NaN, policy), { code: 'TOLLGATE_INVALID_OPTION' })
  await t.rejects(app.tollgate.reset(Infinity), { code: 'TOLLGATE_INVALID_OPTION' })
})

t.test('Redis: two routes share one bucket, on two replicas', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const replica = async (): Promise<FastifyInstance> => {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(tollgate, { store: redisStore({ client: server.client(t), heartbeatIntervalMs: 0 }), edge: GENEROUS })
    const otp = app.tollgate.limiter({ name: 'otp', capacity: 3, refillPerSecond: 3 / 60 })
    app.get('/otp/send', { onRequest: otp }, ok)
    app.get('/otp/resend', { onRequest: otp }, ok)
    await app.ready()
    return app
  }
  const [a, b] = [await replica(), await replica()]
  const codes: number[] = []
  for (const [app, url] of [[a, '/otp/send'], [b, '/otp/resend'], [a, '/otp/resend'], [b, '/otp/send']] as const) codes.push((await app.inject(url)).statusCode)
  t.same(codes, [200, 200, 200, 429], 'three in all, whichever route and replica')
  t.same((await server.client(t).keys('*limiter*')).sort(), ['tollgate:{ip:127.0.0.1}:limiter:otp'], 'one bucket in Redis')
  t.equal(count(await statuses(a, 2, { url: '/otp/send', remoteAddress: '203.0.113.5' }), 200), 2, 'another client: its own')
})

t.test('options are checked when the limiter is made: coded errors, nothing made', async (t) => {
  const { app } = await build(t, { edge: GENEROUS }, () => {})
  t.throws(() => app.tollgate.limiter({ name: 'x', capacity: 0, refillPerSecond: 1 }), { code: 'TOLLGATE_INVALID_OPTION' })
  app.tollgate.limiter({ name: 'once', capacity: 1, refillPerSecond: 1 })
  t.throws(() => app.tollgate.limiter({ name: 'once', capacity: 5, refillPerSecond: 1 }), { code: 'TOLLGATE_INVALID_OPTION' }, 'a name twice')
  t.doesNotThrow(() => app.tollgate.limiter({ name: 'x', capacity: 1, refillPerSecond: 1 }), 'a name that failed was not taken')
  const other = await build(t, { edge: GENEROUS }, () => {})
  t.doesNotThrow(() => other.app.tollgate.limiter({ name: 'once', capacity: 1, refillPerSecond: 1 }), "another registration's names are its own")
})

t.test("without a key of its own, a limiter keeps the client as the edge knows it: edge.key's value, else the address", async (t) => {
  const { app } = await build(t, { edge: { ...GENEROUS, key: (request) => request.headers['x-api-key'] } }, (app) => {
    app.get('/', { onRequest: app.tollgate.limiter({ name: 'lim', capacity: 1, refillPerSecond: 0 }) }, ok)
  })
  const send = async (key?: string): Promise<number> => (await app.inject({ url: '/', headers: key === undefined ? {} : { 'x-api-key': key } })).statusCode
  t.same([await send('a'), await send('a'), await send('b'), await send(), await send()], [200, 429, 200, 200, 429])
})
