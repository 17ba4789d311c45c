// A refusal answered from the hook (lib/layers/prepared.ts) against the same refusal
// through Fastify's error path, as every refusal went before: the bytes on the wire,
// status line, headers in order and body, must be the same. The reference app is the
// same app with an `onError` hook that does nothing, which sends its refusals down
// Fastify's path (its default error handler, which logs each one at info: how the
// tests tell the two paths apart).
import { connect } from 'node:net'
import type { AddressInfo } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import t, { type Test } from 'tap'
import tollgate, { memoryStore, type TollgateOptions } from '../../lib/index.js'
import { logSink, manualClock } from '../helpers.js'

/** A request as raw text: `GET /` unless told. */
interface RawRequest { method?: string, path?: string, headers?: string }

/** The response to `request` as bytes on the wire (the connection closed after it), its `Date` line masked. */
async function rawResponse (app: FastifyInstance, { method = 'GET', path = '/', headers = '' }: RawRequest = {}): Promise<string> {
  const { port } = app.server.address() as AddressInfo
  const socket = connect(port, '127.0.0.1')
  socket.write(`${method} ${path} HTTP/1.1\r\nHost: localhost\r\n${headers}Connection: close\r\n\r\n`)
  const chunks: Buffer[] = []
  for await (const chunk of socket) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('latin1').replace(/^Date: .*$/m, 'Date: (masked)')
}

/** One app of a comparison: its log lines, and the refusals its default error handler logged. */
interface Built { app: FastifyInstance, errorLogs: () => number }

/** What both apps of a comparison have: the plugin's options, and what is declared before and after it. */
interface Setup {
  options: Omit<TollgateOptions, 'store'>
  before?: (app: FastifyInstance) => void
  routes?: (app: FastifyInstance) => void
}

const plainRoute = (app: FastifyInstance): void => { app.get('/', async () => ({ hello: 'world' })) }

/** The app of `setup`, listening; `extra` is declared first (the reference's `onError` hook). */
async function build (t: Test, setup: Setup, extra: (app: FastifyInstance) => void = () => {}): Promise<Built> {
  const { lines, logger } = logSink()
  const app = Fastify({ logger })
  extra(app)
  setup.before?.(app)
  await app.register(tollgate, { ...setup.options, store: memoryStore({ clock: manualClock(0).now }) })
  ;(setup.routes ?? plainRoute)(app)
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => app.close())
  // Fastify's default error handler logs each error it answers, at info, with the error.
  const errorLogs = (): number => lines.filter((line) => line.level === 30 && typeof line.err === 'object' && /^(Rate limit exceeded|Refused)/.test(line.msg)).length
  return { app, errorLogs }
}

const throughFastify = (app: FastifyInstance): void => {
  app.addHook('onError', (_request, _reply, _error, done) => { done() })
}

/** Sends `requests` to the app of `setup` and to its reference; each response must match byte for byte. Returns the prepared app's responses. */
async function compare (t: Test, setup: Setup, requests: RawRequest[]): Promise<string[]> {
  const prepared = await build(t, setup)
  const reference = await build(t, setup, throughFastify)
  const answers: string[] = []
  for (const request of requests) {
    const answer = await rawResponse(prepared.app, request)
    t.equal(answer, await rawResponse(reference.app, request), `${request.method ?? 'GET'} ${request.path ?? '/'}: the same bytes`)
    answers.push(answer)
  }
  const refused = answers.filter((answer) => /^HTTP\/1\.1 4(29|03)/.test(answer)).length
  t.ok(refused > 0, 'some were refused')
  t.equal(reference.errorLogs(), refused, 'the reference answered each refusal through the default error handler')
  t.equal(prepared.errorLogs(), 0, 'the prepared app answered them from its hook')
  return answers
}

const get = (count: number, request: RawRequest = {}): RawRequest[] => Array.from({ length: count }, () => request)

t.test('a 429 at the edge: the same status line, headers in order and body as through the default error handler', async (t) => {
  const [, refused] = await compare(t, { options: { edge: { capacity: 1, refillPerSecond: 1 } } }, get(3))
  t.match(refused, /^HTTP\/1\.1 429 Too Many Requests\r\nratelimit-policy: "edge";q=1;w=1\r\nratelimit: "edge";r=0;t=1\r\nretry-after: 1\r\ncache-control: no-store\r\ncontent-type: application\/json; charset=utf-8\r\ncontent-length: 128\r\nDate: \(masked\)\r\nConnection: close\r\n\r\n\{"statusCode":429,"code":"TOLLGATE_RATE_LIMITED","error":"Too Many Requests","message":"Rate limit exceeded, retry in 1 second"\}$/)
})

t.test('a 429 of the app layer in preHandler, a route quota with it, and one of a route that never refills', async (t) => {
  await compare(t, {
    options: { app: { tiers: { default: { capacity: 3, refillPerSecond: 1 } }, identify: () => ({ id: 'u1' }) } },
    routes: (app) => {
      app.get('/', async () => 'ok')
      app.get('/quota', { config: { rateLimit: { quota: { default: { capacity: 1, refillPerSecond: 0 } } } } }, async () => 'ok')
    }
  }, [...get(2, { path: '/quota' }), ...get(3)])
})

t.test('a 403 penalty refusal, and the 429 that starts it', async (t) => {
  const answers = await compare(t, {
    options: { edge: { capacity: 1, refillPerSecond: 1, penalty: { after: 2, withinSeconds: 60, seconds: 30, status: 403 } } }
  }, get(5))
  t.ok(answers.some((answer) => answer.startsWith('HTTP/1.1 403 Forbidden')), 'a 403')
  t.ok(answers.some((answer) => answer.includes('"code":"TOLLGATE_PENALIZED"')))
})

t.test('a 404 at the edge, and a limiter in onRequest and in the not-found handler', async (t) => {
  await compare(t, {
    options: { edge: { capacity: 2, refillPerSecond: 1 } },
    routes: (app) => {
      const otp = app.tollgate.limiter({ name: 'otp', capacity: 1, refillPerSecond: 1 })
      app.get('/', async () => 'ok')
      app.post('/otp', { onRequest: otp }, async () => 'sent')
      app.setNotFoundHandler({ preHandler: app.tollgate.limiter({ name: 'missing', capacity: 1, refillPerSecond: 1 }) }, async (_request, reply) => reply.code(404).send({ missing: true }))
    }
  }, [{ method: 'POST', path: '/otp' }, { method: 'POST', path: '/otp' }, { path: '/nowhere' }, { path: '/nowhere' }])
})

t.test('what an earlier hook set: a content type and length (moved last), a header the refusal sets (kept in its place), a serializer (unused)', async (t) => {
  const [, refused] = await compare(t, {
    options: { edge: { capacity: 1, refillPerSecond: 1 } },
    before: (app) => {
      app.addHook('onRequest', (_request, reply, done) => {
        reply.type('text/html').header('content-length', '3').header('cache-control', 'private').header('x-early', 'yes')
        reply.serializer(() => 'not the error')
        reply.raw.setHeader('x-raw', 'set on the raw response')
        done()
      })
    }
  }, get(2))
  t.match(refused, /\r\nx-raw: set on the raw response\r\ncache-control: no-store\r\nx-early: yes\r\nratelimit-policy: .*\r\nratelimit: .*\r\nretry-after: 1\r\ncontent-type: application\/json; charset=utf-8\r\ncontent-length: 128\r\n/)
})

t.test('a reply with trailers takes Fastify\'s path (it would send them)', async (t) => {
  const setup: Setup = {
    options: { edge: { capacity: 1, refillPerSecond: 1 } },
    before: (app) => { app.addHook('onRequest', (_request, reply, done) => { reply.trailer('x-checksum', async () => 'abc'); done() }) }
  }
  const prepared = await build(t, setup)
  const reference = await build(t, setup, throughFastify)
  for (let i = 0; i < 2; i++) t.equal(await rawResponse(prepared.app), await rawResponse(reference.app))
  t.equal(prepared.errorLogs(), 1, 'through the default error handler')
})

t.test('a refusal Node will not write (the response sent already, or an invalid header set earlier) goes to Fastify\'s path: no crash, the same answer as before', async (t) => {
  // Decided after an await (an async key, an async identify), a throw from writing would be uncaught.
  const setup: Setup = {
    options: {
      edge: { capacity: 1, refillPerSecond: 1, key: async () => 'one client' },
      app: { tiers: { default: { capacity: 1, refillPerSecond: 1 } }, identify: async () => ({ id: 'u1' }) }
    },
    before: (app) => {
      app.addHook('onRequest', async (request, reply) => {
        // Ends the response behind Fastify's back: the plugin's refusal comes after it.
        if (request.headers['x-early'] !== undefined) reply.raw.end('early')
        // Not a Latin-1 value: Node refuses to write it.
        if (request.headers['x-bad'] !== undefined) void reply.header('x-user', '日本')
        // A status message set earlier is kept when Node refuses the refusal's head.
        if (request.headers['x-reason'] !== undefined) reply.raw.statusMessage = 'Early Reason'
      })
    }
  }
  const prepared = await build(t, setup)
  const reference = await build(t, setup, throughFastify)
  for (const { app } of [prepared, reference]) t.equal((await app.inject('/')).statusCode, 200, 'the one token')
  for (const headers of [{ 'x-early': '1' }, { 'x-bad': '1' }, { 'x-bad': '1', 'x-reason': '1' }, {}]) {
    const answers = []
    for (const { app } of [prepared, reference]) {
      const response = await app.inject({ url: '/', headers })
      answers.push({ status: response.statusCode, body: response.body })
    }
    t.same(answers[0], answers[1], `${JSON.stringify(headers)}: as through Fastify's path`)
  }
  t.equal((await prepared.app.inject('/')).statusCode, 429, 'the app still answers')
})
