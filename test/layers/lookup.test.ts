/**
 * User functions that answer with a promise (keys looked up in a database):
 * `edge.key`, the allow-list, `app.identify`, a route's cost and a route's edge key
 * are awaited; a rejection or a late answer (asyncTimeoutMs) has the documented
 * fallback, is logged with TOLLGATE_LOOKUP_FAILED at most once a minute, and never
 * becomes a 500 or an unhandled rejection.
 */
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import tollgate, { memoryStore, type TollgateOptions } from '../../lib/index.js'
import { Lookups, LOOKUP_FAILED } from '../../lib/layers/lookup.js'
import { logSink, manualClock, unhandledRejections } from '../helpers.js'

/** A promise settled on the next turn (a lookup that goes somewhere). */
const later = async <T>(value: T): Promise<T> => new Promise((resolve) => setImmediate(() => { resolve(value) }))
const failing = async (): Promise<never> => new Promise((_resolve, reject) => setImmediate(() => { reject(new Error('lookup down')) }))
/** A promise that never settles (a lookup that hangs). */
const hanging = async (): Promise<never> => new Promise(() => {})

async function appWith (options: Omit<TollgateOptions, 'store'>): Promise<{ app: FastifyInstance, lines: ReturnType<typeof logSink>['lines'] }> {
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  const clock = manualClock()
  await app.register(tollgate, { ...options, store: memoryStore({ clock: clock.now }), warnings: false })
  app.get('/', async () => 'ok')
  return { app, lines }
}

const codesOf = async (app: FastifyInstance, headers: Array<Record<string, string>>): Promise<number[]> => {
  const codes: number[] = []
  for (const h of headers) codes.push((await app.inject({ url: '/', headers: h })).statusCode)
  return codes
}
const failures = (lines: ReturnType<typeof logSink>['lines'], fn: string): number => lines.filter((line) => line.code === 'TOLLGATE_LOOKUP_FAILED' && line.function === fn).length

t.test('an async edge.key is awaited: each key its own bucket', async (t) => {
  const { app } = await appWith({ edge: { capacity: 1, refillPerSecond: 0, key: async (request) => later(request.headers['x-api-key']) } })
  t.same(await codesOf(app, [{ 'x-api-key': 'a' }, { 'x-api-key': 'b' }, { 'x-api-key': 'a' }]), [200, 200, 429])
  await app.close()
})

t.test('an edge.key that rejects or hangs keys by client IP, logged once', async (t) => {
  const escaped = unhandledRejections(t)
  const { app, lines } = await appWith({
    // 300 ms: a rejection must not time out first on a busy machine (it did at 5 ms).
    asyncTimeoutMs: 300,
    edge: { capacity: 2, refillPerSecond: 0, key: async (request) => request.headers['x-hang'] !== undefined ? hanging() : failing() }
  })
  t.same(await codesOf(app, [{}, { 'x-hang': '1' }, {}]), [200, 200, 429], 'one bucket: the client IP')
  t.equal(failures(lines, 'edge.key'), 1, 'logged once a minute, whatever failed')
  t.match(lines.find((line) => line.code === 'TOLLGATE_LOOKUP_FAILED')?.msg, /the promise of edge\.key rejected; the request is keyed by client IP/)
  t.same(escaped, [])
  await app.close()
})

t.test('an async allow-list: a promise of true allows, anything else does not', async (t) => {
  const escaped = unhandledRejections(t)
  const match = async (request: { headers: Record<string, unknown> }): Promise<boolean> => {
    if (request.headers['x-fail'] !== undefined) return failing()
    return later(request.headers['x-partner'] === 'yes')
  }
  for (const allowList of [match, { match }]) {
    const { app, lines } = await appWith({ edge: { capacity: 1, refillPerSecond: 0 }, allowList })
    t.same(await codesOf(app, [{ 'x-partner': 'yes' }, { 'x-partner': 'yes' }, {}, { 'x-fail': '1' }, { 'x-partner': 'no' }]), [200, 200, 200, 429, 429])
    const allowed = await app.inject({ url: '/', headers: { 'x-partner': 'yes' } })
    t.equal(allowed.headers.ratelimit, undefined, 'an allowed request gets no header')
    t.equal(failures(lines, 'allowList'), 1)
    await app.close()
  }
  t.same(escaped, [])
})

t.test('an async allow-list runs in the app layer too', async (t) => {
  const { app } = await appWith({ app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } }, identify: () => undefined }, allowList: async (request) => later(request.headers['x-partner'] === 'yes') })
  t.same(await codesOf(app, [{ 'x-partner': 'yes' }, { 'x-partner': 'yes' }, {}, {}]), [200, 200, 200, 429])
  await app.close()
})

t.test('an async identify is awaited (its tier applies); one that rejects or hangs is anonymous', async (t) => {
  const escaped = unhandledRejections(t)
  const { app, lines } = await appWith({
    asyncTimeoutMs: 300,
    app: {
      tiers: { default: { capacity: 1, refillPerSecond: 0 }, vip: { capacity: 3, refillPerSecond: 0 } },
      identify: async (request) => {
        const who = request.headers['x-user']
        if (who === 'fail') return failing()
        if (who === 'hang') return hanging()
        return later(typeof who === 'string' ? { id: who, tier: 'vip' } : undefined)
      }
    }
  })
  t.same(await codesOf(app, [{ 'x-user': 'alice' }, { 'x-user': 'alice' }, { 'x-user': 'alice' }, { 'x-user': 'alice' }]), [200, 200, 200, 429], 'alice is vip: 3')
  t.same(await codesOf(app, [{ 'x-user': 'fail' }, { 'x-user': 'hang' }]), [200, 429], 'anonymous (default tier, by IP): 1, never vip')
  t.equal(failures(lines, 'app.identify'), 1)
  t.same(escaped, [])
  await app.close()
})

t.test('an async cost is awaited; one that rejects or hangs is a 503 TOLLGATE_LOOKUP_FAILED, never a 500', async (t) => {
  const escaped = unhandledRejections(t)
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  await app.register(tollgate, { asyncTimeoutMs: 300, warnings: false, app: { tiers: { default: { capacity: 10, refillPerSecond: 0 } }, identify: () => ({ id: 'u' }) } })
  const cost = async (request: { headers: Record<string, unknown> }): Promise<number> => {
    const given = request.headers['x-cost']
    if (given === 'fail') return failing()
    if (given === 'hang') return hanging()
    return later(Number(given))
  }
  app.get('/', { config: { rateLimit: { cost } } }, async () => 'ok')
  const send = async (value: string) => app.inject({ url: '/', headers: { 'x-cost': value } })
  t.equal((await send('6')).statusCode, 200)
  t.equal((await send('6')).statusCode, 429, '6 of 10 taken: another 6 does not fit')
  const failed = await send('fail')
  t.equal(failed.statusCode, 503)
  t.equal(failed.json().code, 'TOLLGATE_LOOKUP_FAILED')
  t.equal(failed.headers['retry-after'], '1')
  t.equal((await send('hang')).statusCode, 503)
  t.equal((await send('-1')).statusCode, 500, 'a wrong answer is the server bug a wrong sync answer is')
  t.equal((await send('4')).statusCode, 200, 'nothing was taken by the failures: 4 left')
  t.equal(failures(lines, 'rateLimit.cost'), 1)
  t.same(escaped, [])
  await app.close()
})

t.test('in shadow mode a failed cost lookup passes', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { shadow: true, asyncTimeoutMs: 1, warnings: false, app: { tiers: { default: { capacity: 10, refillPerSecond: 0 } }, identify: () => ({ id: 'u' }) } })
  app.get('/', { config: { rateLimit: { cost: async () => hanging() } } }, async () => 'ok')
  t.equal((await app.inject('/')).statusCode, 200)
  await app.close()
})

t.test('Lookups: a value, a rejection, a timeout, a rejection after the timeout', async (t) => {
  const { lines, logger } = logSink()
  const log = Fastify({ logger }).log
  let now = 0
  const lookups = new Lookups(5, log, () => now)
  t.equal(await lookups.wait('edge.key', later('k')), 'k')
  t.equal(await lookups.wait('edge.key', Promise.reject(new Error('x'))), LOOKUP_FAILED)
  let reject: (error: Error) => void = () => {}
  const late = new Promise<string>((_resolve, rejectLater) => { reject = rejectLater })
  now = 60_000
  t.equal(await lookups.wait('edge.key', late), LOOKUP_FAILED, 'late')
  reject(new Error('after the timeout'))
  await later(undefined)
  t.equal(lines.length, 2, 'the rejection after the timeout is not logged again')
  t.match(lines[1]?.msg, /did not answer within 5 ms \(asyncTimeoutMs\)/)
  now = 60_001
  // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- a rejection without a reason, as user code may give
  t.equal(await lookups.wait('edge.key', Promise.reject(undefined)), LOOKUP_FAILED)
  t.equal(lines.length, 2, 'once a minute')
  now = 120_001
  // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- as above
  t.equal(await lookups.wait('edge.key', Promise.reject(undefined)), LOOKUP_FAILED)
  t.equal(lines[2]?.since, 1, 'one failure left out since')
  t.match(String((lines[2]?.err as { message?: string } | undefined)?.message), /rejected without a reason/)
})

t.test("a limiter awaits an async allow-list, its key and its cost (a failed cost lookup: 503)", async (t) => {
  const app = Fastify()
  await app.register(tollgate, { warnings: false, asyncTimeoutMs: 300, edge: { capacity: 1000, refillPerSecond: 0 }, allowList: async (request) => later(request.headers['x-partner'] === 'yes') })
  const limit = app.tollgate.limiter({
    name: 'lim',
    capacity: 2,
    refillPerSecond: 0,
    key: async (request) => later(request.headers['x-user'] as string | undefined),
    cost: async (request) => request.headers['x-cost'] === 'hang' ? hanging() : later(1)
  })
  app.get('/l', { onRequest: limit }, async () => 'ok')
  app.get('/c', async (request) => limit.check(request))
  const send = async (headers: Record<string, string>): Promise<number> => (await app.inject({ url: '/l', headers })).statusCode
  t.same([await send({ 'x-partner': 'yes' }), await send({ 'x-partner': 'yes' }), await send({ 'x-partner': 'yes' })], [200, 200, 200], 'allowed: never counted')
  t.same([await send({ 'x-user': 'a' }), await send({ 'x-user': 'a' }), await send({ 'x-user': 'a' }), await send({ 'x-user': 'b' })], [200, 200, 429, 200], 'keyed by the awaited value')
  t.equal(await send({ 'x-user': 'c', 'x-cost': 'hang' }), 503)
  t.match((await app.inject({ url: '/c', headers: { 'x-partner': 'yes' } })).json(), { allowed: true, allowListed: true })
  t.match((await app.inject({ url: '/c', headers: { 'x-user': 'b' } })).json(), { allowed: true, allowListed: false, buckets: [{ tokens: 0 }] })
  await app.close()
})

t.test('Lookups: odd promises never hang or escape, and waiters on a promise that never settles do not pile up', async (t) => {
  const escaped = unhandledRejections(t)
  const { logger } = logSink()
  const lookups = new Lookups(2, Fastify({ logger }).log, () => 0)
  const throwing = { then () { throw new Error('then threw') } }
  t.equal(await lookups.wait('edge.key', throwing as unknown as PromiseLike<string>), LOOKUP_FAILED, 'a then that throws')
  const immediate = { then (resolve: (value: string) => void) { resolve('now') } }
  t.equal(await lookups.wait('edge.key', immediate as unknown as PromiseLike<string>), 'now', 'a then that calls back at once')
  const nested = { then (resolve: (value: unknown) => void) { resolve(new Promise(() => {})) } }
  t.equal(await lookups.wait('edge.key', nested as unknown as PromiseLike<string>), LOOKUP_FAILED, 'a promise of a promise: no endless wait')
  const twice = { then (resolve: (value: string) => void, reject: (error: Error) => void) { resolve('first'); reject(new Error('then')) } }
  t.equal(await lookups.wait('edge.key', twice as unknown as PromiseLike<string>), 'first')
  const never = new Promise<string>(() => {})
  for (let i = 0; i < 50; i++) t.equal(await lookups.wait('edge.key', never), LOOKUP_FAILED)
  t.equal((lookups as unknown as { waiting: WeakMap<object, Set<unknown>> }).waiting.get(never)?.size, 0, 'every waiter left when it timed out')
  const proxy = new Proxy({}, { get: () => { throw new Error('no such property') } })
  const app = Fastify()
  await app.register(tollgate, { warnings: false, app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } }, identify: () => proxy as never } })
  app.get('/', async () => 'ok')
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 429], 'an identity whose properties throw: anonymous, never a 500')
  await app.close()
  t.same(escaped, [])
})

t.test("an async key is keyed by the address read before it was awaited (the client may be gone by then)", async (t) => {
  const { keyOf } = await import('../../lib/layers/client-key.js')
  const { logger } = logSink()
  const lookups = new Lookups(1000, Fastify({ logger }).log, () => 0)
  const request = { ip: '203.0.113.7', log: Fastify({ logger }).log } as unknown as Parameters<typeof keyOf>[0]
  const pending = keyOf(request, { fn: async () => later(undefined), name: 'edge.key', keyOfValue: (value) => `v:${value}`, addressKeyOf: (r) => `ip:${String(r.ip)}`, lookups })
  ;(request as unknown as { ip: string | undefined }).ip = undefined
  t.equal(await pending, 'ip:203.0.113.7')
})

t.test('a hand-made thenable whose then returns a rejecting promise: no unhandled rejection', async (t) => {
  const escaped = unhandledRejections(t)
  const app = Fastify()
  await app.register(tollgate, { warnings: false, asyncTimeoutMs: 5, edge: { capacity: 1, refillPerSecond: 0, key: () => ({ then: async () => { throw new Error('then rejected') } }) } })
  app.get('/', async () => 'ok')
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 429], 'keyed by the client IP')
  await later(undefined)
  t.same(escaped, [])
  await app.close()
})
