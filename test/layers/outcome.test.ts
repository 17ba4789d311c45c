import Fastify from 'fastify'
import t from 'tap'
import { buildApp, buildAppOn, logSink, statuses, unhandledRejections } from '../helpers.js'
import { endOnThrow } from '../../lib/layers/promises.js'
import tollgate, { StoreUnavailableError, memoryStore, type LimitDecision, type Store, type StoreDecision, type TollgateOptions } from '../../lib/index.js'

t.test('shadow mode decides, counts, sets headers and logs would-be refusals, but never refuses', async (t) => {
  const { lines, logger } = logSink()
  const seen: LimitDecision[] = []
  const { app } = await buildApp({ edge: { capacity: 2, refillPerSecond: 1 }, shadow: true, onLimit: (_request, decision) => { seen.push(decision) } }, { logger })
  app.get('/', async () => 'ok')
  t.same(await statuses(app, 4), [200, 200, 200, 200])
  const response = await app.inject('/')
  t.equal(response.headers['ratelimit'], '"edge";r=0;t=2', 'counted: the bucket is empty')
  t.equal(response.headers['retry-after'], undefined)
  t.equal(seen.length, 3, 'onLimit saw every would-be refusal')
  const shadowLines = lines.filter((line) => line.msg.includes('shadow'))
  t.equal(shadowLines.length, 3)
  t.equal(shadowLines[0]?.level, 30, 'logged at info')
  t.match(shadowLines[0]?.rateLimit, { layer: 'edge', allowed: false, cost: 1, retryAfterMs: 1000 })
  await app.close()
})

t.test('onLimit gets the decision of each refusal; refusals are logged at debug', async (t) => {
  const { lines, logger } = logSink()
  const seen: LimitDecision[] = []
  const { app } = await buildApp({
    app: { tiers: { default: { capacity: 20, refillPerSecond: 5 }, vip: { capacity: 40, refillPerSecond: 5 } } },
    onLimit: (_request, decision) => { seen.push(decision) }
  }, { logger })
  app.post('/export', { config: { rateLimit: { cost: 10, quota: { default: { capacity: 5, refillPerSecond: 1 } } } } }, async () => 'ok')
  await app.ready()
  const headers = { authorization: `Bearer ${app.jwt.sign({ sub: 'alice', tier: 'vip' })}` }
  for (let i = 0; i < 5; i++) await app.inject({ method: 'POST', url: '/export', headers })
  t.equal(seen.length, 1)
  t.same(seen[0], {
    layer: 'app',
    allowed: false,
    tier: 'vip',
    cost: 10,
    retryAfterMs: 2000,
    buckets: [
      { name: 'app', key: '{user:alice}:app', capacity: 40, refillPerSecond: 5, tokens: 0 },
      { name: 'route', key: '{user:alice}:route:POST /export', capacity: 5, refillPerSecond: 1, tokens: 1 }
    ]
  })
  t.equal(lines.filter((line) => line.msg === 'fastify-tollgate: refused' && line.level === 20).length, 1)
  await app.close()
})

t.test('an onLimit that throws is logged and the refusal still happens', async (t) => {
  const { lines, logger } = logSink()
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 1 }, onLimit: () => { throw new Error('metrics down') } }, { logger })
  app.get('/', async () => 'ok')
  t.same(await statuses(app, 2), [200, 429])
  t.ok(lines.some((line) => line.msg.includes('onLimit threw') && line.level === 50))
  await app.close()
})

t.test('the debug line of a refusal: pino at info writes none; a logger without isLevelEnabled gets it', async (t) => {
  await t.test('pino at info: refused, no debug line', async (t) => {
    const { lines, logger } = logSink()
    const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 1 } }, { logger: { ...logger, level: 'info' } })
    app.get('/', async () => 'ok')
    t.same(await statuses(app, 2), [200, 429])
    t.equal(lines.filter((line) => line.level === 20).length, 0)
    await app.close()
  })
  await t.test('a logger without isLevelEnabled is asked to log it', async (t) => {
    const debugged: unknown[] = []
    const noop = (): void => {}
    const log = { info: noop, error: noop, warn: noop, fatal: noop, trace: noop, silent: noop, level: 'debug', debug: (record: unknown) => { debugged.push(record) }, child: () => log }
    const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 1 } }, { loggerInstance: log })
    app.get('/', async () => 'ok')
    t.same(await statuses(app, 2), [200, 429])
    t.match(debugged, [{ rateLimit: { layer: 'edge', allowed: false } }])
    await app.close()
  })
})

t.test('shadow mode never refuses, even when the store cannot decide', async (t) => {
  const { lines, logger } = logSink()
  let failure: Error = new Error('disk on fire')
  const app = Fastify({ logger })
  await app.register(tollgate, { store: { consume: () => { throw failure }, close () {} }, edge: { capacity: 5, refillPerSecond: 1 }, shadow: true })
  app.get('/', async () => 'ok')
  const thrown = await app.inject('/')
  t.equal(thrown.statusCode, 200, 'a store that throws: passed')
  t.equal(thrown.headers['retry-after'], undefined)
  t.ok(lines.some((line) => line.level === 50 && /store failed; request passed \(shadow mode\)/.test(line.msg)), 'and logged as an error')
  failure = new StoreUnavailableError()
  t.equal((await app.inject('/')).statusCode, 200, "a store refusing by failMode 'closed': passed")
  t.ok(lines.some((line) => line.level === 20 && /store unavailable; request passed \(shadow mode\)/.test(line.msg)))
  await app.close()
})

t.test('a throw while finishing a step is a 500 through Fastify, once and logged, with a store that answers later as with one that answers at once', async (t) => {
  const escaped = unhandledRejections(t)
  // A custom store's decision without `tokens`; an onLimit that breaks the decision it is handed.
  const malformed = (): StoreDecision => ({ allowed: false, retryAfterMs: 1000 }) as unknown as StoreDecision
  const cases: Array<[string, Store, Omit<TollgateOptions, 'store'>]> = [
    ['sync malformed', { close: async () => {}, consume: malformed }, {}],
    ['async malformed', { close: async () => {}, consume: async () => malformed() }, {}],
    ['async onLimit', slowStore(memoryStore()), { onLimit: (_request, decision) => { (decision as { buckets?: unknown }).buckets = undefined } }],
    // A hand-made thenable, not a native promise.
    ['thenable malformed', { close: async () => {}, consume: () => ({ then: (ok: (d: StoreDecision) => void) => { setImmediate(() => { ok(malformed()) }) } }) as unknown as StoreDecision }, {}]
  ]
  for (const [name, store, options] of cases) {
    const { lines, logger } = logSink()
    const app = await buildAppOn(store, { edge: { capacity: 1, refillPerSecond: 0 }, ...options }, { logger })
    app.get('/', async () => 'ok')
    const codes = name === 'async onLimit' ? await statuses(app, 2) : [(await app.inject('/')).statusCode]
    t.equal(codes.at(-1), 500, `${name}: a 500`)
    t.equal(lines.filter((line) => line.level === 50 && line.msg.includes('Cannot')).length, 1, `${name}: logged once`)
    await app.close()
  }
  t.same(escaped, [], 'no unhandled rejection')
})

t.test('a step after an async key whose synchronous store answer breaks is a 500, not an unhandled rejection', async (t) => {
  const escaped = unhandledRejections(t)
  const store: Store = { close: async () => {}, consume: () => ({ allowed: false, retryAfterMs: 1000 }) as unknown as StoreDecision }
  const app = await buildAppOn(store, { edge: { capacity: 1, refillPerSecond: 0, key: async () => 'k' } })
  app.get('/', async () => 'ok')
  t.equal((await app.inject('/')).statusCode, 500)
  t.same(escaped, [])
  await app.close()
})

/** `store`, answering each consume a tick later. */
function slowStore (store: Store): Store {
  return { close: async () => store.close(), consume: async (buckets) => store.consume(buckets) }
}

t.test('endOnThrow calls done once: a throw after done is only logged', async (t) => {
  const calls: unknown[] = []
  const logged: unknown[] = []
  const end = { request: { log: { error: (object: object) => { logged.push(object) } } }, done: (error?: Error) => { calls.push(error) } }
  endOnThrow(end, () => { end.done(); throw new Error('late') })
  t.same(calls, [undefined])
  t.equal(logged.length, 1)
  const other = { ...end, done: (error?: Error) => { calls.push(error?.message) } }
  endOnThrow(other, () => { throw new Error('early') })
  t.same(calls, [undefined, 'early'])
  const twice = { ...end, done: (error?: Error) => { calls.push(error?.message ?? 'done') } }
  endOnThrow(twice, () => { twice.done(); twice.done() })
  t.same(calls.slice(2), ['done'], 'a second done is ignored')
  const odd = { ...end, done: (error?: Error) => { calls.push(error) } }
  // eslint-disable-next-line @typescript-eslint/only-throw-error
  endOnThrow(odd, () => { throw 'a string' })
  const thrown = calls[3] as Error
  t.ok(thrown instanceof Error)
  t.equal(thrown.message, 'fastify-tollgate: a rate-limit step threw a string')
  t.equal(thrown.cause, 'a string')
})
