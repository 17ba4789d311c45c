/**
 * Routes the plugin never saw in `onRoute`: declared before it was loaded
 * (`register` not awaited, or a route declared first). Their app layer runs in
 * a global hook, and a warning says so once.
 */
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import tollgate, { memoryStore, type AppOptions } from '../../lib/index.js'
import { logSink, statuses } from '../helpers.js'

const tiers = { default: { capacity: 20, refillPerSecond: 0 } }
const identify: AppOptions['identify'] = (request) => typeof request.headers['x-user'] === 'string' ? { id: request.headers['x-user'] } : undefined
const quota = { default: { capacity: 2, refillPerSecond: 0 } }

/** `declare` adds routes; `order` is when, relative to the plugin. */
async function appWith (order: 'no-await' | 'routes-first' | 'routes-in-a-plugin-first' | 'plugin-first', declare: (app: FastifyInstance) => void, app: Partial<AppOptions> = {}) {
  const { lines, logger } = logSink()
  const fastify = Fastify({ logger })
  const options = { store: memoryStore(), app: { tiers, identify, ...app } }
  if (order === 'no-await') {
    void fastify.register(tollgate, options)
    declare(fastify)
  } else if (order === 'routes-first') {
    declare(fastify)
    await fastify.register(tollgate, options)
  } else if (order === 'routes-in-a-plugin-first') {
    await fastify.register(async (child) => { declare(child) })
    await fastify.register(tollgate, options)
  } else {
    await fastify.register(tollgate, options)
    declare(fastify)
  }
  await fastify.ready()
  const warnings = () => lines.filter((line) => line.code === 'TOLLGATE_ROUTE_BEFORE_PLUGIN')
  return { app: fastify, warnings }
}

for (const order of ['no-await', 'routes-first', 'routes-in-a-plugin-first'] as const) {
  t.test(`${order}: the app layer applies anyway, and a warning says so once, naming the route`, async (t) => {
    const { app, warnings } = await appWith(order, (app) => {
      app.get('/report', { config: { rateLimit: { quota } } }, async () => 'report')
      app.post('/export', { config: { rateLimit: { cost: 10 } } }, async () => 'exported')
      app.route({ method: ['GET', 'POST'], url: '/multi', config: { rateLimit: { quota } }, handler: async () => 'multi' })
    })
    const headers = { 'x-user': 'alice' }
    t.same(await statuses(app, 3, { url: '/report', headers }), [200, 200, 429], 'the route quota of 2')
    t.same(warnings().map((line) => [line.level, line.route]), [[40, 'GET /report']], 'one warning, at warn')
    t.match(warnings()[0]?.msg, /declared before fastify-tollgate was loaded/)
    const exported = await app.inject({ method: 'POST', url: '/export', headers })
    t.equal(exported.headers['ratelimit'], '"app";r=8', 'the cost of 10 was read from the config: 20 − 2 − 10')
    t.equal((await app.inject({ method: 'HEAD', url: '/report', headers })).statusCode, 429, "HEAD spends GET's route quota")
    t.equal(warnings().length, 1, 'still one warning')
    t.same([...await statuses(app, 2, { url: '/multi', headers }), ...await statuses(app, 1, { method: 'HEAD', url: '/multi', headers })], [200, 200, 429],
      "['GET', 'POST']: HEAD spends the same quota")
    await app.close()
  })
}

t.test('a route seen in onRoute is charged once, next to an unseen one', async (t) => {
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  app.get('/early', async () => 'early')
  await app.register(tollgate, { store: memoryStore(), app: { tiers: { default: { capacity: 3, refillPerSecond: 0 } } } })
  app.get('/late', async () => 'late')
  await app.ready()
  t.same(await statuses(app, 4, { url: '/late', remoteAddress: '198.51.100.1' }), [200, 200, 200, 429], 'three tokens, three requests: not charged twice')
  t.same(await statuses(app, 4, { url: '/early', remoteAddress: '198.51.100.2' }), [200, 200, 200, 429])
  t.same(await statuses(app, 2, { url: '/missing', remoteAddress: '198.51.100.2' }), [404, 404], 'a 404 is not charged by the app layer')
  t.equal(lines.filter((line) => line.code === 'TOLLGATE_ROUTE_BEFORE_PLUGIN').length, 1)
  await app.close()
})

t.test("two registrations: a route the first one saw still gets the second one's app layer", async (t) => {
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  const user = { identify: () => ({ id: 'u' }) }
  // B, inside a plugin, sees /x; A, at the root, is loaded after both /x and /y were declared.
  void app.register(async (child) => {
    await child.register(tollgate, { store: memoryStore(), app: { tiers: { default: { capacity: 1000, refillPerSecond: 1 } }, ...user } })
    child.get('/x', async () => 'x')
  })
  app.get('/y', async () => 'y')
  await app.register(tollgate, { store: memoryStore(), app: { tiers: { default: { capacity: 2, refillPerSecond: 0 } }, ...user } })
  await app.ready()
  const x = await app.inject('/x')
  t.equal(x.statusCode, 200)
  t.equal(x.headers['ratelimit'], '"app";r=1, "app";r=999;t=1', "A's layer (a global hook, so first), then B's")
  t.same(await statuses(app, 2, { url: '/y' }), [200, 429], "A's bucket of 2 is spent")
  t.equal((await app.inject('/x')).statusCode, 429, "and A's app layer refuses /x as well")
  t.same(lines.filter((line) => line.code === 'TOLLGATE_ROUTE_BEFORE_PLUGIN').map((line) => line.route), ['GET /x'], 'A warns (once, at the first unseen route)')
  await app.close()
})

t.test('an unseen route: rateLimit: false exempts it; a bad config fails its requests with the coded 500', async (t) => {
  const { app, warnings } = await appWith('routes-first', (app) => {
    app.get('/health', { config: { rateLimit: false } }, async () => 'ok')
    app.get('/bad', { config: { rateLimit: { cost: 21 } } }, async () => 'never')
    app.get('/', async () => 'ok')
  })
  t.same(await statuses(app, 25, { url: '/health' }), Array(25).fill(200), 'exempt')
  const bad = await app.inject('/bad')
  t.equal(bad.statusCode, 500)
  t.match(bad.json(), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /route GET \/bad: Expected `rateLimit\.cost` to be at most the capacity/ })
  t.equal((await app.inject('/bad')).statusCode, 500, 'every time')
  t.equal((await app.inject('/')).headers['ratelimit'], '"app";r=19', 'other routes are limited as usual')
  t.equal(warnings().length, 1)
  await app.close()
})

t.test('an unseen route: the layer runs before the route\'s own hooks of its kind; preParsing passes the payload on', async (t) => {
  const order: string[] = []
  const { app } = await appWith('routes-first', (app) => {
    app.get('/', { preHandler: async () => { order.push('route preHandler') } }, async () => 'ok')
  }, { identify: (request) => { order.push('tollgate'); return { id: String(request.headers['x-user']) } } })
  await app.inject({ url: '/', headers: { 'x-user': 'a' } })
  t.same(order, ['tollgate', 'route preHandler'])
  await app.close()

  const parsed = await appWith('routes-first', (app) => { app.post('/', async (request) => request.body) }, { hook: 'preParsing' })
  const response = await parsed.app.inject({ method: 'POST', url: '/', payload: { a: 1 } })
  t.same(response.json(), { a: 1 })
  t.equal(response.headers['ratelimit'], '"app";r=19')
  await parsed.app.close()
})

t.test('the warning can be switched off; registered first, no warning', async (t) => {
  const { lines, logger } = logSink()
  const quiet = Fastify({ logger })
  quiet.get('/', async () => 'ok')
  await quiet.register(tollgate, { app: { tiers }, warnings: { TOLLGATE_ROUTE_BEFORE_PLUGIN: false } })
  await quiet.ready()
  t.equal((await quiet.inject('/')).headers['ratelimit'], '"app";r=19', 'still limited')
  t.equal(lines.filter((line) => line.code === 'TOLLGATE_ROUTE_BEFORE_PLUGIN').length, 0, 'switched off')
  await quiet.close()

  const first = await appWith('plugin-first', (app) => { app.get('/', async () => 'ok') })
  t.equal((await first.app.inject('/')).headers['ratelimit'], '"app";r=19')
  t.equal(first.warnings().length, 0)
  await first.app.close()
})
