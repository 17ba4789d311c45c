/**
 * Capacity protection in the app layer (layers/protect.ts, protection.ts,
 * protect-signals.ts): who is shed and in what order, what a shed request gets,
 * what moves the limit, shadow mode, and that every admitted request leaves the
 * count (answered, failed or abandoned by its client). Requests are held in their
 * handler until the test releases them; time is the memory store's manual clock.
 */
import { test } from 'tap'
import { request as httpRequest } from 'node:http'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { buildApp, logSink, type TestApp } from '../helpers.js'
import tollgatePlugin, { memoryStore } from '../../lib/index.js'
import { protections, type ProtectionState } from '../../lib/output/protection-state.js'
import type { LimitDecision, TollgateOptions } from '../../lib/index.js'
import { Registry } from 'prom-client'
import { tollgateMetrics } from '../../lib/metrics.js'

const TIERS = { vip: { capacity: 100, refillPerSecond: 0 }, default: { capacity: 100, refillPerSecond: 0 }, anonymous: { capacity: 6, refillPerSecond: 0 } }

/** Handlers that wait until released; `entered`: how many reached their handler. */
function gate (): { entered: () => number, release: () => void, wait: () => Promise<void> } {
  let entered = 0
  let open: () => void = () => {}
  let opened = new Promise<void>((resolve) => { open = resolve })
  return {
    entered: () => entered,
    release: () => { open(); opened = new Promise<void>((resolve) => { open = resolve }) },
    wait: async () => { entered++; await opened }
  }
}

interface Protected extends TestApp {
  gauge: { value: number }
  held: ReturnType<typeof gate>
  state: () => ProtectionState
}

async function protectedApp (t: { teardown: (fn: () => unknown) => void }, protect: TollgateOptions['protect'] = {}, options: Partial<TollgateOptions> = {}, logger?: object, routes: (app: FastifyInstance, held: ReturnType<typeof gate>) => void = () => {}): Promise<Protected> {
  const gauge = { value: 0 }
  const held = gate()
  const before = new Set(protections())
  const built = await buildApp({ app: { tiers: TIERS }, protect: { gauge: { read: () => gauge.value, target: 2 }, ...protect }, ...options }, logger === undefined ? {} : { logger })
  const hold = async (): Promise<string> => { await held.wait(); return 'ok' }
  tiered(built.app)
  routes(built.app, held)
  built.app.get('/', hold)
  built.app.get('/quick', async () => 'quick')
  built.app.get('/quick-held', hold)
  built.app.get('/critical', { config: { rateLimit: { critical: true } } }, hold)
  built.app.get('/fail', async () => { await held.wait(); throw new Error('boom') })
  await built.app.ready()
  t.teardown(async () => { held.release(); await built.app.close() })
  const state = [...protections()].find((candidate) => !before.has(candidate)) as ProtectionState
  return { ...built, gauge, held, state: () => state }
}

const as = (tier: string, url = '/'): { url: string, headers: Record<string, string> } => ({ url, headers: { 'x-tier': tier } })

/** Sends `count` requests of `tier` that stay in their handler; resolves once all have entered it or were answered. */
async function hold (p: Protected, count: number, tier: string, url = '/'): Promise<Array<Promise<LightMyRequestResponse>>> {
  const start = p.held.entered()
  const answered: number[] = []
  const sent = Array.from({ length: count }, (_, i) => p.app.inject(as(tier, url)).then((response) => { answered.push(i); return response }))
  while (p.held.entered() + answered.length < start + count) await new Promise((resolve) => setImmediate(resolve))
  return sent
}

function tiered (app: FastifyInstance): void {
  app.addHook('onRequest', async (request) => {
    const tier = request.headers['x-tier']
    if (typeof tier === 'string' && tier !== 'anonymous') (request as unknown as { user: unknown }).user = { sub: `${tier}-user`, tier }
  })
}

test('the lowest priority is shed first, with a 503, Retry-After and TOLLGATE_OVERLOADED; higher ones and critical routes still pass', async (t) => {
  const p = await protectedApp(t)
  t.equal(p.state().limit, 20, 'the limit starts at 20: anonymous 5, default 10, vip 15, critical 20')
  const anonymous = await hold(p, 5, 'anonymous')
  const shed = await p.app.inject(as('anonymous'))
  t.equal(shed.statusCode, 503)
  t.equal(shed.json().code, 'TOLLGATE_OVERLOADED')
  t.ok(Number(shed.headers['retry-after']) >= 1, `Retry-After ${String(shed.headers['retry-after'])}`)
  t.equal(shed.headers['cache-control'], 'no-store')
  const others = await hold(p, 5, 'default')
  t.equal(p.held.entered(), 10, 'default admitted beside 5 anonymous (10 in flight)')
  t.equal((await p.app.inject(as('default'))).statusCode, 503, 'default shed at 10 in flight')
  const vip = await hold(p, 5, 'vip')
  t.equal(p.held.entered(), 15)
  t.equal((await p.app.inject(as('vip'))).statusCode, 503, 'vip shed at 15')
  const critical = await hold(p, 5, 'default', '/critical')
  t.equal(p.held.entered(), 20, 'a critical route passes requests of a shed tier up to the whole limit')
  t.equal((await p.app.inject(as('default', '/critical'))).statusCode, 503)
  t.equal(p.state().inFlight, 20)
  p.held.release()
  for (const response of await Promise.all([...anonymous, ...others, ...vip, ...critical])) t.equal(response.statusCode, 200)
  t.equal(p.state().inFlight, 0, 'every admitted request left the count')
})

test('a shed request gets back what another registration took for it', async (t) => {
  const p = await protectedApp(t, {}, {}, undefined, (app) => {
    app.register(tollgatePlugin, { name: 'hourly', edge: { capacity: 6, refillPerSecond: 0 }, store: memoryStore({ clock: () => 0 }) })
  })
  const held = await hold(p, 5, 'anonymous', '/quick-held')
  t.equal((await p.app.inject('/quick-held')).statusCode, 503, 'shed: its hourly token is given back')
  p.held.release()
  await Promise.all(held)
  t.equal((await hold(p, 1, 'anonymous', '/quick-held')).length, 1)
  p.held.release()
  t.equal((await p.app.inject('/quick-held')).statusCode, 429, 'the 7th is the one over the hourly 6')
})

test('a shed request takes no quota', async (t) => {
  const p = await protectedApp(t)
  const held = await hold(p, 5, 'anonymous')
  t.equal((await p.app.inject('/')).statusCode, 503)
  p.held.release()
  await Promise.all(held)
  // The anonymous tier holds 6 tokens: 5 were taken; the shed one took none.
  t.equal((await hold(p, 1, 'anonymous')).length, 1)
  p.held.release()
  t.equal((await p.app.inject('/')).statusCode, 429, 'the 7th is the one over quota')
})

test('a gauge over its target cuts the limit from the concurrency in use, at the next interval', async (t) => {
  const p = await protectedApp(t)
  const held = await hold(p, 4, 'anonymous')
  p.gauge.value = 8 // 4 × target
  p.clock.advance(100)
  t.equal((await p.app.inject('/')).statusCode, 503, 'the limit cut from the 4 in use, by half (the most an interval cuts), up to the floor of 4: anonymous share 1')
  t.equal(p.state().limit, 4)
  t.equal(p.state().overload, 4)
  t.equal(p.state().ratios.gauge, 4)
  p.held.release()
  await Promise.all(held)
  p.gauge.value = 0
  for (let i = 0; i < 3; i++) { p.clock.advance(100); await p.app.inject('/quick') }
  t.ok(p.state().overload < 1, `the overload decays (${p.state().overload})`)
})

test('the handler latency per route, measured by the plugin, is a signal; a route may have its own target', async (t) => {
  const p = await protectedApp(t, { gauge: undefined, latencyMs: 50 }, {}, undefined, (app, held) => {
    app.get('/slow', { config: { rateLimit: { latencyMs: 1000 } } }, async () => { await held.wait(); return 'slow' })
  })
  const slow = await hold(p, 1, 'anonymous', '/slow')
  p.clock.advance(500)
  p.held.release()
  await Promise.all(slow)
  p.clock.advance(100)
  const before = p.state().limit
  const held = await hold(p, 1, 'anonymous')
  t.equal(p.state().ratios.latency, 0.5, '500 ms on a route whose target is 1000 ms')
  p.clock.advance(200)
  p.held.release()
  await Promise.all(held)
  p.clock.advance(100)
  await p.app.inject('/quick')
  t.equal(p.state().ratios.latency, 4, '200 ms on a route of the plugin\'s 50 ms target')
  t.ok(p.state().limit < before, 'cut')
})

test('status 429 by option; a shed goes through the error handler a user set, with the decision', async (t) => {
  const seen: LimitDecision[] = []
  const p = await protectedApp(t, { status: 429 }, {}, undefined, (app) => {
    app.setErrorHandler((error: { decision?: LimitDecision, statusCode?: number, code?: string }, _request, reply) => {
      if (error.decision !== undefined) seen.push(error.decision)
      return reply.code(error.statusCode ?? 500).send({ shaped: error.code })
    })
  })
  const held = await hold(p, 5, 'anonymous')
  const shed = await p.app.inject('/')
  t.equal(shed.statusCode, 429)
  t.same(shed.json(), { shaped: 'TOLLGATE_OVERLOADED' })
  t.equal(seen[0]?.layer, 'protect')
  t.equal(seen[0]?.tier, 'anonymous')
  p.held.release()
  await Promise.all(held)
})

test('shadow mode: a would-be shed is logged, counted, given to onLimit, and admitted', async (t) => {
  const { lines, logger } = logSink()
  const limits: LimitDecision[] = []
  const p = await protectedApp(t, {}, { shadow: true, onLimit: (_request, decision) => { limits.push(decision) } }, logger)
  const held = await hold(p, 6, 'anonymous')
  t.equal(p.held.entered(), 6, 'the 6th passes')
  t.equal(p.state().inFlight, 6, 'and is counted in flight')
  t.equal(limits.length, 1)
  t.equal(limits[0]?.layer, 'protect')
  t.ok(lines.some((line) => line.msg === 'fastify-tollgate: would shed (shadow mode)'))
  const report = p.app.tollgate.shadowReport()
  t.equal(report.tiers.find((tier) => tier.layer === 'protect')?.wouldRefuse, 1)
  p.held.release()
  await Promise.all(held)
})

test('a request that fails, and one whose client goes away, leave the count when their handlers end', async (t) => {
  const p = await protectedApp(t)
  const failed = await hold(p, 2, 'anonymous', '/fail')
  await p.app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = p.app.server.address() as { port: number }
  const gone = httpRequest({ port, host: '127.0.0.1', path: '/' })
  gone.on('error', () => {})
  gone.end()
  while (p.state().inFlight < 3) await new Promise((resolve) => setTimeout(resolve, 5))
  gone.destroy()
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.equal(p.state().inFlight, 3, 'an abandoned request stays in flight while its handler works')
  p.held.release()
  for (const response of await Promise.all(failed)) t.equal(response.statusCode, 500)
  while (p.state().inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 5))
  t.equal(p.state().inFlight, 0, 'and leaves when it ends')
})

test('a hijacked reply leaves the count when its response finishes', async (t) => {
  const p = await protectedApp(t, {}, {}, undefined, (app) => {
    app.get('/hijack', async (_request, reply) => { reply.hijack(); reply.raw.end('raw') })
  })
  const response = await p.app.inject('/hijack')
  t.equal(response.body, 'raw')
  for (let i = 0; i < 100 && p.state().inFlight > 0; i++) await new Promise((resolve) => setTimeout(resolve, 5))
  t.equal(p.state().inFlight, 0)
})

test('a gauge that throws or reads garbage is left out, logged once; requests go on', async (t) => {
  const { lines, logger } = logSink()
  let reading: () => number = () => { throw new Error('pool gone') }
  const p = await protectedApp(t, { gauge: { read: () => reading(), target: 1 } }, {}, logger)
  for (let i = 0; i < 3; i++) { p.clock.advance(100); t.equal((await hold(p, 1, 'anonymous')).length, 1); p.held.release() }
  reading = () => Number.NaN
  p.clock.advance(100)
  await hold(p, 1, 'anonymous')
  p.held.release()
  t.equal(lines.filter((line) => line.msg.startsWith('fastify-tollgate: protect.gauge.read')).length, 1)
  t.equal(p.state().ratios.gauge, undefined)
  t.equal(p.state().limit, 20)
})

test('the event loop\'s p99 delay is a signal; with several routes sampled, the slowest over its target counts', async (t) => {
  const p = await protectedApp(t, { gauge: undefined, eventLoopDelayMs: 1000, latencyMs: 100 }, {}, undefined, (app, held) => {
    app.get('/other', async () => { await held.wait(); return 'other' })
  })
  const both = [...await hold(p, 1, 'anonymous'), ...await hold(p, 1, 'anonymous', '/other')]
  p.clock.advance(50)
  const released = p.held.entered()
  p.held.release()
  await Promise.all(both)
  const third = await hold(p, 1, 'anonymous', '/other')
  p.clock.advance(250)
  p.held.release()
  await Promise.all(third)
  t.equal(released, 2)
  p.clock.advance(100)
  await p.app.inject('/quick')
  t.equal(p.state().ratios.latency, 1.5, '/ took 50 ms (0.5), /other 50 and 250 ms (mean 150 ms: 1.5)')
  const loop = p.state().ratios.eventLoopDelay as number
  t.ok(loop >= 0 && loop < 1, `the event loop's p99 delay over 1000 ms: ${loop}`)
})

test('the metrics show each protection\'s limit, requests in flight, overload and signals; sheds count as decisions of layer protect', async (t) => {
  const registry = new Registry()
  const metrics = tollgateMetrics({ registry })
  t.teardown(() => { metrics.close() })
  const p = await protectedApp(t, {}, { name: 'api' })
  const unnamed = await protectedApp(t)
  const held = await hold(p, 5, 'anonymous')
  t.equal((await p.app.inject('/')).statusCode, 503)
  p.gauge.value = 3
  p.clock.advance(100)
  t.equal((await p.app.inject('/')).statusCode, 503)
  const read = async (name: string, labels: Record<string, string>): Promise<number | undefined> => {
    const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === name) as { values: Array<{ labels: Record<string, string>, value: number }> }
    return metric.values.find((v) => Object.entries(labels).every(([key, value]) => v.labels[key] === value))?.value
  }
  t.equal(await read('tollgate_protect_limit', { registration: 'api' }), p.state().limit)
  t.equal(await read('tollgate_protect_in_flight', { registration: 'api' }), 5)
  t.equal(await read('tollgate_protect_overload', { registration: 'api' }), 1.5)
  t.equal(await read('tollgate_protect_signal_ratio', { registration: 'api', signal: 'gauge' }), 1.5)
  t.equal(await read('tollgate_protect_signal_ratio', { registration: 'api', signal: 'latency' }), undefined, 'a signal not watched shows nothing')
  t.equal(await read('tollgate_decisions_total', { layer: 'api.protect', tier: 'anonymous', outcome: 'refused' }), 2)
  unnamed.clock.advance(100)
  await unnamed.app.inject('/quick')
  t.equal(await read('tollgate_protect_limit', { registration: '' }), unnamed.state().limit, 'the registration without a name: label \'\'')
  t.equal(await read('tollgate_protect_signal_ratio', { registration: '', signal: 'gauge' }), 0)
  p.held.release()
  await Promise.all(held)
})

test('closing the app closes its protection', async (t) => {
  const before = [...protections()].length
  const built = await buildApp({ app: { tiers: TIERS }, protect: { eventLoopDelayMs: 100 } })
  await built.app.ready()
  t.equal([...protections()].length, before + 1)
  await built.app.close()
  t.equal([...protections()].length, before)
})
