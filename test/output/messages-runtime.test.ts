/**
 * Golden messages, at run time: every error of `fastify.tollgate` calls, of a
 * route's or a limiter's cost function, and of a refusal (429, 403, 503), with its code and its
 * message byte for byte as today; and the reasons an identity's quota is refused
 * for. Imports only the public entry, so the test survives lib/ being moved around.
 */
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import tollgate, { memoryStore, redisStore, type LayerBucket, type Store, type TollgateOptions } from '../../lib/index.js'
import { failure, logSink, manualClock } from '../helpers.js'

const P = { capacity: 5, refillPerSecond: 1 }
const tiers = { default: { capacity: 20, refillPerSecond: 5 }, pro: [{ name: 'second', capacity: 10, refillPerSecond: 10 }, { name: 'day', capacity: 1000, refillPerSecond: 0.1 }] }
const ok = async (): Promise<string> => 'ok'
/** A store with `consume` and `close` only. */
const bare = (): Store => ({ consume: () => ({ allowed: true, tokens: [1, 1], retryAfterMs: 0 }), close () {} })

async function appWith (options: TollgateOptions, routes: (app: FastifyInstance) => void = () => {}): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ clock: manualClock(1_000_000).now }), ...options })
  routes(app)
  await app.ready()
  return app
}

const O = 'TOLLGATE_INVALID_OPTION'
const U = 'TOLLGATE_STORE_UNSUPPORTED'

t.test('every error of a fastify.tollgate call, byte-identical to today', async (t) => {
  const both = await appWith({ edge: P, app: { tiers } }, (app) => { app.post('/export', { config: { rateLimit: { quota: { default: P } } } }, ok) })
  const edgeOnly = await appWith({ edge: P })
  const appOnly = await appWith({ app: { tiers: { default: P } } })
  const routesOnly = await appWith({ edge: { global: false }, app: { tiers: { default: P } } })
  const shared = await appWith({ edge: P, store: memoryStore({ replicas: 4 }) })
  const custom = await appWith({ edge: P, store: bare() })
  t.teardown(async () => { for (const app of [both, edgeOnly, appOnly, routesOnly, shared, custom]) await app.close() })
  const bucket = (value: unknown): LayerBucket => value as LayerBucket
  const rows: Array<[label: string, run: () => unknown, code: string, message: string]> = [
    ['key a boolean', () => both.tollgate.consume(bucket(true)), O, "Invalid fastify-tollgate option: Expected `key` to be a non-empty string, a finite number or a layer's bucket ({ layer: 'edge', ip } or { layer: 'app', user }), got `true` (boolean)"],
    ['key NaN', () => both.tollgate.consume(Number.NaN, P), O, "Invalid fastify-tollgate option: Expected `key` to be a non-empty string, a finite number or a layer's bucket ({ layer: 'edge', ip } or { layer: 'app', user }), got `NaN` (number)"],
    ['key a number, no policy', () => both.tollgate.consume(bucket(42)), O, 'Invalid fastify-tollgate option: Expected `policy` to be an object, got `undefined` (undefined)'],
    ['key empty', () => both.tollgate.consume('', P), O, 'Invalid fastify-tollgate option: Expected `key` to be a non-empty string, a finite number or a layer\'s bucket ({ layer: \'edge\', ip } or { layer: \'app\', user }), got `""` (string)'],
    ['bucket an array', () => both.tollgate.consume(bucket([])), O, 'Invalid fastify-tollgate option: Expected `bucket` to be an object, got `[]` (array)'],
    ['bucket.layer', () => both.tollgate.consume(bucket({ layer: 'db' })), O, 'Invalid fastify-tollgate option: Expected `bucket.layer` to be \'edge\' or \'app\', got `"db"` (string)'],
    ['edge disabled', () => appOnly.tollgate.consume({ layer: 'edge', ip: '192.0.2.1' }), O, 'Invalid fastify-tollgate option: `bucket.layer` is `"edge"`, but the edge layer is disabled (set the `edge` option)'],
    ['edge global false', () => routesOnly.tollgate.consume({ layer: 'edge', ip: '192.0.2.1' }), O, 'Invalid fastify-tollgate option: `bucket.layer` is `"edge"`, but under `edge.global: false` clients have no edge bucket of their own (only routes do)'],
    ['unknown edge bucket option', () => both.tollgate.consume(bucket({ layer: 'edge', ip: '192.0.2.1', user: 'u' })), O, 'Invalid fastify-tollgate option: Unknown option `bucket.user`; known options are `layer`, `ip`, `key`, `request`'],
    ['edge client named twice', () => both.tollgate.consume(bucket({ layer: 'edge', ip: '192.0.2.1', key: 'k' })), O, 'Invalid fastify-tollgate option: Expected `bucket` to name the edge\'s client by one of `ip`, `key` or `request`, got `{"layer":"edge","ip":"192.0.2.1","key":"[hidden]"}` (object)'],
    ['bucket.ip empty', () => both.tollgate.consume({ layer: 'edge', ip: '' }), O, 'Invalid fastify-tollgate option: Expected `bucket.ip` to be a non-empty string, got `""` (string)'],
    ['bucket.key empty', () => both.tollgate.consume({ layer: 'edge', key: '' }), O, 'Invalid fastify-tollgate option: Expected `bucket.key` to be a non-empty string or a finite number, got `""` (string)'],
    ['bucket.request', () => both.tollgate.consume(bucket({ layer: 'edge', request: 'x' })), O, 'Invalid fastify-tollgate option: Expected `bucket.request` to be a Fastify request, got `"x"` (string)'],
    ['app disabled', () => edgeOnly.tollgate.consume({ layer: 'app', user: 'u' }), O, 'Invalid fastify-tollgate option: `bucket.layer` is `"app"`, but the app layer is disabled (set the `app` option)'],
    ['app requester named twice', () => both.tollgate.consume(bucket({ layer: 'app', user: 'u', ip: '192.0.2.1' })), O, 'Invalid fastify-tollgate option: Expected `bucket` to name the app layer\'s requester by one of `user` or `ip`, got `{"layer":"app","user":"u","ip":"192.0.2.1"}` (object)'],
    ['unknown app bucket option, user', () => both.tollgate.consume(bucket({ layer: 'app', user: 'u', key: 'k' })), O, 'Invalid fastify-tollgate option: Unknown option `bucket.key`; known options are `layer`, `user`, `tier`, `route`'],
    ['unknown app bucket option, ip', () => both.tollgate.consume(bucket({ layer: 'app', ip: '192.0.2.1', tier: 'pro' })), O, 'Invalid fastify-tollgate option: Unknown option `bucket.tier`; known options are `layer`, `ip`, `route`'],
    ['bucket.user empty', () => both.tollgate.consume({ layer: 'app', user: '' }), O, 'Invalid fastify-tollgate option: Expected `bucket.user` to be a non-empty string or a finite number, got `""` (string)'],
    ['bucket.tier', () => both.tollgate.consume(bucket({ layer: 'app', user: 'u', tier: 5 })), O, 'Invalid fastify-tollgate option: Expected `bucket.tier` to be a string, got `5` (number)'],
    ['bucket.route empty', () => both.tollgate.consume({ layer: 'app', user: 'u', route: '' }), O, 'Invalid fastify-tollgate option: Expected `bucket.route` to be a non-empty string, got `""` (string)'],
    ['bucket.route unknown, none', () => appOnly.tollgate.consume({ layer: 'app', user: 'u', route: 'POST /export' }), O, 'Invalid fastify-tollgate option: Expected `bucket.route` to be a route with a `rateLimit.quota`, declared after the plugin (there is none), got `"POST /export"` (string)'],
    ['bucket.route unknown', () => both.tollgate.consume({ layer: 'app', user: 'u', route: 'POST /import' }), O, 'Invalid fastify-tollgate option: Expected `bucket.route` to be a route with a `rateLimit.quota`, declared after the plugin (`POST /export`), got `"POST /import"` (string)'],
    ['policy', () => both.tollgate.consume('k', { capacity: 0, refillPerSecond: 1 }), O, 'Invalid fastify-tollgate option: Expected `policy.capacity` to be a finite number ≥ 1, got `0` (number)'],
    ['policy share below one token', () => shared.tollgate.consume('k', { capacity: 2, refillPerSecond: 1 }), O, "Invalid fastify-tollgate option: Expected `policy.capacity` × the store's quota share (0.25) to be ≥ 1, got 0.5 from `2`"],
    ['cost', () => both.tollgate.consume('k', P, -1), O, 'Invalid fastify-tollgate option: Expected `cost` to be a finite number ≥ 0, got `-1` (number)'],
    ['peek cost', () => both.tollgate.peek('k', P, Number.NaN), O, 'Invalid fastify-tollgate option: Expected `cost` to be a finite number ≥ 0, got `NaN` (number)'],
    ['refund tokens', () => both.tollgate.refund('k', P, -1), O, 'Invalid fastify-tollgate option: Expected `tokens` to be a finite number ≥ 0, got `-1` (number)'],
    ['refund without a tier', () => both.tollgate.refund({ layer: 'app', user: 'u' }), O, "Invalid fastify-tollgate option: Expected `bucket.tier` in a refund: the app layer has several tiers (default, pro), and a user's bucket is refunded under its own tier's capacity"],
    ['reset key', () => both.tollgate.reset(bucket(null)), O, "Invalid fastify-tollgate option: Expected `key` to be a non-empty string, a finite number or a layer's bucket ({ layer: 'edge', ip } or { layer: 'app', user }), got `null` (null)"],
    ['peek unsupported', () => custom.tollgate.peek('k', P), U, 'The rate-limit store does not implement peek() (memoryStore() and redisStore() do)'],
    ['refund unsupported', () => custom.tollgate.refund('k', P), U, 'The rate-limit store does not implement refund() (memoryStore() and redisStore() do)'],
    ['reset unsupported', () => custom.tollgate.reset('k'), U, 'The rate-limit store does not implement reset() (memoryStore() and redisStore() do)'],
    ['shadowReport not an object', () => both.tollgate.shadowReport('x' as never), O, 'Invalid fastify-tollgate option: Expected `shadowReport` to be an object, got `"x"` (string)'],
    ['unknown shadowReport option', () => both.tollgate.shadowReport({ minutes: 1 } as never), O, 'Invalid fastify-tollgate option: Unknown option `shadowReport.minutes`; known options are `top`'],
    ['shadowReport top', () => both.tollgate.shadowReport({ top: 0 }), O, 'Invalid fastify-tollgate option: Expected `top` to be an integer ≥ 1, got `0` (number)']
  ]
  t.equal(new Set(rows.map(([label]) => label)).size, rows.length, 'labels are unique')
  for (const [label, run, code, message] of rows) t.same(await failure(run), { code, message }, label)
})

/** The status, code and message of the reply to the last of `count` requests. */
async function reply (app: FastifyInstance, count: number, url = '/r', headers: Record<string, string> = {}): Promise<[number, unknown, unknown]> {
  let response = await app.inject({ method: 'POST', url, headers })
  for (let i = 1; i < count; i++) response = await app.inject({ method: 'POST', url, headers })
  const body = response.json<{ code: unknown, message: unknown }>()
  return [response.statusCode, body.code, body.message]
}

t.test('every error a request gets (cost functions, 429, 403, 503), byte-identical to today', async (t) => {
  const costOf = async (cost: (request: FastifyRequest) => number | Promise<number>): Promise<FastifyInstance> => appWith({ app: { tiers } }, (app) => {
    app.post('/r', { config: { rateLimit: { cost } } }, ok)
  })
  const edgeOf = async (options: TollgateOptions['edge']): Promise<FastifyInstance> => appWith({ edge: options }, (app) => { app.post('/r', ok) })
  const quotas = await appWith({ app: { tiers, maxQuota: { capacity: 100, refillPerSecond: 10 }, identify: () => ({ id: 'q', quota: { capacity: 2, refillPerSecond: 1 } }) } }, (app) => {
    app.post('/r', { config: { rateLimit: { cost: 5 } } }, ok)
  })
  const limiterCost = async (cost: (request: FastifyRequest) => number | Promise<number>): Promise<FastifyInstance> => appWith({ edge: P }, (app) => {
    app.post('/r', { preHandler: app.tollgate.limiter({ name: 'priced', capacity: 10, refillPerSecond: 1, cost }) }, ok)
  })
  const down = { ...bare(), consume: () => { throw new Error('the store is down') } }
  /** A Redis client whose every command fails: the store decides by failMode. */
  const failing = { defineCommand (this: Record<string, unknown>, name: string) { this[name] = async () => { throw new Error('Connection is closed.') } } }
  const apps: Array<[label: string, app: FastifyInstance, count: number, expected: [number, string, string]]> = [
    ['cost function throws', await costOf(() => { throw new Error('boom') }), 1, [500, 'TOLLGATE_INVALID_COST', 'The rate-limit cost of route POST /r is invalid: the cost function threw']],
    ['cost function rejects', await costOf(async () => { throw new Error('pricing service down') }), 1, [503, 'TOLLGATE_LOOKUP_FAILED', 'A rate-limit lookup (rateLimit.cost) failed or did not answer in time, retry later']],
    ['cost function returns a string', await costOf(() => 'two' as unknown as number), 1, [500, 'TOLLGATE_INVALID_COST', 'The rate-limit cost of route POST /r is invalid: the cost function returned `"two"` (string); expected a finite number ≥ 0']],
    ['cost function above the capacity', await costOf(() => 25), 1, [500, 'TOLLGATE_INVALID_COST', 'The rate-limit cost of route POST /r is invalid: the cost function returned 25, above the capacity 20 of tier `default`: it could never pass']],
    ["a limiter's cost function throws", await limiterCost(() => { throw new Error('boom') }), 1, [500, 'TOLLGATE_INVALID_COST', "The rate-limit cost of route POST /r is invalid: limiter `priced`'s cost function threw"]],
    ["a limiter's cost function rejects", await limiterCost(async () => { throw new Error('boom') }), 1, [503, 'TOLLGATE_LOOKUP_FAILED', 'A rate-limit lookup (limiter.cost) failed or did not answer in time, retry later']],
    ["a limiter's cost function returns a string", await limiterCost(() => 'two' as unknown as number), 1, [500, 'TOLLGATE_INVALID_COST', "The rate-limit cost of route POST /r is invalid: limiter `priced`'s cost function returned `\"two\"` (string); expected a finite number ≥ 0"]],
    ["a limiter's cost function above the capacity", await limiterCost(async () => 25), 1, [500, 'TOLLGATE_INVALID_COST', "The rate-limit cost of route POST /r is invalid: limiter `priced`'s cost function returned 25, above its capacity 10: it could never pass"]],
    ['429, retry in seconds', await edgeOf({ capacity: 1, refillPerSecond: 0.4 }), 2, [429, 'TOLLGATE_RATE_LIMITED', 'Rate limit exceeded, retry in 3 seconds']],
    ['429, retry in 1 second', await edgeOf({ capacity: 1, refillPerSecond: 1 }), 2, [429, 'TOLLGATE_RATE_LIMITED', 'Rate limit exceeded, retry in 1 second']],
    ['429, no refill', await edgeOf({ capacity: 1, refillPerSecond: 0 }), 2, [429, 'TOLLGATE_RATE_LIMITED', 'Rate limit exceeded: this quota does not refill']],
    ["429, a cost above an identity's quota", quotas, 1, [429, 'TOLLGATE_RATE_LIMITED', 'Rate limit exceeded: this request costs more than the quota holds']],
    ['403, penalized for seconds', await edgeOf({ capacity: 1, refillPerSecond: 1, penalty: { after: 1, withinSeconds: 60, seconds: 120, status: 403 } }), 2, [403, 'TOLLGATE_PENALIZED', 'Refused for 120 seconds: too many requests after being limited']],
    ['403, penalized, no refill', await edgeOf({ capacity: 1, refillPerSecond: 0, penalty: { after: 1, withinSeconds: 60, seconds: 120, status: 403 } }), 2, [403, 'TOLLGATE_PENALIZED', 'Refused: too many requests after being limited']],
    ['503, the store threw', await appWith({ edge: P, store: down }, (app) => { app.post('/r', ok) }), 1, [503, 'TOLLGATE_STORE_UNAVAILABLE', 'The rate-limit store is unavailable, retry later']],
    ['503, Redis failMode closed', await appWith({ edge: P, store: redisStore({ client: failing, failMode: 'closed', heartbeatIntervalMs: 0 }) }, (app) => { app.post('/r', ok) }), 1, [503, 'TOLLGATE_STORE_UNAVAILABLE', 'The rate-limit store is unavailable, retry later']]
  ]
  t.teardown(async () => { for (const [, app] of apps) await app.close() })
  for (const [label, app, count, expected] of apps) t.same(await reply(app, count), expected, label)

  // Redis writes that fail: a refund or reset rejects, then (the breaker open) is refused; so is a settlement.
  const redis = redisStore({ client: failing, heartbeatIntervalMs: 0, breakerThreshold: 1, probeIntervalMs: 60_000 })
  t.same(await failure(() => redis.refund({ key: '{k}:a', policy: P, cost: 1 })), { code: 'TOLLGATE_STORE_UNAVAILABLE', message: 'The rate-limit store is unavailable, retry later' }, 'Redis refund fails')
  t.same(await failure(() => redis.reset('{k}:a')), { code: 'TOLLGATE_STORE_UNAVAILABLE', message: 'The rate-limit store is unavailable, retry later' }, 'Redis reset, breaker open')
  t.same(await failure(() => redis.settle([{ key: '{k}:a', policy: P, spent: 1, reserve: 1 }])), { code: 'TOLLGATE_STORE_UNAVAILABLE', message: 'The rate-limit store is unavailable, retry later' }, 'Redis settle, breaker open')
  await redis.close()
})

const QUOTA_REFUSED = "fastify-tollgate: an identity's quota was refused; its tier applies (default without one; logged once a minute; `since`: refusals not logged since the last line)"

t.test("why an identity's quota is refused (logged), byte-identical to today", async (t) => {
  const cases: Array<[label: string, quota: unknown, reason: string]> = [
    ['capacity above maxQuota', { capacity: 200, refillPerSecond: 1 }, '`quota.capacity` 200 is above `app.maxQuota.capacity` 100'],
    ['refill above maxQuota', { capacity: 10, refillPerSecond: 20 }, '`quota.refillPerSecond` 20 is above `app.maxQuota.refillPerSecond` 10'],
    ['a limit of a list above maxQuota', [{ name: 'a', capacity: 10, refillPerSecond: 1 }, { name: 'b', capacity: 500, refillPerSecond: 1 }], '`quota[1].capacity` 500 is above `app.maxQuota.capacity` 100'],
    ['a malformed quota', { capacity: -1, refillPerSecond: 1 }, 'Expected `quota.capacity` to be a finite number ≥ 1, got `-1` (number)'],
    ['a quota that throws', new Proxy({}, { ownKeys () { throw new Error('hostile') } }), 'reading it threw']
  ]
  for (const [label, quota, reason] of cases) {
    const { lines, logger } = logSink()
    const app = Fastify({ logger })
    await app.register(tollgate, { app: { tiers, maxQuota: { capacity: 100, refillPerSecond: 10 }, identify: () => ({ id: 'u', quota: quota as undefined }) } })
    app.get('/', ok)
    await app.inject('/')
    const line = lines.find((l) => l.reason !== undefined)
    t.same([line?.msg, line?.user, line?.reason], [QUOTA_REFUSED, 'u', reason], label)
    await app.close()
  }
})
