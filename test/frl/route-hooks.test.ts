/**
 * FRL's test/route-rate-limit.test.js, part 4: hooks, `fastify.rateLimit()` in a
 * route's preHandler, `continueExceeding`, and per-route header switches. FRL
 * adds its hook to each route; here the edge is one global `onRequest` hook, and
 * the app layer's hook is appended to each route's (`app.hook`).
 */
import t from 'tap'
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify'
import tollgate from '../../lib/index.js'
import { failure, readyWith } from '../helpers.js'
import { frlApp, JSON_TYPE, trio } from './frl.js'

t.test('FRL: avoid double onRequest', async (t) => {
  // Same: registered in an encapsulated plugin, it limits that context's routes, keying
  // each request once.
  let keyed = 0
  const app = Fastify()
  t.teardown(() => app.close())
  app.register(async (child) => {
    await child.register(tollgate, { headers: 'legacy', edge: { capacity: 1, refillPerSecond: 1, key: (request) => { keyed++; return request.ip } } })
    child.get('/', {}, async () => 'hello!')
  }, { prefix: '/test' })
  app.get('/outside', async () => 'hello!')
  t.strictSame(trio(await app.inject({ url: '/test', method: 'GET' })), { status: 200, limit: '1', remaining: '0', reset: '1' })
  t.equal(keyed, 1)
  t.strictSame(trio(await app.inject('/outside')), { status: 200 }, 'a route outside the context is not limited')
})

t.test('FRL: Allow custom timeWindow in preHandler', async (t) => {
  // Same: `fastify.rateLimit({ max, timeWindow, keyGenerator })` as a route's preHandler is
  // a limiter with its own key (FRL's '2 minutes' and '3 minutes' as rates); every request
  // of a limiter with a constant key shares one bucket.
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.register(async (scope) => {
    scope.get('/default', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 / 10 } } } }, async () => 'limited at the edge')
    scope.route({ method: 'GET', url: '/2', preHandler: [app.tollgate.limiter({ name: 'two', capacity: 1, refillPerSecond: 1 / 120, key: () => 245 })], handler: async () => ({ hello: 'world' }) })
    scope.route({ method: 'GET', url: '/3', preHandler: [app.tollgate.limiter({ name: 'three', capacity: 1, refillPerSecond: 1 / 180, key: () => 345 })], handler: async () => ({ hello: 'world' }) })
  })
  t.strictSame(trio(await app.inject('/2')), { status: 200, limit: '1', remaining: '0', reset: '120' })
  const two = await app.inject({ url: '/2', remoteAddress: '198.51.100.7' })
  t.strictSame(trio(two), { status: 429, limit: '1', remaining: '0', reset: '120', retryAfter: '120' }, 'keyed by 245, not the address')
  t.equal(two.headers['content-type'], JSON_TYPE)
  t.strictSame(trio(await app.inject('/3')), { status: 200, limit: '1', remaining: '0', reset: '180' })
  const three = await app.inject('/3')
  t.strictSame(trio(three), { status: 429, limit: '1', remaining: '0', reset: '180', retryAfter: '180' })
  t.equal(three.headers['content-type'], JSON_TYPE)
  t.strictSame(trio(await app.inject('/default')), { status: 200, limit: '1', remaining: '0', reset: '10' })
  t.strictSame(trio(await app.inject('/default')), { status: 429, limit: '1', remaining: '0', reset: '10', retryAfter: '10' })
})

t.test('FRL: When continue exceeding is on (Local)', async (t) => {
  // Differs by design: no `continueExceeding` (a route config naming it fails startup); a
  // refusal costs nothing, so the wait runs from the last admitted request.
  const option = await failure(() => readyWith({ edge: { global: false } }, (app) => {
    app.get('/', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 / 5 }, continueExceeding: true } as never } }, async () => 'hello!')
  }))
  t.equal(option.code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
  t.match(option.message, 'Unknown option `rateLimit.continueExceeding`')
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/', { config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 / 5 } } } }, async () => 'hello!')
  t.equal((await app.inject('/')).statusCode, 200)
  t.strictSame(trio(await app.inject('/')), { status: 429, limit: '1', remaining: '0', reset: '5', retryAfter: '5' })
  clock.advance(5000)
  t.equal((await app.inject('/')).statusCode, 200)
})

t.test('FRL: on preValidation hook', async (t) => {
  // Differs: a route's `hook` and `keyGenerator` are the app layer's (`app.hook`,
  // `app.identify`), on the routes that ask for it (`rateLimit: { app: true }`).
  const userIds = new WeakMap<FastifyRequest, string>()
  const { app } = await frlApp({
    app: {
      global: false,
      hook: 'preValidation',
      tiers: { default: { capacity: 1, refillPerSecond: 1 / 10 } },
      identify: (request) => { const id = userIds.get(request); return id === undefined ? undefined : { id } }
    }
  })
  t.teardown(() => app.close())
  app.addHook('preParsing', async (request) => {
    const { userId } = request.query as { userId?: string }
    if (userId !== undefined) userIds.set(request, userId)
  })
  app.get('/quero', { config: { rateLimit: { app: true } } }, async () => 'fastify is awesome !')
  const send = async (userId?: string): Promise<number> => (await app.inject({ url: '/quero', query: userId === undefined ? {} : { userId } })).statusCode
  t.strictSame([await send(), await send(), await send('123'), await send('123'), await send('234')], [200, 429, 200, 429, 200])
})

t.test('FRL: on undefined hook should use onRequest-hook', async (t) => {
  // Differs by design: FRL adds its onRequest hook to the route (one entry); the edge is
  // one global onRequest hook, so the route's options carry none, and the route is limited.
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  const seen: Array<{ onRequest: unknown, preHandler: unknown }> = []
  app.addHook('onRoute', (routeOptions) => { seen.push({ onRequest: routeOptions.onRequest, preHandler: routeOptions.preHandler }) })
  app.get('/', { exposeHeadRoute: false, config: { rateLimit: { edge: { capacity: 1, refillPerSecond: 1 / 10 } } } }, async () => 'fastify is awesome !')
  t.strictSame(seen, [{ onRequest: undefined, preHandler: undefined }])
  t.equal((await app.inject('/')).statusCode, 200)
  t.equal((await app.inject('/')).statusCode, 429)
})

t.test('FRL: on rateLimitHook should not be set twice on HEAD', async (t) => {
  // Same, for the hook this plugin does add to routes, the app layer's: once on a GET
  // route, once on the HEAD route Fastify derives from it, once on an explicit HEAD route.
  const { app } = await frlApp({ app: { tiers: { default: { capacity: 5, refillPerSecond: 1 / 10 } } } })
  t.teardown(() => app.close())
  const seen: string[] = []
  app.addHook('onRoute', (routeOptions) => {
    const hooks = routeOptions.preHandler === undefined ? [] : [routeOptions.preHandler].flat()
    seen.push(`${String(routeOptions.method)} ${routeOptions.url} ${hooks.length}`)
  })
  app.get('/', { exposeHeadRoute: true }, async () => 'fastify is awesome !')
  app.head('/explicit-head', async () => 'fastify is awesome !')
  app.head('/explicit-head-2', { exposeHeadRoute: true }, async () => 'fastify is awesome !')
  await app.ready()
  t.strictSame(seen.sort(), ['GET / 1', 'HEAD / 1', 'HEAD /explicit-head 1', 'HEAD /explicit-head-2 1'])
  t.match(trio(await app.inject({ method: 'HEAD', url: '/' })), { status: 200, remaining: '4' }, 'a HEAD takes one token')
})

/** Headers to drop, by a route's config: FRL's `addHeaders` (on a 429) and `addHeadersOnExceeding` (on a pass), per route. */
interface HideConfig { hideOn429?: string[], hideOnPass?: string[] }
const TRIO = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']

/** An onSend hook dropping what the route's config (else `defaults`) lists: MIGRATING's "remove it in an onSend hook". */
function hideHeaders (defaults: HideConfig) {
  return async (request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> => {
    const config = { ...defaults, ...(request.routeOptions.config as HideConfig) }
    for (const name of (reply.statusCode === 429 ? config.hideOn429 : config.hideOnPass) ?? []) reply.removeHeader(name)
    return payload
  }
}

t.test('FRL: hide rate limit headers', async (t) => {
  // Differs: no header switches, per route or not: an onSend hook reads the route's own
  // list. The 429 keeps Retry-After (FRL: hidden too).
  const { app, clock } = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 } })
  t.teardown(() => app.close())
  app.addHook('onSend', hideHeaders({ hideOn429: TRIO }))
  app.get('/', { config: { hideOn429: ['x-ratelimit-remaining', 'x-ratelimit-reset'] } }, async () => 'hello')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1', remaining: '0', reset: '1' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1', remaining: '0', reset: '1' })
})

t.test('FRL: hide rate limit headers on exceeding', async (t) => {
  const { app, clock } = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 } })
  t.teardown(() => app.close())
  app.addHook('onSend', hideHeaders({ hideOnPass: TRIO }))
  app.get('/', { config: { hideOnPass: ['x-ratelimit-remaining', 'x-ratelimit-reset'] } }, async () => 'hello')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '1', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '1' })
})

t.test('FRL: hide rate limit headers at all times', async (t) => {
  const { app, clock } = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 } })
  t.teardown(() => app.close())
  app.addHook('onSend', hideHeaders({ hideOn429: TRIO, hideOnPass: TRIO }))
  app.get('/', { config: { hideOn429: ['x-ratelimit-remaining', 'x-ratelimit-reset'], hideOnPass: ['x-ratelimit-limit', 'x-ratelimit-reset'] } }, async () => 'hello')
  t.strictSame(trio(await app.inject('/')), { status: 200, remaining: '0' })
  const refused = await app.inject('/')
  t.strictSame(trio(refused), { status: 429, limit: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, remaining: '0' })
})
