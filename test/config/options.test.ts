import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { routeBucket } from '../../lib/output/route-names.js'
import tollgate, { memoryStore } from '../../lib/index.js'
import { describe } from '../../lib/config/check.js'
import { readyWith } from '../helpers.js'

const policy = { capacity: 20, refillPerSecond: 5 }
const tiers = { default: policy, vip: { capacity: 200, refillPerSecond: 50 } }

t.test('invalid plugin options make ready() reject with TOLLGATE_INVALID_OPTION, naming option, value and expectation', async (t) => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['no layer at all', {}, /at least one layer: `edge` or `app`/],
    ['both layers false', { edge: false, app: false }, /at least one layer/],
    ['negative capacity', { edge: { capacity: -1, refillPerSecond: 1 } }, /Expected `edge\.capacity` to be a finite number ≥ 1, got `-1` \(number\)/],
    ['capacity below 1', { edge: { capacity: 0.5, refillPerSecond: 1 } }, /`edge\.capacity` to be a finite number ≥ 1, got `0\.5`/],
    ['NaN rate', { edge: { capacity: 1, refillPerSecond: Number.NaN } }, /`edge\.refillPerSecond` to be a finite number ≥ 0, got `NaN` \(number\)/],
    ['infinite capacity', { edge: { capacity: Infinity, refillPerSecond: 1 } }, /`edge\.capacity`.*`Infinity`/],
    ['negative rate', { edge: { capacity: 1, refillPerSecond: -5 } }, /`edge\.refillPerSecond`.*`-5`/],
    ['string capacity', { edge: { capacity: '10', refillPerSecond: 1 } }, /`edge\.capacity`.*`"10"` \(string\)/],
    ['missing capacity', { edge: { refillPerSecond: 1 } }, /`edge\.capacity`.*`undefined`/],
    ['edge not an object', { edge: true }, /Expected `edge` to be an object, got `true` \(boolean\)/],
    ['unknown top-level key', { edge: policy, trustProxy: true }, /Unknown option `options\.trustProxy`/],
    ['misspelt edge key', { edge: { ...policy, refilPerSecond: 1 } }, /Unknown option `edge\.refilPerSecond`/],
    ['edge.key not a function', { edge: { ...policy, key: 'x-api-key' } }, /Expected `edge\.key` to be a function, got `"x-api-key"`/],
    ['keySecret too short', { edge: { ...policy, keySecret: 'hunter2' } }, /Expected `edge\.keySecret` to be a string of at least 16 characters, got 7 characters \(not shown: it is a secret\)$/],
    ['keySecret not a string', { edge: { ...policy, keySecret: 1234567890123456 } }, /`edge\.keySecret` to be a string of at least 16 characters, got a value of type number \(not shown/],
    ['ipv6Subnet out of range', { edge: { ...policy, ipv6Subnet: 129 } }, /`edge\.ipv6Subnet` to be an integer from 1 to 128, got `129`/],
    ['ipv6Subnet zero', { edge: { ...policy, ipv6Subnet: 0 } }, /`edge\.ipv6Subnet` to be an integer ≥ 1/],
    ['missing default tier', { app: { tiers: { vip: policy } } }, /Expected `app\.tiers` to contain a `default` tier, got tiers `\["vip"\]`/],
    ['tiers missing', { app: {} }, /Expected `app\.tiers` to be an object, got `undefined`/],
    ['invalid tier policy', { app: { tiers: { default: policy, vip: { capacity: 0, refillPerSecond: 1 } } } }, /`app\.tiers\.vip\.capacity`.*`0`/],
    ['unknown app key', { app: { tiers, cost: 2 } }, /Unknown option `app\.cost`/],
    ['bad hook', { app: { tiers, hook: 'onSend' } }, /Expected `app\.hook` to be 'preHandler', or 'preValidation', or 'preParsing', got `"onSend"`/],
    ['identify not a function', { app: { tiers, identify: 'sub' } }, /`app\.identify` to be a function/],
    ['bad headers', { edge: policy, headers: 'ietf' }, /Expected `headers` to be 'draft', 'draft-03', 'legacy' or false, got `"ietf"`/],
    ['bad shadow', { edge: policy, shadow: 'yes' }, /Expected `shadow` to be a boolean/],
    ['bad onLimit', { edge: policy, onLimit: 1 }, /`onLimit` to be a function/],
    ['bad store', { edge: policy, store: {} }, /Expected `store` to be a store with consume\(\) and close\(\)/],
    ['null store', { edge: policy, store: null }, /Expected `store` to be a store.*`null` \(null\)/],
    ['bad store quotaShare', { edge: policy, store: { consume () {}, close () {}, quotaShare: 2 } }, /`store\.quotaShare` to be a number in \(0, 1\], got `2`/],
    ['options not an object', 'fast', /Expected `options` to be an object/]
  ]
  for (const [name, options, message] of cases) {
    await t.rejects(readyWith(options), { code: 'TOLLGATE_INVALID_OPTION', statusCode: 500, message }, name)
  }
})

t.test('invalid route configs make ready() reject with TOLLGATE_INVALID_ROUTE_CONFIG, naming the route', async (t) => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['cost above the default capacity', { cost: 21 }, /route POST \/r: Expected `rateLimit\.cost` to be at most the capacity of every tier, got `21` above tier `default`'s capacity 20: it could never pass/],
    ['negative cost', { cost: -1 }, /`rateLimit\.cost` to be a finite number ≥ 0, got `-1`/],
    ['NaN cost', { cost: Number.NaN }, /`rateLimit\.cost`.*`NaN`/],
    ['infinite cost', { cost: Infinity }, /`rateLimit\.cost`.*`Infinity`/],
    ['string cost', { cost: '10' }, /Expected `rateLimit\.cost` to be a finite number ≥ 0 or a function of the request, got `"10"` \(string\)/],
    ['unknown key', { cost: 1, limit: 5 }, /Unknown option `rateLimit\.limit`/],
    ['config not an object', 5, /Expected `rateLimit` to be an object, got `5` \(number\)/],
    ['quota without default', { quota: { vip: policy } }, /`rateLimit\.quota` to contain a `default` tier/],
    ['quota with a tier app.tiers lacks', { quota: { default: policy, vpi: policy } }, /`rateLimit\.quota` to name only tiers of `app\.tiers` \(default, vip\), got `"vpi"`/],
    ['quota with a bad policy', { quota: { default: { capacity: 1, refillPerSecond: -1 } } }, /`rateLimit\.quota\.default\.refillPerSecond`/]
  ]
  for (const [name, config, message] of cases) {
    await t.rejects(readyWith({ app: { tiers } }, (app) => {
      app.post('/r', { config: { rateLimit: config as never } }, async () => 'ok')
    }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message }, name)
  }
})

t.test('a route cost is checked against every tier, anonymous included', async (t) => {
  await t.rejects(readyWith({ app: { tiers: { ...tiers, anonymous: { capacity: 5, refillPerSecond: 1 } } } }, (app) => {
    app.post('/export', { config: { rateLimit: { cost: 10 } } }, async () => 'ok')
  }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /tier `anonymous`'s capacity 5/ })
})

t.test('route cost and quota need the app layer', async (t) => {
  await t.rejects(readyWith({ edge: policy }, (app) => {
    app.post('/export', { config: { rateLimit: { cost: 10 } } }, async () => 'ok')
  }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /need the app layer/ })
})

t.test('a route declared inside a plugin fails ready() the same way', async (t) => {
  await t.rejects(readyWith({ app: { tiers } }, (app) => {
    app.register(async (child: FastifyInstance) => { child.get('/x', { config: { rateLimit: { cost: -2 } } }, async () => 'ok') })
  }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /route GET \/x/ })
})

t.test('valid options and configs start', async (t) => {
  await t.resolves(readyWith({ edge: { ...policy, ipv6Subnet: 128 }, app: { tiers, hook: 'preValidation' }, headers: false, shadow: false }, (app) => {
    app.post('/export', { config: { rateLimit: { cost: 20, quota: { default: { capacity: 1, refillPerSecond: 0 } } } } }, async () => 'ok')
    app.get('/free', { config: { rateLimit: false } }, async () => 'ok')
    app.route({ method: ['GET', 'HEAD'], url: '/both', handler: async () => 'ok' })
  }))
  await t.resolves(readyWith({ edge: policy, app: false }, (app) => {
    app.get('/plain', { config: { rateLimit: {} } }, async () => 'ok')
  }))
  await t.resolves(readyWith({ edge: false, app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } } } }))
})

t.test('describe shows values as a reader would recognise them', async (t) => {
  const circular: Record<string, unknown> = {}
  circular.self = circular
  function namedFn () {}
  const cases: Array<[unknown, string]> = [
    [-1, '`-1` (number)'],
    ['vip', '`"vip"` (string)'],
    [null, '`null` (null)'],
    [undefined, '`undefined` (undefined)'],
    [[1, 2], '`[1,2]` (array)'],
    [{ a: 1 }, '`{"a":1}` (object)'],
    [circular, '`[object Object]` (object)'],
    [{ toJSON: () => undefined }, '`[object Object]` (object)'],
    [namedFn, '`function namedFn` (function)'],
    [Symbol.for('s'), '`Symbol(s)` (symbol)'],
    [10n, '`10` (bigint)'],
    ['x'.repeat(100), '`"' + 'x'.repeat(76) + '...` (string)']
  ]
  for (const [value, shown] of cases) t.equal(describe(value), shown)
  t.equal(describe(() => {}), '`function (anonymous)` (function)')
})

t.test('objects without a prototype are accepted as options; class instances are not', async (t) => {
  const edge = Object.assign(Object.create(null) as object, { capacity: 2, refillPerSecond: 1 })
  await t.resolves(readyWith({ edge }))
  class Policy { capacity = 2; refillPerSecond = 1 }
  await t.rejects(readyWith({ edge: new Policy() }), { message: /Expected `edge` to be an object/ })
})

t.test('describe() never prints the value of a property named like a secret, at any depth', async (t) => {
  const cases: Array<[unknown, string]> = [
    [{ keySecret: 'hmac-Secret-0123456789', capacity: 1 }, '`{"keySecret":"[hidden]","capacity":1}` (object)'],
    [{ apiKey: 'sk_live_1', api_key: 'sk_live_2', keyspace: 'kept' }, '`{"apiKey":"[hidden]","api_key":"[hidden]","keyspace":"kept"}` (object)'],
    [{ KEY: 'k', keys: ['a'] }, '`{"KEY":"[hidden]","keys":"[hidden]"}` (object)'],
    [{ redis: { password: 'pw', PASSWD: 'pw', pwd: 'pw' } }, '`{"redis":{"password":"[hidden]","PASSWD":"[hidden]","pwd":"[hidden]"}}` (object)'],
    [[{ accessToken: 't', authorization: 'Bearer t', Cookie: 'c' }], '`[{"accessToken":"[hidden]","authorization":"[hidden]","Cookie":"[hidden]"}]` (array)'],
    [{ sessionId: 's', credentials: { a: 1 } }, '`{"sessionId":"[hidden]","credentials":"[hidden]"}` (object)'],
    [{ capacity: 20, refillPerSecond: 5 }, '`{"capacity":20,"refillPerSecond":5}` (object)']
  ]
  for (const [value, shown] of cases) t.equal(describe(value), shown)
})

t.test('a startup error never shows edge.keySecret, even for an edge config printed whole', async (t) => {
  class EdgeConfig { keySecret = 'hmac-Secret-0123456789'; capacity = 100; refillPerSecond = 50 }
  const error = await readyWith({ edge: new EdgeConfig() }).then(() => undefined, (error: unknown) => error as Error)
  t.match(error, { code: 'TOLLGATE_INVALID_OPTION', message: /Expected `edge` to be an object, got `\{"keySecret":"\[hidden\]","capacity":100,"refillPerSecond":50\}` \(object\)/ })
  t.notMatch(error?.message, /hmac-Secret/)
})

t.test('counts named like keys (maxKeys) are no secrets: describe() shows them', async (t) => {
  t.equal(describe({ maxKeys: 5, minKeys: 1 }), '`{"maxKeys":5,"minKeys":1}` (object)')
  t.throws(() => memoryStore({ maxKeys: 'many' as unknown as number }), { message: /`memoryStore\.maxKeys` to be an integer ≥ 1, got `"many"` \(string\)/ })
})

t.test('routeBucket: one name per route, the same for every way Fastify serves it', async (t) => {
  const cases: Array<[Parameters<typeof routeBucket>[0], string]> = [
    [{ method: 'POST', url: '/export' }, 'route:POST /export'],
    [{ method: 'GET', url: '/report' }, 'route:GET /report'],
    [{ method: 'HEAD', url: '/report' }, 'route:GET /report'],
    [{ method: ['GET', 'POST'], url: '/report' }, 'route:GET /report'],
    [{ method: ['GET', 'HEAD'], url: '/report' }, 'route:GET /report'],
    [{ method: ['POST', 'PUT'], url: '/items' }, 'route:POST,PUT /items'],
    [{ method: 'GET', url: '/api/' }, 'route:GET /api'],
    [{ method: 'GET', url: '/' }, 'route:GET /'],
    [{ method: 'GET', url: '/r', constraints: { version: '2.0.0', host: /\.example\.com$/ } }, 'route:GET /r [host=/\\.example\\.com$/ version=2.0.0]'],
    [{ method: 'HEAD', url: '/r/', constraints: { version: '2.0.0' } }, 'route:GET /r [version=2.0.0]'],
    [{ method: 'GET', url: '/r', constraints: {} }, 'route:GET /r'],
    [{ method: 'GET', url: '/r', constraints: { version: undefined } }, 'route:GET /r']
  ]
  for (const [route, name] of cases) t.equal(routeBucket(route), name, name)
})

t.test('a store of your own spread from a memory store is not taken for the memory store', async (t) => {
  const inner = memoryStore()
  const wrapped = { ...inner, consume: (buckets: Parameters<typeof inner.consume>[0]) => inner.consume(buckets), close: () => { inner.close() } }
  const app = Fastify()
  await t.rejects(async () => app.register(tollgate, { store: wrapped, edge: { capacity: 2, refillPerSecond: 1, mode: 'replica-share' } }), {
    code: 'TOLLGATE_INVALID_OPTION',
    message: /Expected a store with `liveReplicas` \(as redisStore has\) for `edge.mode: 'replica-share'`/
  })
  await app.close()
})
