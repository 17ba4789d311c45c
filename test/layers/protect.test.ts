/**
 * Capacity protection in the app layer (layers/protect.ts, protection.ts): who
 * is shed and in what order, what a shed request gets, shadow mode. Requests are
 * held in their handler until the test releases them; time is the memory store's
 * manual clock (protect-app.ts). When an admitted request leaves the count
 * (answered, failed, hijacked or abandoned by its client): protect-handlers.test.ts.
 * The signals: protect-signals.test.ts.
 */
import { test } from 'tap'
import { buildApp, logSink } from '../helpers.js'
import tollgatePlugin, { memoryStore } from '../../lib/index.js'
import { protections } from '../../lib/output/protection-state.js'
import type { LimitDecision } from '../../lib/index.js'
import { as, hold, protectedApp, TIERS } from './protect-app.js'

test('each tier counts its own requests in flight and higher ones\' against its share; the lowest is shed first, with a 503, Retry-After and TOLLGATE_OVERLOADED', async (t) => {
  const p = await protectedApp(t)
  t.equal(p.state().limit, 20, 'the limit starts at 20: anonymous 5, default 10, vip 15, critical routes 20')
  const anonymous = await hold(p, 5, 'anonymous')
  const shed = await p.app.inject(as('anonymous'))
  t.equal(shed.statusCode, 503)
  t.equal(shed.json().code, 'TOLLGATE_OVERLOADED')
  t.ok(Number(shed.headers['retry-after']) >= 1, `Retry-After ${String(shed.headers['retry-after'])}`)
  t.equal(shed.headers['cache-control'], 'no-store')
  const others = await hold(p, 10, 'default')
  t.equal(p.held.entered(), 15, 'the 5 anonymous ones do not count against default')
  t.equal((await p.app.inject(as('default'))).statusCode, 503, 'default shed at 10 of its own')
  const vip = await hold(p, 15, 'vip')
  t.equal(p.held.entered(), 30)
  t.equal((await p.app.inject(as('vip'))).statusCode, 503, 'vip shed at 15 of its own')
  t.equal((await p.app.inject(as('default'))).statusCode, 503, 'default now counts the vip ones too')
  const critical = await hold(p, 20, 'default', '/critical')
  t.equal(p.held.entered(), 50, 'a critical route passes requests of a shed tier, up to the whole limit of its own')
  t.equal((await p.app.inject(as('default', '/critical'))).statusCode, 503)
  t.equal((await p.app.inject(as('vip'))).statusCode, 503, 'and vip counts the critical ones')
  t.equal(p.state().inFlight, 50)
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

test('a new process starts at initialConcurrency: a burst within its shares passes before any signal was read', async (t) => {
  const p = await protectedApp(t, { initialConcurrency: 80 })
  t.equal(p.state().limit, 80)
  const held = await hold(p, 40, 'default', '/quick-held')
  t.equal(p.held.entered(), 40, 'default holds 80 × 2/4 = 40 at once (at the default start of 20: 10)')
  t.equal((await p.app.inject(as('default', '/quick'))).statusCode, 503, 'and not 41')
  p.held.release()
  await Promise.all(held)
})

test('a shed decision\'s capacity is what its level was admitted: its share of the limit, rounded up', async (t) => {
  const limits: LimitDecision[] = []
  // A limit of 30: vip (3/4) may have 22.5 in flight, its own and critical routes', that is 23.
  const p = await protectedApp(t, { minConcurrency: 30, maxConcurrency: 30 }, { onLimit: (_request, decision) => { limits.push(decision) } })
  const held = await hold(p, 23, 'vip')
  t.equal(p.held.entered(), 23, '23 admitted')
  t.equal((await p.app.inject(as('vip'))).statusCode, 503, 'the 24th shed')
  t.equal(limits.at(-1)?.buckets[0]?.capacity, 23, 'and told the capacity 23')
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
