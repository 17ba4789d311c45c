/**
 * FRL's test/route-rate-limit.test.js, part 2: allow-lists. Here the allow-list
 * is the plugin's (no route has its own): an address list, a predicate of the
 * request, or both; a predicate can read the route (`request.routeOptions`).
 */
import t from 'tap'
import type { FastifyRequest } from 'fastify'
import { frlApp, trio } from './frl.js'

const routeConfig = { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 } }, someOtherPlugin: { someValue: 1 } }

/** A route's own allow-list, in a config key of the app's (not `rateLimit`, whose unknown keys fail startup). */
interface AllowConfig { allowIps?: string[], allowWhen?: (request: FastifyRequest) => boolean }
const allowConfig = (request: FastifyRequest): AllowConfig => request.routeOptions.config as AllowConfig

t.test('FRL: With ips allowList', async (t) => {
  // Same.
  const { app } = await frlApp({ edge: { global: false }, allowList: ['127.0.0.1'] })
  t.teardown(() => app.close())
  app.get('/', { config: routeConfig }, async () => 'hello!')
  for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject('/')), { status: 200 })
})

t.test('FRL: With function allowList', async (t) => {
  // Differs: the predicate gets the request only (FRL: `(req, key)`) and must return `true`.
  const calls: FastifyRequest[] = []
  const { app } = await frlApp({
    edge: { global: false, key: () => 42 },
    allowList: (request) => { calls.push(request); return request.headers['x-my-header'] !== undefined }
  })
  t.teardown(() => app.close())
  app.get('/', { config: routeConfig }, async () => 'hello!')
  const allowed = { method: 'GET' as const, url: '/', headers: { 'x-my-header': 'FOO BAR' } }
  for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject(allowed)), { status: 200 })
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 200, 429])
  t.equal(calls.length, 6)
})

t.test('FRL: should consider routes allow list', async (t) => {
  // Differs: no allow-list per route. The plugin's predicate reads the route's own list.
  const { app } = await frlApp({ edge: { global: false }, allowList: { match: (request) => allowConfig(request).allowIps?.includes(request.ip) === true } })
  t.teardown(() => app.close())
  const limited = { edge: { capacity: 2, refillPerSecond: 2 / 10 } }
  app.get('/', { config: { rateLimit: limited, allowIps: ['127.0.0.1'] } }, (_request, reply) => { reply.send('hello!') })
  app.get('/other', { config: { rateLimit: limited } }, async () => 'hello!')
  for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject('/')), { status: 200 })
  const codes = [(await app.inject('/other')).statusCode, (await app.inject('/other')).statusCode, (await app.inject('/other')).statusCode]
  t.strictSame(codes, [200, 200, 429], 'a route without the list is limited')
})

t.test("FRL: child's allowList should not crash the app", async (t) => {
  // Differs: one predicate for the plugin: the route's own list when it has one, else the
  // plugin's rule (FRL: `() => false`).
  const { app } = await frlApp({
    edge: { global: false },
    allowList: (request) => { const own = allowConfig(request).allowIps; return own !== undefined ? own.includes(request.ip) : false }
  })
  t.teardown(() => app.close())
  app.get('/', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 / 10 } }, allowIps: ['127.0.0.1'] } }, (_request, reply) => { reply.send('hello!') })
  for (let i = 0; i < 3; i++) t.equal((await app.inject('/')).statusCode, 200)
})

t.test("FRL: child's allowList function should not crash and should override parent", async (t) => {
  // Differs: as above; the route's predicate (`() => false`) overrides the plugin's
  // address (FRL: `['127.0.0.1']`).
  const { app } = await frlApp({
    edge: { global: false },
    allowList: (request) => { const own = allowConfig(request).allowWhen; return own !== undefined ? own(request) : request.ip === '127.0.0.1' }
  })
  t.teardown(() => app.close())
  app.get('/', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 / 10 } }, allowWhen: () => false } }, (_request, reply) => { reply.send('hello!') })
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 200, 429])
})

t.test('FRL: rateLimit decorator should work when a property other than timeWindow is modified', async (t) => {
  // Differs: `fastify.rateLimit({ allowList, max: 1 })` as a route's onRequest hook is a
  // limiter (1 a minute, FRL's default window); it has no allow-list of its own but is
  // exempted by the plugin's (the listed address here; FRL's plugin list, `() => false`,
  // has no layer bucket to exempt from under `edge: { global: false }`).
  const { app } = await frlApp({ edge: { global: false }, allowList: ['127.0.0.1'] })
  t.teardown(() => app.close())
  app.get('/', { onRequest: app.tollgate.limiter({ name: 'decorator', capacity: 1, refillPerSecond: 1 / 60 }) }, (_request, reply) => { reply.send('hello!') })
  for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject('/')), { status: 200 }, 'allowed: no bucket, no header')
  t.strictSame(trio(await app.inject({ path: '/', remoteAddress: '1.1.1.1' })), { status: 200, limit: '1', remaining: '0', reset: '60' })
  const refused = await app.inject({ path: '/', remoteAddress: '1.1.1.1' })
  t.strictSame(trio(refused), { status: 429, limit: '1', remaining: '0', reset: '60', retryAfter: '60' })
  t.equal(refused.json().code, 'TOLLGATE_RATE_LIMITED')
})
