/**
 * Capacity protection's signals and limit (layers/protect-signals.ts,
 * protection.ts, engine/concurrency-limit.ts) in an app: a gauge, the handler
 * latency per route, the event loop's delay, quiet intervals, a clock that goes
 * back, readings that are garbage, and the metrics. Time is the memory store's
 * manual clock (protect-app.ts).
 */
import { test } from 'tap'
import { Registry } from 'prom-client'
import { logSink } from '../helpers.js'
import { tollgateMetrics } from '../../lib/metrics.js'
import { as, hold, protectedApp } from './protect-app.js'

test('a gauge over its target cuts the limit from the limit in use, at the next interval', async (t) => {
  const p = await protectedApp(t)
  const held = await hold(p, 4, 'anonymous')
  p.gauge.value = 8 // 4 × target
  p.clock.advance(100)
  t.equal((await p.app.inject('/')).statusCode, 503, 'the limit cut from the 16 its 4 anonymous ones use (4 at a share of 1/4), by half (the most an interval cuts): anonymous 2')
  t.equal(p.state().limit, 8)
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

test('a stalled route reads as its requests\' age: nothing ends, and the latency signal still rises', async (t) => {
  const p = await protectedApp(t, { gauge: undefined, latencyMs: 100 })
  const stalled = await hold(p, 3, 'anonymous')
  p.clock.advance(100)
  await p.app.inject('/quick')
  t.equal(p.state().ratios.latency, 1, 'the 3 held requests are 100 ms old')
  p.clock.advance(300)
  await p.app.inject('/quick')
  t.ok((p.state().ratios.latency as number) >= 4, `400 ms old: ${String(p.state().ratios.latency)}`)
  t.ok(p.state().limit < 20, `cut: ${p.state().limit}`)
  p.held.release()
  await Promise.all(stalled)
})

test('intervals without an admission let the overload decay; a clock that goes back starts a new interval', async (t) => {
  const p = await protectedApp(t)
  p.gauge.value = 200 // 100 × target
  p.clock.advance(100)
  await p.app.inject('/quick')
  t.equal(p.state().overload, 100)
  p.gauge.value = 0
  p.clock.advance(10 * 60_000)
  await p.app.inject('/quick')
  t.ok(p.state().overload < 1e-9, 'ten quiet minutes later, the spike is gone')
  p.gauge.value = 8
  p.clock.set(0)
  await p.app.inject('/quick')
  p.clock.advance(100)
  await p.app.inject('/quick')
  t.equal(p.state().overload, 4, 'read again 100 ms after the clock went back')
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
  reading = (async () => 1) as unknown as () => number
  p.clock.advance(100)
  t.equal((await p.app.inject('/quick')).statusCode, 200, 'nor a promise')
  reading = (async () => { throw new Error('pool gone') }) as unknown as () => number
  p.clock.advance(100)
  t.equal((await p.app.inject(as('vip', '/quick'))).statusCode, 200, 'nor a promise that rejects (and the process goes on)')
  await new Promise((resolve) => setImmediate(resolve))
  reading = () => Object.create(null) as number
  p.clock.advance(100)
  t.equal((await p.app.inject('/quick')).statusCode, 200, 'an object without a prototype is no reading either')
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
  const twin = await protectedApp(t, {}, { name: 'api' }) // another app's registration of the same name
  const held = await hold(p, 5, 'anonymous')
  t.equal((await p.app.inject('/')).statusCode, 503)
  p.gauge.value = 3
  p.clock.advance(100)
  t.equal((await p.app.inject('/')).statusCode, 503)
  const read = async (name: string, labels: Record<string, string>): Promise<number | undefined> => {
    const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === name) as { values: Array<{ labels: Record<string, string>, value: number }> }
    return metric.values.find((v) => Object.entries(labels).every(([key, value]) => v.labels[key] === value))?.value
  }
  t.equal(await read('tollgate_protect_limit', { registration: 'api' }), p.state().limit + twin.state().limit, 'two protections of one name: their limits summed')
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
  // No admission for 10 intervals: the scrape closes them, as an admission would.
  p.gauge.value = 0
  p.clock.advance(1000)
  const idle = await read('tollgate_protect_overload', { registration: 'api' }) as number
  t.ok(idle < 0.01, `an idle replica's overload decays at a scrape: ${idle}`)
  t.equal(await read('tollgate_protect_in_flight', { registration: 'api' }), 0)
})
