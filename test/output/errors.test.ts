import t from 'tap'
import Fastify from 'fastify'
import { readFileSync } from 'node:fs'
import tollgate, {
  InvalidCostError, InvalidOptionError, InvalidRouteConfigError, OverloadedError, PenalizedError, RateLimitedError, StoreUnavailableError, type LimitDecision, type Store
} from '../../lib/index.js'
import { buildApp, logSink } from '../helpers.js'
import { QuietRefusals } from '../recipes/quiet-refusals.js'
import { rateLimitErrors } from '../recipes/rate-limit-errors.js'

/** A refusal of the edge layer, `retryAfterMs` from now. */
function refusal (retryAfterMs: number): LimitDecision {
  return { layer: 'edge', allowed: false, cost: 1, retryAfterMs, buckets: [{ name: 'edge', key: '{ip:192.0.2.1}:edge', capacity: 1, refillPerSecond: 1, tokens: 0 }] }
}

t.test('every error code, its status and message', async (t) => {
  const cases = [
    [new RateLimitedError(refusal(2001)), 'TOLLGATE_RATE_LIMITED', 429, 'Rate limit exceeded, retry in 3 seconds'],
    [new RateLimitedError(refusal(1000)), 'TOLLGATE_RATE_LIMITED', 429, 'Rate limit exceeded, retry in 1 second'],
    [new RateLimitedError(refusal(Infinity)), 'TOLLGATE_RATE_LIMITED', 429, 'Rate limit exceeded: this quota does not refill'],
    [new RateLimitedError({ ...refusal(Infinity), cost: 2 }), 'TOLLGATE_RATE_LIMITED', 429, 'Rate limit exceeded: this request costs more than the quota holds'],
    [new PenalizedError({ ...refusal(300_000), penalty: { state: 'started', seconds: 300 } }), 'TOLLGATE_PENALIZED', 403, 'Refused for 300 seconds: too many requests after being limited'],
    [new InvalidOptionError('Expected `x` to be y, got `z` (string)'), 'TOLLGATE_INVALID_OPTION', 500, 'Invalid fastify-tollgate option: Expected `x` to be y, got `z` (string)'],
    [new InvalidRouteConfigError('POST /export', 'bad'), 'TOLLGATE_INVALID_ROUTE_CONFIG', 500, 'Invalid config.rateLimit on route POST /export: bad'],
    [new InvalidCostError('POST /export', 'it threw'), 'TOLLGATE_INVALID_COST', 500, 'The rate-limit cost of route POST /export is invalid: it threw'],
    [new StoreUnavailableError(), 'TOLLGATE_STORE_UNAVAILABLE', 503, 'The rate-limit store is unavailable, retry later'],
    [new OverloadedError({ ...refusal(2500), layer: 'protect' }, 503), 'TOLLGATE_OVERLOADED', 503, 'Service overloaded, retry in 3 seconds'],
    [new OverloadedError({ ...refusal(1000), layer: 'protect' }, 429), 'TOLLGATE_OVERLOADED', 429, 'Service overloaded, retry in 1 second'],
    [new OverloadedError({ ...refusal(Infinity), layer: 'protect' }, 503), 'TOLLGATE_OVERLOADED', 503, 'Service overloaded, retry in 1 second']
  ] as const
  for (const [error, code, statusCode, message] of cases) {
    t.equal(error.code, code)
    t.equal(error.statusCode, statusCode)
    t.equal(error.message, message)
    t.ok(error instanceof Error)
  }
})

t.test('an OverloadedError carries its decision and Retry-After, and is no RateLimitedError', async (t) => {
  const error = new OverloadedError({ ...refusal(4200), layer: 'protect' }, 503)
  t.equal(error.retryAfterSeconds, 5)
  t.equal(error.decision.layer, 'protect')
  t.notOk((error as unknown) instanceof RateLimitedError)
})

t.test('a PenalizedError is a RateLimitedError; a RateLimitedError is no PenalizedError', async (t) => {
  const penalized = new PenalizedError({ ...refusal(5000), penalty: { state: 'in force', seconds: 60 } })
  t.ok(penalized instanceof RateLimitedError)
  t.ok(penalized instanceof PenalizedError)
  t.notOk(new RateLimitedError(refusal(5000)) instanceof PenalizedError)
  t.notOk(new Error('x') instanceof PenalizedError)
  t.equal(penalized.retryAfterSeconds, 5)
  t.equal(new PenalizedError(refusal(1000)).message, 'Refused for 1 second: too many requests after being limited')
  t.equal(new PenalizedError(refusal(Infinity)).message, 'Refused: too many requests after being limited')
})

t.test('a refusal is built without a stack trace', async (t) => {
  t.equal(Object.hasOwn(new RateLimitedError(refusal(1000)), 'stack'), false)
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

t.test('a refusal carries the decision and the Retry-After it sent', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 2, refillPerSecond: 0.5 } })
  const errors: unknown[] = []
  app.setErrorHandler((error, _request, reply) => { errors.push(error); return reply.send(error) })
  app.get('/', async () => 'ok')
  await app.inject('/')
  await app.inject('/')
  const refused = await app.inject('/')
  const [error] = errors
  if (!(error instanceof RateLimitedError)) throw new Error('expected a RateLimitedError')
  t.equal(error.retryAfterSeconds, 2)
  t.equal(refused.headers['retry-after'], '2', 'the header sent')
  t.same(error.decision, {
    layer: 'edge',
    allowed: false,
    cost: 1,
    retryAfterMs: 2000,
    buckets: [{ name: 'edge', key: '{ip:127.0.0.1}:edge', capacity: 2, refillPerSecond: 0.5, tokens: 0 }]
  })
  await app.close()
})

t.test('a quota that never refills: no Retry-After, and the message reads right', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', async () => 'ok')
  await app.inject('/')
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], undefined)
  t.equal(refused.json().message, 'Rate limit exceeded: this quota does not refill')
  await app.close()
})

const page = (name: string): string => readFileSync(new URL(`../../../docs/${name}`, import.meta.url), 'utf8')
const recipe = (name: string): string => readFileSync(new URL(`../../../test/recipes/${name}`, import.meta.url), 'utf8').trim()

t.test('the errors page recipe: a setErrorHandler that shapes the 429 body from the error', async (t) => {
  t.ok(page('errors.md').includes(recipe('rate-limit-errors.ts')), 'docs/errors.md shows test/recipes/rate-limit-errors.ts as it is (compiled under strict by build:test)')
  for (const [refillPerSecond, retryAfterSeconds] of [[1, 1], [0, null]] as const) {
    const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond } })
    rateLimitErrors(app)
    app.get('/', async () => 'ok')
    app.get('/broken', { config: { rateLimit: false } }, async () => { throw new Error('boom') })
    await app.inject('/')
    const refused = await app.inject('/')
    t.equal(refused.statusCode, 429)
    t.same(refused.json(), { error: 'rate_limited', message: new RateLimitedError(refusal(retryAfterSeconds === null ? Infinity : 1000)).message, retryAfterSeconds, layer: 'edge' })
    t.equal(refused.headers['ratelimit'], refillPerSecond > 0 ? '"edge";r=0;t=1' : '"edge";r=0', 'the headers stay')
    const broken = await app.inject('/broken')
    t.same([broken.statusCode, broken.json().message], [500, 'boom'], "other errors reach Fastify's handler")
    await app.close()
  }
})

t.test("refusals and Fastify's logs: none from Fastify for a refusal answered from the hook; on Fastify's error path its default handler logs each at info, and the recipes quiet it", async (t) => {
  // An onError hook (an error reporter's) keeps refusals on Fastify's error path (lib/layers/prepared.ts).
  const refusalLines = async (setup: 'answered' | 'errorPath' | 'setErrorHandler' | 'logController') => {
    const { lines, logger } = logSink()
    const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 1 } }, setup === 'logController' ? { logger, logController: new QuietRefusals() } : { logger })
    if (setup === 'setErrorHandler') rateLimitErrors(app)
    if (setup === 'errorPath' || setup === 'logController') app.addHook('onError', (_request, _reply, _error, done) => { done() })
    app.get('/', async () => 'ok')
    for (let i = 0; i < 4; i++) await app.inject('/')
    await app.close()
    const about = lines.filter((line) => (line.err as { code?: string } | undefined)?.code === 'TOLLGATE_RATE_LIMITED' || line.msg === 'rate limited')
    return about.map((line) => line.level)
  }
  t.same(await refusalLines('answered'), [], 'answered from the hook: no line from Fastify')
  t.same(await refusalLines('errorPath'), [30, 30, 30], "Fastify's default handler: one info line per refusal, with the error")
  t.same(await refusalLines('setErrorHandler'), [20, 20, 20], 'the setErrorHandler recipe: debug')
  t.same(await refusalLines('logController'), [20, 20, 20], 'the LogController recipe: debug')
  t.ok(page('observability.md').includes(recipe('quiet-refusals.ts')), 'docs/observability.md shows test/recipes/quiet-refusals.ts as it is')
})

t.test('a request capacity protection sheds, through the recipes: the shaped body, and debug in place of Fastify\'s error line', async (t) => {
  const shedOne = async (setup: 'errorPath' | 'setErrorHandler' | 'logController') => {
    const { lines, logger } = logSink()
    // A limit of 1: the single tier's share (1/2) admits one request in flight, and sheds the next.
    const protect = { gauge: { read: () => 0, target: 1 }, minConcurrency: 1, maxConcurrency: 1 }
    const { app } = await buildApp({ app: { tiers: { default: { capacity: 100, refillPerSecond: 0 } } }, protect }, setup === 'logController' ? { logger, logController: new QuietRefusals() } : { logger })
    if (setup === 'setErrorHandler') rateLimitErrors(app)
    let entered = false
    let release: () => void = () => {}
    const held = new Promise<void>((resolve) => { release = resolve })
    app.get('/', async () => { entered = true; await held; return 'ok' })
    const first = app.inject('/')
    while (!entered) await new Promise((resolve) => setImmediate(resolve))
    const shed = await app.inject('/')
    release()
    await first
    await app.close()
    const levels = lines.filter((line) => (line.err as { code?: string } | undefined)?.code === 'TOLLGATE_OVERLOADED' || line.msg === 'rate limited').map((line) => line.level)
    return { shed, levels }
  }
  const plain = await shedOne('errorPath')
  t.equal(plain.shed.statusCode, 503)
  t.same(plain.levels, [50], "Fastify's default handler: an error line for the shed's 503")
  const shaped = await shedOne('setErrorHandler')
  const body = shaped.shed.json<{ message: string }>()
  t.same(body, { error: 'overloaded', message: body.message, retryAfterSeconds: Number(shaped.shed.headers['retry-after']), layer: 'protect' })
  t.match(body.message, /overloaded/i)
  t.same(shaped.levels, [20], 'the setErrorHandler recipe: debug')
  t.same((await shedOne('logController')).levels, [20], 'the LogController recipe: debug')
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
