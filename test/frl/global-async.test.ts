/**
 * FRL's test/global-rate-limit.test.js, the async cases: an allow-list
 * function, `edge.key` and `app.identify` (FRL's async `max`) that return
 * promises are awaited (README, "Async functions"). A rejection is the
 * synchronous failure's outcome (not allowed, keyed by IP, anonymous), logged
 * with `TOLLGATE_LOOKUP_FAILED`.
 */
import t from 'tap'
import type { FastifyRequest } from 'fastify'
import { logSink, unhandledRejections } from '../helpers.js'
import { frlApp, JSON_TYPE, tooMany, trio } from './frl.js'

/** A lookup that answers on a later turn of the event loop, as a database or cache would. */
const later = async <T>(value: T): Promise<T> => { await new Promise((resolve) => setImmediate(resolve)); return value }

/** A lookup that fails on a later turn of the event loop. */
const failing = async (): Promise<never> => { await later(0); throw new Error('lookup failed') }

/** The log lines of failed lookups, by the function they name. */
const lookupFailures = (lines: ReturnType<typeof logSink>['lines']): unknown[] => lines.filter((line) => line.code === 'TOLLGATE_LOOKUP_FAILED').map((line) => line.function)

t.test('FRL: With async/await function allowList', async (t) => {
  // Same, but for the predicate's arguments (the request only; FRL: `(req, key)`) and its
  // answer (`true` allows; FRL: anything truthy).
  const calls: FastifyRequest[] = []
  const { lines, logger } = logSink()
  const { app } = await frlApp({
    edge: { capacity: 2, refillPerSecond: 1, key: () => 42 },
    allowList: async (request) => { calls.push(request); return later(request.headers['x-my-header'] !== undefined) }
  }, { logger })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const allowed = { method: 'GET' as const, url: '/', headers: { 'x-my-header': 'FOO BAR' } }
  for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject(allowed)), { status: 200 }, 'awaited: allowed, no bucket, no header')
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 200, 429])
  t.equal(calls.length, 6)
  t.strictSame(lookupFailures(lines), [])
  // A rejection does not allow (as a throw), and is logged.
  const escaped = unhandledRejections(t)
  const rejecting = logSink()
  const failed = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 }, allowList: { match: failing } }, { logger: rejecting.logger })
  t.teardown(() => failed.app.close())
  failed.app.get('/', async () => 'hello!')
  t.strictSame([(await failed.app.inject('/')).statusCode, (await failed.app.inject('/')).statusCode], [200, 429])
  t.strictSame(lookupFailures(rejecting.lines), ['allowList'], 'logged once a minute')
  t.strictSame(escaped, [])
})

t.test('FRL: With async/await keyGenerator', async (t) => {
  // Same: an async `edge.key` is awaited, its value the key.
  const seen: unknown[] = []
  const { lines, logger } = logSink()
  const { app, clock } = await frlApp({
    edge: { capacity: 1, refillPerSecond: 1, key: async (request) => { seen.push(request.headers['my-custom-header']); return later(String(request.headers['my-custom-header'])) } }
  }, { logger })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const request = { method: 'GET' as const, url: '/', headers: { 'my-custom-header': 'random-value' } }
  t.strictSame(trio(await app.inject(request)), { status: 200, limit: '1', remaining: '0', reset: '1' })
  const refused = await app.inject(request)
  t.strictSame(trio(refused), { status: 429, limit: '1', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), tooMany(1))
  t.equal((await app.inject({ ...request, remoteAddress: '198.51.100.9' })).statusCode, 429, 'keyed by the awaited value, not the address')
  clock.advance(1100)
  t.strictSame(trio(await app.inject(request)), { status: 200, limit: '1', remaining: '0', reset: '1' })
  t.strictSame(seen, Array(4).fill('random-value'))
  t.strictSame(lookupFailures(lines), [])
  // A rejection keys by the client IP (as a throw), and is logged.
  const rejecting = logSink()
  const failed = await frlApp({ edge: { capacity: 1, refillPerSecond: 1, key: failing } }, { logger: rejecting.logger })
  t.teardown(() => failed.app.close())
  failed.app.get('/', async () => 'hello!')
  t.equal((await failed.app.inject({ url: '/', remoteAddress: '198.51.100.1' })).statusCode, 200)
  t.equal((await failed.app.inject({ url: '/', remoteAddress: '198.51.100.1' })).statusCode, 429)
  t.equal((await failed.app.inject({ url: '/', remoteAddress: '198.51.100.2' })).statusCode, 200, 'another address, another bucket')
  t.strictSame(lookupFailures(rejecting.lines), ['edge.key'])
})

t.test('FRL: Before async in "max"', async (t) => {
  // FRL's case registers an async `max` that awaits the key, and sends nothing. Here an
  // async `max` is an async `app.identify` naming the tier; it registers, and it is awaited.
  const { lines, logger } = logSink()
  const { app } = await frlApp({
    app: {
      tiers: { default: { capacity: 2, refillPerSecond: 2 / 10 }, pro: { capacity: 5, refillPerSecond: 5 / 10 }, anonymous: { capacity: 1, refillPerSecond: 1 / 10 } },
      identify: async (request) => {
        const key = request.headers['api-key']
        if (key === 'broken') return failing()
        const id = await later(String(key))
        return { id, tier: id === 'pro' ? 'pro' : 'default' }
      }
    }
  }, { logger })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello')
  await app.ready()
  t.match(trio(await app.inject({ url: '/', headers: { 'api-key': 'pro' } })), { status: 200, limit: '5', remaining: '4' })
  t.match(trio(await app.inject({ url: '/', headers: { 'api-key': 'NOT' } })), { status: 200, limit: '2', remaining: '1' })
  t.strictSame(lookupFailures(lines), [])
  // A rejection is anonymous (the anonymous tier, by IP), and is logged.
  t.match(trio(await app.inject({ url: '/', headers: { 'api-key': 'broken' } })), { status: 200, limit: '1', remaining: '0' })
  t.strictSame(lookupFailures(lines), ['app.identify'])
})
