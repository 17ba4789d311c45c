/**
 * Capacity protection: when an admitted request's work is over (layers/protection.ts).
 * A request counts in flight until its reply is sent, or, when its client went away
 * first, until its handler ends (the plugin wraps the handlers of the routes it
 * sees); a hijacked reply counts in flight until its connection closes, in the
 * latency signal only until its handler returns. Time is the memory store's manual clock.
 */
import { test } from 'tap'
import Fastify from 'fastify'
import { request as httpRequest, type ClientRequest } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import tollgate, { memoryStore } from '../../lib/index.js'
import { protections, type ProtectionState } from '../../lib/output/protection-state.js'
import { ABANDONED_MAX_MS } from '../../lib/layers/protection.js'
import { manualClock } from '../helpers.js'
import { as, gate, hold, protectedApp, TIERS, type Protected } from './protect-app.js'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** Sends `method path` to `port` and drops the connection once `entered()` reached `count`. */
async function abandon (port: number, method: string, path: string, entered: () => number, count: number): Promise<void> {
  const gone = httpRequest({ port, host: '127.0.0.1', path, method })
  gone.on('error', () => {})
  gone.end()
  while (entered() < count) await sleep(5)
  gone.destroy()
  await sleep(50)
}

async function listening (p: Pick<Protected, 'app'>): Promise<number> {
  await p.app.listen({ port: 0, host: '127.0.0.1' })
  return (p.app.server.address() as { port: number }).port
}

async function until (state: () => ProtectionState, inFlight: number): Promise<void> {
  for (let i = 0; i < 200 && state().inFlight !== inFlight; i++) await sleep(5)
}

test('a request that fails, and one whose client goes away, leave the count when their handlers end', async (t) => {
  const p = await protectedApp(t)
  const failed = await hold(p, 2, 'anonymous', '/fail')
  await abandon(await listening(p), 'GET', '/', p.held.entered, 3)
  t.equal(p.state().inFlight, 3, 'an abandoned request stays in flight while its handler works')
  p.held.release()
  for (const response of await Promise.all(failed)) t.equal(response.statusCode, 500)
  await until(p.state, 0)
  t.equal(p.state().inFlight, 0, 'and leaves when it ends')
})

test('a hijacked reply leaves the count when its response finishes', async (t) => {
  const p = await protectedApp(t, {}, {}, undefined, (app) => {
    app.get('/hijack', async (_request, reply) => { reply.hijack(); reply.raw.end('raw') })
  })
  const response = await p.app.inject('/hijack')
  t.equal(response.body, 'raw')
  await until(p.state, 0)
  t.equal(p.state().inFlight, 0)
})

test('a hijacked reply that ends when its client leaves (server-sent events) leaves the count', async (t) => {
  const p = await protectedApp(t, {}, {}, undefined, (app) => {
    app.get('/events', async (request, reply) => {
      reply.hijack()
      reply.raw.writeHead(200, { 'content-type': 'text/event-stream' })
      reply.raw.write('data: hello\n\n')
      request.raw.on('close', () => { reply.raw.end() })
    })
  })
  const port = await listening(p)
  for (let i = 0; i < 3; i++) {
    await new Promise<void>((resolve) => {
      const events = httpRequest({ port, host: '127.0.0.1', path: '/events' }, (response) => {
        response.once('data', () => { events.destroy(); resolve() })
      })
      events.on('error', () => {})
      events.end()
    })
  }
  await until(p.state, 0)
  t.equal(p.state().inFlight, 0)
})

test('a request whose client went away, its async handler returning nothing (no reply is sent then), leaves when its handler ends', async (t) => {
  const p = await protectedApp(t, {}, {}, undefined, (app, held) => {
    app.post('/no-reply', async (_request, reply) => { await held.wait(); reply.code(204) })
  })
  const port = await listening(p)
  await abandon(port, 'POST', '/no-reply', p.held.entered, 1)
  t.equal(p.state().inFlight, 1, 'in flight while its handler works')
  p.held.release()
  await until(p.state, 0)
  t.equal(p.state().inFlight, 0, 'and out when it returned, though no reply was ever sent')
})

test('a client that went away after its admission, before its handler ran (a slow preHandler): the request leaves when the handler ends', async (t) => {
  let handled = 0
  // The app layer at preValidation: the route's preHandler runs after the admission (as a slow store's answer would).
  const p = await protectedApp(t, {}, { app: { tiers: TIERS, hook: 'preValidation' } }, undefined, (app, held) => {
    app.post('/slow-before', { preHandler: async () => { await held.wait() } }, async (_request, reply) => { handled++; reply.code(204) })
  })
  const port = await listening(p)
  await abandon(port, 'POST', '/slow-before', p.held.entered, 1)
  t.equal(p.state().inFlight, 1)
  p.held.release()
  for (let i = 0; i < 200 && handled === 0; i++) await sleep(5)
  await until(p.state, 0)
  t.equal(p.state().inFlight, 0, 'out when the handler it reached ended')
})

test('a handler that returns a thenable (a query builder\'s): its then runs once, with or without a client', async (t) => {
  let runs = 0
  const p = await protectedApp(t, {}, {}, undefined, (app, held) => {
    app.post('/query', () => ({ then (resolve: (value: unknown) => void) { runs++; void held.wait().then(() => { resolve(undefined) }) } }))
  })
  const port = await listening(p)
  await abandon(port, 'POST', '/query', p.held.entered, 1)
  p.held.release()
  await until(p.state, 0)
  t.equal(p.state().inFlight, 0, 'out when it settled')
  t.equal(runs, 1, 'then called once')
  const answered = p.app.inject({ method: 'POST', url: '/query' })
  while (p.held.entered() < 2) await sleep(1)
  p.held.release()
  t.equal((await answered).statusCode, 200)
  t.equal(runs, 2, 'once more for the second request')
})

test('a client that went away before its admission (a slow hook of the context): its request leaves when its handler ends', async (t) => {
  const p = await protectedApp(t, {}, {}, undefined, (app, held) => {
    app.register(async (scope) => {
      scope.addHook('preHandler', async () => { await held.wait() })
      scope.post('/late-admission', async (_request, reply) => { await sleep(10); reply.code(204) })
    })
  })
  const port = await listening(p)
  await abandon(port, 'POST', '/late-admission', p.held.entered, 1)
  p.held.release()
  await sleep(100)
  t.equal(p.state().inFlight, 0, 'admitted after its client left, out when its handler ended')
})

test('an async handler that returns the reply and answers later (`return reply`) stays counted until it answers, though its client left', async (t) => {
  let answer: () => void = () => {}
  const p = await protectedApp(t, {}, {}, undefined, (app, held) => {
    app.get('/later', async (_request, reply) => {
      void held.wait()
      answer = () => { reply.send('late') }
      return reply
    })
  })
  const port = await listening(p)
  await abandon(port, 'GET', '/later', p.held.entered, 1)
  t.equal(p.state().inFlight, 1, 'its reply settled as the client left; the handler has not answered yet')
  answer()
  await until(p.state, 0)
  t.equal(p.state().inFlight, 0, 'out when it answered')
})

test('a handler that returns a Promise subclass with a then of its own: that then runs once', async (t) => {
  let runs = 0
  class Counted<T> extends Promise<T> {
    override then<A = T, B = never> (fulfilled?: ((value: T) => A | PromiseLike<A>) | null, rejected?: ((reason: unknown) => B | PromiseLike<B>) | null): Promise<A | B> {
      runs++
      return super.then(fulfilled, rejected)
    }
  }
  const p = await protectedApp(t, {}, {}, undefined, (app) => {
    app.get('/counted', () => new Counted<string>((resolve) => { resolve('counted') }))
  })
  const response = await p.app.inject('/counted')
  t.equal(response.body, 'counted')
  t.equal(runs, 1)
})

test('an abandoned request whose reply is sent later without onSend (a callback handler that hijacks) is swept at the next interval', async (t) => {
  const p = await protectedApp(t, {}, {}, undefined, (app, held) => {
    app.get('/late', (_request, reply) => { void held.wait().then(() => { reply.hijack(); reply.raw.end() }) })
  })
  const port = await listening(p)
  await abandon(port, 'GET', '/late', p.held.entered, 1)
  await abandon(port, 'GET', '/', p.held.entered, 2)
  p.held.release()
  await sleep(50)
  t.equal(p.state().inFlight, 1, 'the async one left when its handler ended; the callback one is still counted (no onSend ran, its connection had closed)')
  p.clock.advance(100)
  t.equal((await p.app.inject('/quick')).statusCode, 200)
  t.equal(p.state().inFlight, 0, 'swept')
})

test(`on a route declared before the plugin (its handler not watched), an abandoned request that never gets a reply counts ${ABANDONED_MAX_MS / 1000} s at most (and to the end of that interval)`, async (t) => {
  const clock = manualClock()
  const held = gate()
  const app = Fastify({ logger: false })
  app.post('/no-reply', async (_request, reply) => { await held.wait(); reply.code(204) })
  app.get('/quick', async () => 'quick')
  const before = new Set(protections())
  await app.register(tollgate, { store: memoryStore({ clock: clock.now }), app: { tiers: TIERS }, protect: { gauge: { read: () => 0, target: 2 } } })
  t.teardown(async () => { held.release(); await app.close() })
  const state = [...protections()].find((candidate) => !before.has(candidate)) as ProtectionState
  const port = await listening({ app })
  await abandon(port, 'POST', '/no-reply', held.entered, 1)
  held.release()
  await sleep(50)
  clock.set(-1000)
  state.refresh()
  t.equal(state.inFlight, 1, 'a clock that went back releases nothing: the bound starts again')
  clock.advance(ABANDONED_MAX_MS - 1)
  t.equal((await app.inject('/quick')).statusCode, 200)
  t.equal(state.inFlight, 1, `still counted ${ABANDONED_MAX_MS - 1} ms after its client left`)
  clock.advance(100)
  state.refresh()
  t.equal(state.inFlight, 0, `swept at the end of the first interval ${ABANDONED_MAX_MS} ms after`)
})

test('an open event stream stays in flight but leaves the latency signal when its handler returns: it does not pin the limit', async (t) => {
  const events = (request: FastifyRequest, reply: FastifyReply): void => {
    reply.hijack()
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream' })
    reply.raw.write('data: hello\n\n')
    request.raw.on('close', () => { reply.raw.end() })
  }
  const p = await protectedApp(t, { latencyMs: 50, minConcurrency: 4 }, {}, undefined, (app) => {
    app.get('/events', events)
    // Loads its data first, then streams: hijacked after an await.
    app.get('/events-later', async (request, reply) => { await sleep(1); events(request, reply) })
  })
  const port = await listening(p)
  const open = async (path: string): Promise<ClientRequest> => {
    const stream = httpRequest({ port, host: '127.0.0.1', path })
    stream.on('error', () => {})
    stream.end()
    await new Promise<void>((resolve) => { stream.once('response', (response) => { response.once('data', () => { resolve() }) }) })
    t.teardown(() => { stream.destroy() })
    return stream
  }
  const streams = [await open('/events'), await open('/events-later')]
  t.equal(p.state().inFlight, 2, 'the streams are in flight')
  const limits: number[] = []
  for (let i = 0; i < 10; i++) {
    p.clock.advance(1000)
    const quick = await p.app.inject(as('vip', '/quick'))
    t.equal(quick.statusCode, 200, quick.body)
    limits.push(p.state().limit)
  }
  t.ok((p.state().ratios.latency ?? 0) <= 1, `latency ratio ${String(p.state().ratios.latency)} after 10 s of an open stream`)
  t.ok(limits.every((limit) => limit >= 20), `the limit was not cut: ${limits.join(', ')}`)
  for (const stream of streams) stream.destroy()
  await until(p.state, 0)
  t.equal(p.state().inFlight, 0, 'and leaves when its connection closes')
})

test('a request the app layer leaves alone (an allow-listed client) is neither counted nor watched on a protected route', async (t) => {
  const p = await protectedApp(t, {}, { allowList: (request) => request.headers['x-trusted'] === '1' })
  const held = p.app.inject({ url: '/', headers: { 'x-trusted': '1' } })
  while (p.held.entered() < 1) await sleep(1)
  t.equal(p.state().inFlight, 0, 'in its handler, not in flight')
  p.held.release()
  t.equal((await held).statusCode, 200)
  t.equal(p.state().inFlight, 0)
})
