import t from 'tap'
import Fastify from 'fastify'
import tollgate, {
  InvalidCostError, InvalidOptionError, InvalidRouteConfigError, RateLimitedError, StoreUnavailableError, type Store
} from '../lib/index.js'
import { buildApp } from './helpers.js'

t.test('every error code, its status and message', async (t) => {
  const cases = [
    [new RateLimitedError('3 seconds'), 'TOLLGATE_RATE_LIMITED', 429, 'Rate limit exceeded, retry in 3 seconds'],
    [new InvalidOptionError('Expected `x` to be y, got `z` (string)'), 'TOLLGATE_INVALID_OPTION', 500, 'Invalid fastify-tollgate option: Expected `x` to be y, got `z` (string)'],
    [new InvalidRouteConfigError('POST /export', 'bad'), 'TOLLGATE_INVALID_ROUTE_CONFIG', 500, 'Invalid config.rateLimit on route POST /export: bad'],
    [new InvalidCostError('POST /export', 'it threw'), 'TOLLGATE_INVALID_COST', 500, 'The rate-limit cost of route POST /export is invalid: it threw'],
    [new StoreUnavailableError(), 'TOLLGATE_STORE_UNAVAILABLE', 503, 'The rate-limit store is unavailable, retry later']
  ] as const
  for (const [error, code, statusCode, message] of cases) {
    t.equal(error.code, code)
    t.equal(error.statusCode, statusCode)
    t.equal(error.message, message)
    t.ok(error instanceof Error)
  }
})

t.test('a refusal is built without a stack trace', async (t) => {
  t.equal(Object.hasOwn(new RateLimitedError('1 second'), 'stack'), false)
  t.equal(Object.hasOwn(new InvalidOptionError('x'), 'stack'), true, 'startup errors keep theirs')
})

t.test("a user's setErrorHandler reshapes the refusal; the headers stay", async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 1 } })
  app.setErrorHandler((error: { code?: string, statusCode?: number, message: string }, _request, reply) => {
    reply.code(error.statusCode ?? 500).type('application/problem+json').send({
      type: `https://example.com/problems/${error.code ?? 'unknown'}`,
      title: error.message,
      status: error.statusCode
    })
  })
  app.get('/', async () => 'ok')
  await app.inject('/')
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.match(refused.headers['content-type'], /^application\/problem\+json/)
  t.same(refused.json(), { type: 'https://example.com/problems/TOLLGATE_RATE_LIMITED', title: 'Rate limit exceeded, retry in 1 second', status: 429 })
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['ratelimit'], '"edge";r=0;t=1')
  await app.close()
})

t.test('a store that throws or rejects refuses the request with a coded 503, never a crash or a free pass', async (t) => {
  for (const failing of [
    { consume () { throw new Error('down') }, close () {} },
    { consume: async () => { throw new Error('down') }, close () {} }
  ] as Store[]) {
    const app = Fastify()
    await app.register(tollgate, { store: failing, edge: { capacity: 10, refillPerSecond: 1 } })
    app.get('/', async () => 'ok')
    const response = await app.inject('/')
    t.equal(response.statusCode, 503)
    t.equal(response.json().code, 'TOLLGATE_STORE_UNAVAILABLE')
    t.equal(response.headers['retry-after'], '1')
    await app.close()
  }
})

t.test('an asynchronous store is awaited', async (t) => {
  let calls = 0
  const store: Store = {
    consume: async (buckets) => {
      calls++
      return { allowed: calls <= 1, tokens: buckets.map(() => 0), retryAfterMs: calls <= 1 ? 0 : 1500 }
    },
    close () {}
  }
  const app = Fastify()
  await app.register(tollgate, { store, edge: { capacity: 10, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  t.equal((await app.inject('/')).statusCode, 200)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '2')
  await app.close()
})
