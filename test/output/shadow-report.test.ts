/** fastify.tollgate.shadowReport(): the clients and tiers shadow mode would have refused most (lib/shadow-report.ts). */
import Fastify from 'fastify'
import t from 'tap'
import tollgate, { memoryStore, per } from '../../lib/index.js'
import { ShadowCounter } from '../../lib/output/shadow-report.js'
import { buildApp, manualClock, readyWith } from '../helpers.js'

const from = (remoteAddress: string): { url: string, remoteAddress: string } => ({ url: '/', remoteAddress })

async function send (app: Awaited<ReturnType<typeof buildApp>>['app'], count: number, remoteAddress: string): Promise<number[]> {
  const codes: number[] = []
  for (let i = 0; i < count; i++) codes.push((await app.inject(from(remoteAddress))).statusCode)
  return codes
}

t.test('the flooding client is at the top, its would-be refusals counted exactly', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 5, refillPerSecond: 1 }, shadow: true })
  app.get('/', async () => 'ok')
  t.same(new Set(await send(app, 105, '203.0.113.7')), new Set([200]), 'shadow mode refuses none')
  await send(app, 7, '198.51.100.1')
  await send(app, 8, '198.51.100.2')
  const report = app.tollgate.shadowReport()
  t.same(report, {
    shadow: true,
    minutes: 1,
    wouldRefuse: 100 + 2 + 3,
    clients: [
      { client: '{ip:203.0.113.7}', layer: 'edge', wouldRefuse: 100, error: 0, limits: { edge: 100 } },
      { client: '{ip:198.51.100.2}', layer: 'edge', wouldRefuse: 3, error: 0, limits: { edge: 3 } },
      { client: '{ip:198.51.100.1}', layer: 'edge', wouldRefuse: 2, error: 0, limits: { edge: 2 } }
    ],
    tiers: [{ layer: 'edge', wouldRefuse: 105, limits: { edge: 105 } }]
  })
  t.same(app.tollgate.shadowReport({ top: 1 }).clients.map((c) => c.client), ['{ip:203.0.113.7}'], 'top')
  await app.close()
})

t.test('tiers, users and which limit lacked the tokens', async (t) => {
  const { app, clock } = await buildApp({
    app: {
      tiers: {
        default: [{ name: 'second', ...per(3, 'second') }, { name: 'hour', ...per(5, 'hour') }],
        vip: { capacity: 2, refillPerSecond: 1 }
      }
    },
    shadow: true
  })
  app.get('/', async () => 'ok')
  await app.ready()
  const alice = { authorization: `Bearer ${app.jwt.sign({ sub: 'alice' })}` }
  const victor = { authorization: `Bearer ${app.jwt.sign({ sub: 'victor', tier: 'vip' })}` }
  // alice: 4 at once (the 4th lacks `second`), then 3 more a second later (the hour's 5 are gone by the 7th, which lacks `hour`).
  for (let i = 0; i < 4; i++) await app.inject({ url: '/', headers: alice })
  clock.advance(1000)
  for (let i = 0; i < 3; i++) await app.inject({ url: '/', headers: alice })
  for (let i = 0; i < 3; i++) await app.inject({ url: '/', headers: victor })
  const report = app.tollgate.shadowReport()
  t.equal(report.wouldRefuse, 3)
  t.same(report.clients, [
    { client: '{user:alice}', layer: 'app', tier: 'default', wouldRefuse: 2, error: 0, limits: { second: 1, hour: 1 } },
    { client: '{user:victor}', layer: 'app', tier: 'vip', wouldRefuse: 1, error: 0, limits: { app: 1 } }
  ])
  t.same(report.tiers, [
    { layer: 'app', tier: 'default', wouldRefuse: 2, limits: { second: 1, hour: 1 } },
    { layer: 'app', tier: 'vip', wouldRefuse: 1, limits: { app: 1 } }
  ])
  await app.close()
})

t.test('the last minutes only', async (t) => {
  const { app, clock } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 }, shadow: true, shadowReport: { minutes: 3 } })
  app.get('/', async () => 'ok')
  await send(app, 3, '203.0.113.7') // minute 0: 2
  clock.advance(60_000)
  await send(app, 2, '203.0.113.7') // minute 1: 2
  clock.advance(60_000)
  t.match(app.tollgate.shadowReport(), { minutes: 3, wouldRefuse: 4, clients: [{ wouldRefuse: 4 }] }, 'minutes 0 to 2')
  clock.advance(60_000)
  t.match(app.tollgate.shadowReport(), { minutes: 3, wouldRefuse: 2, clients: [{ wouldRefuse: 2 }] }, 'minute 0 is past')
  await send(app, 1, '203.0.113.7') // minute 3: 1
  t.match(app.tollgate.shadowReport(), { minutes: 3, wouldRefuse: 3 })
  clock.advance(10 * 60_000)
  t.same(app.tollgate.shadowReport(), { shadow: true, minutes: 3, wouldRefuse: 0, clients: [], tiers: [] }, 'all past')
  await app.close()
})

t.test('a clock that goes back counts into the newest minute, and the report still shows it', async (t) => {
  const { app, clock } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 }, shadow: true })
  app.get('/', async () => 'ok')
  clock.set(5 * 60_000)
  await send(app, 2, '203.0.113.7')
  clock.set(4 * 60_000)
  await send(app, 1, '203.0.113.7')
  t.match(app.tollgate.shadowReport(), { minutes: 6, wouldRefuse: 2 }, 'read while the clock is back')
  clock.set(-120 * 60_000)
  await send(app, 100, '203.0.113.7')
  t.match(app.tollgate.shadowReport(), { wouldRefuse: 102, clients: [{ wouldRefuse: 102 }] }, 'two hours back')
  clock.set(5 * 60_000)
  t.match(app.tollgate.shadowReport(), { minutes: 6, wouldRefuse: 102 })
  await app.close()
})

t.test('bounded under rotating clients: the flooder stays listed and exact', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 5, refillPerSecond: 0 }, shadow: true, shadowReport: { keys: 10 } })
  app.get('/', async () => 'ok')
  await send(app, 5, '203.0.113.7')
  for (let i = 0; i < 200; i++) {
    await send(app, 6, `10.0.${Math.floor(i / 250)}.${i % 250}`) // each: 1 would-be refusal
    await send(app, 1, '203.0.113.7')
  }
  const report = app.tollgate.shadowReport({ top: 100 })
  t.equal(report.wouldRefuse, 400)
  t.match(report.clients[0], { client: '{ip:203.0.113.7}', wouldRefuse: 200, error: 0 }, 'exact: listed from its first would-be refusal')
  t.equal(report.clients.length, 10, 'ten listed')
  t.ok(report.clients.every((c) => c.wouldRefuse - c.error <= 200), 'a count less its error is never above the truth')
  await app.close()
})

t.test('a client that starts late in a full minute of busier clients is listed (Space-Saving)', async (t) => {
  // The attack of the outside review: fill the minute with decoys of C refusals each, then
  // flood in bursts below C while new decoys come: the flooder must stay listed, and never below its true count.
  const keys = 10
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 }, shadow: true, shadowReport: { keys } })
  app.get('/', async () => 'ok')
  const C = 5
  let decoy = 0
  const decoyBurst = async (): Promise<void> => { await send(app, C + 1, `10.1.${Math.floor(decoy / 250)}.${decoy % 250}`); decoy++ }
  for (let i = 0; i < keys; i++) await decoyBurst()
  await send(app, 1, '203.0.113.7') // its one pass
  let flooded = 0
  for (let round = 0; round < 20; round++) {
    await send(app, C - 1, '203.0.113.7')
    flooded += C - 1
    for (let i = 0; i < keys / 2; i++) await decoyBurst()
  }
  const report = app.tollgate.shadowReport({ top: keys })
  const flooder = report.clients.find((c) => c.client === '{ip:203.0.113.7}')
  t.ok(flooder !== undefined, 'listed')
  t.equal(report.clients[0]?.client, '{ip:203.0.113.7}', 'at the top')
  t.ok((flooder?.wouldRefuse ?? 0) >= flooded, `counted ${flooder?.wouldRefuse ?? 0}, at least its ${flooded}`)
  t.ok((flooder?.wouldRefuse ?? 0) - (flooder?.error ?? 0) <= flooded, 'and its count less its error at most that')
  t.equal(report.wouldRefuse, flooded + decoy * C)
  await app.close()
})

t.test('limit names like Object.prototype members count as any other', async (t) => {
  const { app } = await buildApp({ app: { tiers: { default: [{ name: 'constructor', ...per(1, 'hour') }, { name: 'toString', ...per(1, 'hour') }] } }, shadow: true })
  app.get('/', async () => 'ok')
  await app.ready()
  const headers = { authorization: `Bearer ${app.jwt.sign({ sub: 'alice' })}` }
  for (let i = 0; i < 3; i++) await app.inject({ url: '/', headers })
  const report = app.tollgate.shadowReport()
  t.same({ ...report.clients[0]?.limits }, { constructor: 2, toString: 2 })
  t.same({ ...report.tiers[0]?.limits }, { constructor: 2, toString: 2 })
  await app.close()
})

t.test('a cost above a replica share passes by overdraft on a full share: that limit did not lack', async (t) => {
  const clock = manualClock()
  const app = Fastify()
  // Two replicas: `second` 5 of 10 (refilling 5/s), `hour` 50 of 100 (never). A cost of 8 passes on a full `second` share.
  await app.register(tollgate, {
    store: memoryStore({ replicas: 2, clock: clock.now }),
    app: { tiers: { default: [{ name: 'second', capacity: 10, refillPerSecond: 10 }, { name: 'hour', capacity: 100, refillPerSecond: 0 }] }, identify: () => ({ id: 'alice' }) },
    shadow: true
  })
  app.get('/', { config: { rateLimit: { cost: 8 } } }, async () => 'ok')
  for (let i = 0; i < 7; i++) {
    await app.inject('/')
    clock.advance(2000) // the `second` share back to full, from a debt of 3
  }
  const report = app.tollgate.shadowReport()
  t.equal(report.wouldRefuse, 1, 'the 7th: the hour share holds 2 of 8')
  t.same({ ...report.tiers[0]?.limits }, { hour: 1 }, '`second` was full: not lacking')
  await app.close()
})

t.test('outside shadow mode: nothing counted, said so', async (t) => {
  const { app } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 } })
  app.get('/', async () => 'ok')
  t.same(await send(app, 2, '203.0.113.7'), [200, 429])
  t.same(app.tollgate.shadowReport(), { shadow: false, minutes: 0, wouldRefuse: 0, clients: [], tiers: [] })
  await app.close()
})

t.test('invalid options fail with a coded error naming them', async (t) => {
  const edge = { capacity: 1, refillPerSecond: 1 }
  await t.rejects(readyWith({ edge, shadow: true, shadowReport: { minutes: 0 } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`shadowReport\.minutes`.*got `0`/ })
  await t.rejects(readyWith({ edge, shadow: true, shadowReport: { minutes: 61 } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`shadowReport\.minutes`/ })
  await t.rejects(readyWith({ edge, shadowReport: { keys: 5 } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`shadowReport\.keys`.*got `5`/ })
  await t.rejects(readyWith({ edge, shadowReport: { keys: 10_001 } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`shadowReport\.keys`/ })
  await t.rejects(readyWith({ edge, shadowReport: { minutes: 60, keys: 2000 } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`shadowReport\.minutes` × `shadowReport\.keys` to be at most 100000.*60 × 2000 = 120000/ })
  await t.rejects(readyWith({ edge, shadowReport: { top: 5 } }), { code: 'TOLLGATE_INVALID_OPTION', message: /shadowReport.*top/ })
  await t.rejects(readyWith({ edge, shadowReport: 'yes' }), { code: 'TOLLGATE_INVALID_OPTION', message: /`shadowReport`/ })
  const { app } = await buildApp({ edge, shadow: true })
  t.throws(() => app.tollgate.shadowReport({ top: 0 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`top`.*got `0`/ })
  t.throws(() => app.tollgate.shadowReport({ top: 2.5 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`top`/ })
  t.throws(() => app.tollgate.shadowReport({ minutes: 5 } as never), { code: 'TOLLGATE_INVALID_OPTION', message: /minutes/ })
  await app.close()
})

t.test("a custom store without a clock: the report keeps this process's time", async (t) => {
  const app = Fastify()
  const refusing = { consume: () => ({ allowed: false, tokens: [0], retryAfterMs: 1000 }), close () {} }
  await app.register(tollgate, { store: refusing, edge: { capacity: 5, refillPerSecond: 1 }, shadow: true })
  app.get('/', async () => 'ok')
  t.equal((await app.inject('/')).statusCode, 200)
  t.match(app.tollgate.shadowReport(), { shadow: true, minutes: 1, wouldRefuse: 1, clients: [{ client: '{ip:127.0.0.1}', limits: { edge: 1 } }] })
  await app.close()
})

t.test('a clock that is not a finite number counts into the newest minute', async (t) => {
  let now = Number.NaN
  const counter = new ShadowCounter(2, 10, () => now)
  const limit = { layer: 'edge' as const, allowed: false, cost: 1, retryAfterMs: 1000, buckets: [{ name: 'edge', key: '{ip:203.0.113.7}:edge', capacity: 1, refillPerSecond: 1, tokens: 0 }] }
  const asked = [{ key: '{ip:203.0.113.7}:edge', policy: { capacity: 1, refillPerSecond: 1 }, cost: 1 }]
  for (let i = 0; i < 100; i++) counter.record(limit, asked)
  now = Infinity
  counter.record(limit, asked)
  t.match(counter.read(5, true), { minutes: 1, wouldRefuse: 101, clients: [{ wouldRefuse: 101, error: 0 }] }, 'started at minute 0: NaN and Infinity count there')
  now = 3 * 60_000
  counter.record(limit, asked)
  t.match(counter.read(5, true), { minutes: 2, wouldRefuse: 1 }, 'a finite clock moves on')
})

t.test('across minutes: a client not listed in a full minute gets that minute\'s floor as count and error', async (t) => {
  // The second outside read: 1000 in minute 0, then pushed out of minute 1 by rotating addresses, 30 a minute after.
  const { app, clock } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 }, shadow: true, shadowReport: { keys: 10 } })
  app.get('/', async () => 'ok')
  const scraper = '203.0.113.7'
  let truth = (await send(app, 1001, scraper)).length - 1
  clock.advance(60_000)
  truth += (await send(app, 1, scraper)).length
  for (let i = 0; i < 20; i++) await send(app, 3, `10.2.0.${i}`) // 2 each: the scraper's 1 is the least, pushed out
  for (let minute = 2; minute < 4; minute++) {
    clock.advance(60_000)
    truth += (await send(app, 30, scraper)).length
  }
  const listed = app.tollgate.shadowReport().clients.find((c) => c.client === `{ip:${scraper}}`)
  t.ok(listed !== undefined, 'listed')
  t.ok((listed?.wouldRefuse ?? 0) >= truth, `counted ${listed?.wouldRefuse ?? 0}, at least the true ${truth}`)
  t.ok((listed?.wouldRefuse ?? 0) - (listed?.error ?? 0) <= truth, 'its count less its error at most the truth')
  t.ok((listed?.error ?? 0) > 0, 'and not said to be exact')
  await app.close()
})

t.test('ranked by what a client surely had: addresses that inherit counts do not push a heavy client out of the top', async (t) => {
  const { app, clock } = await buildApp({ edge: { capacity: 1, refillPerSecond: 0 }, shadow: true, shadowReport: { keys: 10 } })
  app.get('/', async () => 'ok')
  let ghost = 0
  for (let minute = 0; minute < 10; minute++) {
    await send(app, 41, '203.0.113.7') // the heavy client: every one refused after its first pass
    for (let i = 0; i < 30; i++) { await send(app, 2, `10.3.${minute}.${ghost % 250}`); ghost++ } // each 1, then gone
    clock.advance(60_000)
  }
  clock.advance(-60_000)
  const report = app.tollgate.shadowReport({ top: 3 })
  t.equal(report.clients[0]?.client, '{ip:203.0.113.7}', 'the heavy client first')
  t.same([report.clients[0]?.wouldRefuse, report.clients[0]?.error], [40 + 9 * 41, 0], 'exact: 40, then 41 a minute')
  await app.close()
})

t.test('ranked by what a client surely had, though addresses that come last in each minute inherit higher counts', async (t) => {
  // The second outside read's gaming: 3 addresses make one would-be refusal at the end of every minute.
  let now = 0
  const counter = new ShadowCounter(10, 10, () => now)
  const refuse = (client: string): void => {
    const key = `${client}:edge`
    counter.record({ layer: 'edge', allowed: false, cost: 1, retryAfterMs: 1000, buckets: [{ name: 'edge', key, capacity: 1, refillPerSecond: 0, tokens: 0 }] },
      [{ key, policy: { capacity: 1, refillPerSecond: 0 }, cost: 1 }])
  }
  for (let minute = 0; minute < 10; minute++) {
    now = minute * 60_000
    if (minute === 4) for (let i = 0; i < 400; i++) refuse('{ip:heavy}')
    for (let a = 0; a < 40; a++) for (let j = 0; j < 10; j++) refuse(`{ip:crowd-${minute}-${a}}`)
    for (let g = 0; g < 3; g++) refuse(`{ip:ghost-${g}}`)
  }
  const report = counter.read(3, true)
  t.equal(report.clients[0]?.client, '{ip:heavy}', 'the heavy client first')
  t.equal((report.clients[0]?.wouldRefuse ?? 0) - (report.clients[0]?.error ?? 0), 400, 'surely its 400')
  const ghosts = report.clients.filter((c) => c.client.startsWith('{ip:ghost'))
  t.ok(ghosts.length > 0 && ghosts.every((c) => c.wouldRefuse - c.error <= 10 && c.wouldRefuse >= 10), 'a ghost: surely at most its 10, counted at least 10')
})
