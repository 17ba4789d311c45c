// What keeps a refusal on Fastify's error path (lib/layers/prepared.ts): an error
// handler of the app's anywhere above the route, an onError or onSend hook, a
// response schema, subscribers to Fastify's handler tracing. Each shapes or sees the
// refusal as before; a route context without them is answered from the hook.
import { tracingChannel } from 'node:diagnostics_channel'
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import t from 'tap'
import tollgate, { memoryStore, RateLimitedError, type LimitDecision, type TollgateOptions } from '../../lib/index.js'
import { fastifyInternals, refusalAnswerer } from '../../lib/layers/prepared.js'
import { LIMITED, outcomeOf } from '../../lib/layers/outcome.js'
import { logSink, manualClock } from '../helpers.js'

const EDGE: Omit<TollgateOptions, 'store'> = { edge: { capacity: 1, refillPerSecond: 1 } }

/** An app with the plugin (`options`, the edge of 1 by default) on a memory store at a still clock, and a log to read. */
async function appWith (setup: (app: FastifyInstance) => void | Promise<void>, options = EDGE): Promise<{ app: FastifyInstance, errorLogs: () => number }> {
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  await app.register(tollgate, { ...options, store: memoryStore({ clock: manualClock(0).now }) })
  await setup(app)
  await app.ready()
  // Fastify's default error handler logs each error it answers at info, with the error.
  return { app, errorLogs: () => lines.filter((line) => line.level === 30 && typeof line.err === 'object' && /^Rate limit exceeded/.test(line.msg)).length }
}

/** An error handler of the app's: its own body, with the error's code. */
const shaped = (label: string) => (error: Error & { statusCode?: number, code?: string }, _request: FastifyRequest, reply: FastifyReply): void => {
  void reply.code(error.statusCode ?? 500).send({ shapedBy: label, code: error.code, isRefusal: error instanceof RateLimitedError })
}

const hello = async (): Promise<string> => 'hello'

t.test('an error handler of the app\'s, wherever it is set above the route, shapes the refusal\'s body as before', async (t) => {
  const { app } = await appWith(async (app) => {
    app.setErrorHandler(shaped('root'))
    app.get('/root', hello)
    await app.register(async (child) => {
      child.setErrorHandler(shaped('child'))
      child.get('/child', hello)
      await child.register(async (grandchild) => { grandchild.get('/grandchild', hello) })
    })
    app.get('/route', { errorHandler: shaped('route') }, hello)
  })
  const cases: Array<[string, string]> = [['/root', 'root'], ['/child', 'child'], ['/grandchild', 'child'], ['/route', 'route']]
  // One edge bucket for the client, of 1: the first request passes, every later one is refused.
  t.equal((await app.inject('/root')).statusCode, 200)
  for (const [path, label] of cases) {
    const refused = await app.inject(path)
    t.equal(refused.statusCode, 429, path)
    t.same(refused.json(), { shapedBy: label, code: 'TOLLGATE_RATE_LIMITED', isRefusal: true }, `${path}: the handler's body`)
    t.equal(refused.headers['retry-after'], '1')
    t.equal(refused.headers['cache-control'], 'no-store')
    t.equal(refused.headers['ratelimit'], '"edge";r=0;t=1')
  }
  await app.close()
})

t.test('an error handler set after the plugin, in its context, shapes it too', async (t) => {
  const { app } = await appWith((app) => {
    app.get('/', hello)
    app.setErrorHandler(shaped('late'))
  })
  await app.inject('/')
  t.same((await app.inject('/')).json(), { shapedBy: 'late', code: 'TOLLGATE_RATE_LIMITED', isRefusal: true })
  await app.close()
})

t.test('an error handler in a sibling context does not reach the route: answered from the hook', async (t) => {
  const { app, errorLogs } = await appWith(async (app) => {
    app.get('/', hello)
    await app.register(async (sibling) => { sibling.setErrorHandler(shaped('sibling')); sibling.get('/sibling', hello) })
  })
  await app.inject('/')
  const refused = await app.inject('/')
  t.equal(refused.json<{ code: string }>().code, 'TOLLGATE_RATE_LIMITED')
  t.equal(errorLogs(), 0, 'not through the default error handler')
  await app.close()
})

t.test('an onError hook sees the refusal, and the default error handler answers it', async (t) => {
  const seen: unknown[] = []
  const { app, errorLogs } = await appWith((app) => {
    app.addHook('onError', (_request, _reply, error, done) => { seen.push(error); done() })
    app.get('/', hello)
  })
  await app.inject('/')
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(seen.length, 1)
  t.ok(seen[0] instanceof RateLimitedError, 'the hook got the RateLimitedError')
  t.equal(errorLogs(), 1)
  await app.close()
})

t.test('an onSend hook, the app\'s or the route\'s, gets the error\'s body as text and may change it', async (t) => {
  const payloads: unknown[] = []
  const { app } = await appWith(async (app) => {
    await app.register(async (child) => {
      child.addHook('onSend', async (_request, _reply, payload) => { payloads.push(payload); return payload })
      child.get('/app', hello)
    })
    app.get('/route', { onSend: async (_request, _reply, payload) => String(payload).replace('Too Many Requests', 'Slow down') }, hello)
    app.get('/plain', hello)
  })
  await app.inject('/app')
  const viaApp = await app.inject('/app')
  t.equal(typeof payloads[1], 'string')
  t.equal(payloads[1], viaApp.body, 'the hook saw the body sent')
  t.match(viaApp.body, /"code":"TOLLGATE_RATE_LIMITED"/)
  await app.inject('/route')
  t.match((await app.inject('/route')).body, /"error":"Slow down"/, 'the route\'s hook changed it')
  // Decided per route context, and kept: a route without hooks, between the others, is answered from the hook.
  for (const path of ['/plain', '/app', '/plain', '/route']) {
    const body = (await app.inject(path)).body
    t.equal(body.includes('Slow down'), path === '/route', path)
  }
  t.equal(payloads.length, 3, 'only /app\'s requests went through its hook')
  await app.close()
})

t.test('a response schema for the refusal\'s status shapes its body, as before', async (t) => {
  const { app } = await appWith((app) => {
    const response = { '4xx': { type: 'object', properties: { code: { type: 'string' } } } }
    app.get('/', { schema: { response } }, hello)
  })
  await app.inject('/')
  t.same((await app.inject('/')).json(), { code: 'TOLLGATE_RATE_LIMITED' })
  await app.close()
})

t.test('with subscribers to Fastify\'s handler tracing, an app-layer refusal in preHandler is published there as before', async (t) => {
  const { app, errorLogs } = await appWith((app) => { app.get('/', hello) }, { app: { tiers: { default: { capacity: 1, refillPerSecond: 1 } }, identify: () => ({ id: 'u1' }) } })
  const trace = tracingChannel('fastify.request.handler')
  const errors: unknown[] = []
  const handlers = { start () {}, end () {}, asyncStart () {}, asyncEnd () {}, error (message: unknown) { errors.push((message as { error: unknown }).error) } }
  trace.subscribe(handlers)
  t.teardown(() => { trace.unsubscribe(handlers) })
  t.equal((await app.inject('/')).statusCode, 200)
  t.equal((await app.inject('/')).statusCode, 429)
  t.equal(errors.length, 1)
  t.ok(errors[0] instanceof RateLimitedError, 'the error event has the refusal')
  t.equal(errorLogs(), 1, 'answered by the default error handler')
  trace.unsubscribe(handlers)
  t.equal((await app.inject('/')).statusCode, 429)
  t.equal(errors.length, 1, 'without subscribers: answered from the hook, nothing published')
  t.equal(errorLogs(), 1)
  await app.close()
})

t.test('Fastify\'s internals are looked up once, at registration; without them every refusal goes to Fastify', async (t) => {
  const app = Fastify()
  const internals = fastifyInternals(app)
  t.ok(internals !== undefined, 'found in this Fastify')
  app.setErrorHandler(shaped('root'))
  t.equal(fastifyInternals(app)?.defaultErrorHandler, internals?.defaultErrorHandler, 'the default handler, under the one set')
  t.equal(fastifyInternals({}), undefined, 'an object without them')
  const named = (description: string): symbol => Symbol(description)
  const throwing = { [named('fastify.errorHandler')]: {}, [named('fastify.Reply')]: function Reply () { throw new Error('not this way') } }
  t.equal(fastifyInternals(throwing), undefined, 'a reply that cannot be made')
  const withoutTrailers = { [named('fastify.errorHandler')]: {}, [named('fastify.Reply')]: function Reply (this: Record<symbol, unknown>) { this[named('fastify.reply.headers')] = {} } }
  t.equal(fastifyInternals(withoutTrailers), undefined, 'a reply without the fields')
  await app.close()
})

t.test('an outcome without Fastify\'s internals sends each refusal through Fastify\'s error path, with the same response', async (t) => {
  const unprepared = outcomeOf(false, refusalAnswerer({}))
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  const limit = (retryAfterMs: number): LimitDecision => ({ layer: 'edge', allowed: false, cost: 1, retryAfterMs, buckets: [] })
  app.get('/', { onRequest: (request, reply, done) => { unprepared.refused({ request, reply, done }, limit(2500), LIMITED) } }, hello)
  app.get('/never', { onRequest: (request, reply, done) => { unprepared.refused({ request, reply, done }, limit(Infinity), LIMITED) } }, hello)
  const refused = await app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '3')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.same(refused.json(), { statusCode: 429, code: 'TOLLGATE_RATE_LIMITED', error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 3 seconds' })
  t.ok(lines.some((line) => line.level === 30 && line.msg === 'Rate limit exceeded, retry in 3 seconds'), 'through the default error handler')
  const never = await app.inject('/never')
  t.equal(never.headers['retry-after'], undefined, 'no Retry-After for a quota that does not refill')
  t.equal(never.headers['cache-control'], 'no-store')
  t.equal(never.json<{ message: string }>().message, 'Rate limit exceeded: this quota does not refill')
  await app.close()
})
