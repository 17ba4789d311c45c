/**
 * Several registrations in one app: names apart (headers, keys, API, metrics),
 * unique along a context and its parents, and a refusal by one gives back what
 * the others took for the request.
 */
import t from 'tap'
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import Fastify from 'fastify'
import tollgate, { DECISION_CHANNEL, memoryStore, type DecisionMessage } from '../../lib/index.js'
import { failure, manualClock } from '../helpers.js'

const ok = async (): Promise<string> => 'ok'

t.test('two registrations in one instance: both limit, each under its name', async (t) => {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now })
  const app = Fastify()
  await app.register(tollgate, { store, edge: { capacity: 3, refillPerSecond: 1 } })
  await app.register(tollgate, { name: 'hourly', store, edge: { capacity: 2, refillPerSecond: 2 / 3600 } })
  app.get('/', ok)
  const first = await app.inject('/')
  t.equal(first.headers.ratelimit, '"edge";r=2;t=1, "hourly.edge";r=1;t=1800')
  t.equal(first.headers['ratelimit-policy'], '"edge";q=3;w=3, "hourly.edge";q=2;w=3600')
  t.equal((await app.inject('/')).statusCode, 200)
  t.equal((await app.inject('/')).statusCode, 429, 'the hourly one refuses the third')
  t.equal((await app.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' })).buckets[0]?.tokens, 1, "the first gave back the refused request's token: 3 − 2")
  t.equal((await app.tollgates.hourly?.peek({ layer: 'edge', ip: '127.0.0.1' }))?.buckets[0]?.key, '{ip:127.0.0.1}:hourly.edge', 'keys apart in one store')
  t.match(await app.tollgates.hourly?.consume('k', { capacity: 1, refillPerSecond: 0 }), { buckets: [{ key: '{manual:k}:hourly.manual', name: 'hourly.manual' }], registration: 'hourly' })
  await app.close()
})

t.test('a root registration and a child one: an inner refusal spends no outer bucket', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 5, refillPerSecond: 0 } })
  await app.register(async (api) => {
    await api.register(tollgate, { name: 'api', edge: { capacity: 1, refillPerSecond: 0 } })
    api.get('/api/x', ok)
  })
  app.get('/', ok)
  t.same([(await app.inject('/api/x')).statusCode, (await app.inject('/api/x')).statusCode, (await app.inject('/api/x')).statusCode], [200, 429, 429])
  t.equal((await app.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' })).buckets[0]?.tokens, 4, 'the root spent one token, for the request the inner one let through')
  t.equal((await app.inject('/')).headers.ratelimit, '"edge";r=3', 'the root registration alone on its own routes')
  t.equal(app.tollgates.api, undefined, "a child's registration is not the parent's")
  await app.close()
})

t.test('in shadow mode nothing is given back (nothing was refused)', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 5, refillPerSecond: 0 } })
  await app.register(tollgate, { name: 'strict', shadow: true, edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', ok)
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 200])
  t.equal((await app.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' })).buckets[0]?.tokens, 3)
  await app.close()
})

t.test('names: unique along a context and its parents; siblings may repeat one', async (t) => {
  const twice = Fastify()
  await twice.register(tollgate, { name: 'a', edge: { capacity: 1, refillPerSecond: 1 } })
  t.match(await failure(async () => twice.register(tollgate, { name: 'a', edge: { capacity: 1, refillPerSecond: 1 } })), {
    code: 'TOLLGATE_INVALID_OPTION', message: 'Invalid fastify-tollgate option: Expected `name` to be unique among the registrations of this context and its parents, got `"a"` twice'
  })
  const unnamed = Fastify()
  await unnamed.register(tollgate, { edge: { capacity: 1, refillPerSecond: 1 } })
  const child = failure(async () => {
    await unnamed.register(async (scope) => { await scope.register(tollgate, { app: { tiers: { default: { capacity: 1, refillPerSecond: 1 } } } }) })
    await unnamed.ready()
  })
  t.match(await child, { code: 'TOLLGATE_INVALID_OPTION', message: /Expected a `name` for this registration: one without a name already limits this context \(or a parent\)/ })
  const siblings = Fastify()
  for (const prefix of ['/a', '/b']) {
    await siblings.register(async (scope) => {
      await scope.register(tollgate, { edge: { capacity: 1, refillPerSecond: 0 } })
      scope.get('/', ok)
    }, { prefix })
  }
  t.same([(await siblings.inject('/a')).statusCode, (await siblings.inject('/b')).statusCode, (await siblings.inject('/a')).statusCode], [200, 200, 429], 'each sibling its own')
  t.match(await failure(async () => Fastify().register(tollgate, { name: 'a.b', edge: { capacity: 1, refillPerSecond: 1 } })), { message: /Expected `name` to be a name of 1 to 32 letters/ })
  await Promise.all([twice.close(), unnamed.close(), siblings.close()])
})

t.test('decisions name their registration; the layer label of metrics is `<name>.<layer>`', async (t) => {
  const seen: Array<[string, string | undefined]> = []
  const listener = (message: unknown): void => { seen.push([(message as DecisionMessage).layer, (message as DecisionMessage).registration]) }
  subscribe(DECISION_CHANNEL, listener)
  t.teardown(() => { unsubscribe(DECISION_CHANNEL, listener) })
  const app = Fastify()
  await app.register(tollgate, { name: 'hourly', edge: { capacity: 1, refillPerSecond: 1 } })
  app.get('/', ok)
  await app.inject('/')
  t.same(seen, [['edge', 'hourly']])
  await app.close()
})

t.test('decision(request): what a layer decided, read in the handler without a store call', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { decisions: true, edge: { capacity: 10, refillPerSecond: 1 }, app: { tiers: { default: { capacity: 5, refillPerSecond: 1 } }, identify: () => ({ id: 'u' }) } })
  app.get('/', async (request) => ({ app: app.tollgate.decision(request), edge: app.tollgate.decision(request, 'edge') }))
  app.get('/free', { config: { rateLimit: false } }, async (request) => ({ app: app.tollgate.decision(request) ?? null }))
  const body: unknown = (await app.inject('/')).json()
  t.match(body, { app: { layer: 'app', allowed: true, tier: 'default', buckets: [{ name: 'app', tokens: 4 }] }, edge: { layer: 'edge', buckets: [{ name: 'edge', tokens: 9 }] } })
  t.same((await app.inject('/free')).json(), { app: null }, 'a route the layers leave alone')
  t.match(await failure(() => app.tollgate.decision({} as never, 'limiter' as never)), { message: "Invalid fastify-tollgate option: Expected `layer` to be 'edge' or 'app', got `\"limiter\"` (string)" })
  await app.close()
  const off = Fastify()
  await off.register(tollgate, { edge: { capacity: 10, refillPerSecond: 1 } })
  t.match(await failure(() => off.tollgate.decision({} as never)), { code: 'TOLLGATE_INVALID_OPTION', message: 'Invalid fastify-tollgate option: `fastify.tollgate.decision(request)` reads the decisions kept on the request: register the plugin with `decisions: true`' })
  await off.close()
})

t.test("route settings per registration: config.rateLimit for the unnamed, config.rateLimits.<name> for a named one; false for all", async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 2, refillPerSecond: 0 } })
  await app.register(tollgate, { name: 'hourly', edge: { capacity: 3, refillPerSecond: 0 } })
  app.get('/search', { config: { rateLimit: { replace: true, edge: { capacity: 10, refillPerSecond: 0 } } } }, ok)
  app.get('/health', { config: { rateLimit: false } }, ok)
  const codes: number[] = []
  for (let i = 0; i < 5; i++) codes.push((await app.inject('/search')).statusCode)
  t.same(codes, [200, 200, 200, 429, 429], "loosened for the unnamed registration only: the hourly one's 3 still hold")
  t.equal((await app.inject('/health')).headers.ratelimit, undefined, 'out of both')
  await app.close()

  // A plugin's registration with an app layer; the root's has none and never reads the plugin's costs.
  const nested = Fastify()
  await nested.register(tollgate, { edge: { capacity: 100, refillPerSecond: 0 } })
  await nested.register(async (api) => {
    await api.register(tollgate, { name: 'api', app: { tiers: { default: { capacity: 20, refillPerSecond: 0 } }, identify: () => ({ id: 'u' }) } })
    api.post('/export', { config: { rateLimits: { api: { cost: 10 } } } }, ok)
  })
  await nested.ready()
  const first = await nested.inject({ method: 'POST', url: '/export' })
  t.match(first.headers.ratelimit, /"api\.app";r=10/)
  t.same([(await nested.inject({ method: 'POST', url: '/export' })).statusCode, (await nested.inject({ method: 'POST', url: '/export' })).statusCode], [200, 429])
  await nested.close()
})

t.test('a cost lookup that fails ends the request: the other registrations get their tokens back', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 5, refillPerSecond: 0 } })
  await app.register(tollgate, { name: 'inner', asyncTimeoutMs: 1, app: { tiers: { default: { capacity: 5, refillPerSecond: 0 } }, identify: () => ({ id: 'u' }) } })
  app.get('/', { config: { rateLimits: { inner: { cost: async () => new Promise<number>(() => {}) } } } }, ok)
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [503, 503])
  t.equal((await app.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' })).buckets[0]?.tokens, 5, 'nothing spent at the edge')
  await app.close()
})

t.test('a store that fails in a shadow registration gives nothing back (the request passes)', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 5, refillPerSecond: 0 } })
  const down = { consume: () => { throw new Error('down') }, close () {} }
  await app.register(tollgate, { name: 'shadowed', shadow: true, store: down, edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', ok)
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 200])
  t.equal((await app.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' })).buckets[0]?.tokens, 3, 'both requests passed: both tokens stay spent')
  const enforced = Fastify()
  await enforced.register(tollgate, { edge: { capacity: 5, refillPerSecond: 0 } })
  await enforced.register(tollgate, { name: 'down', store: down, edge: { capacity: 1, refillPerSecond: 0 } })
  enforced.get('/', ok)
  t.equal((await enforced.inject('/')).statusCode, 503)
  t.equal((await enforced.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' })).buckets[0]?.tokens, 5, 'a 503 gives the outer token back')
  await Promise.all([app.close(), enforced.close()])
})

t.test('a pass the store did not count (failMode open) is not given back when another registration refuses', async (t) => {
  const refunds: string[] = []
  const open = {
    consume: (buckets: ReadonlyArray<{ policy: { capacity: number } }>) => ({ allowed: true, tokens: buckets.map((bucket) => bucket.policy.capacity), retryAfterMs: 0, degraded: 'open' as const }),
    refund: (bucket: { key: string }) => { refunds.push(bucket.key); return 0 },
    close () {}
  }
  const app = Fastify()
  await app.register(tollgate, { store: open, edge: { capacity: 5, refillPerSecond: 0 } })
  await app.register(tollgate, { name: 'inner', edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', ok)
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 429, 429])
  t.same(refunds, [], 'nothing was taken, nothing is given back')
  await app.close()
})
