/**
 * Several limits on one tier and on one route quota ("10 a second, 1 000 an hour,
 * 20 000 a day"): consumed together, all or nothing, each in the headers by its
 * name, Retry-After the wait until every one passes; on memory and on Redis.
 */
import t, { type Test } from 'tap'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { memoryStore, per, redisStore, type Store } from '../../lib/index.js'
import type { TollgateOptions } from '../../lib/types/options.js'
import { buildAppOn, manualClock, readyWith } from '../helpers.js'
import { commandCalls, PATIENT_TIMEOUT_MS, requireRedis, startRedis } from '../redis-server.js'

const pricing = [
  { name: 'second', ...per(10, 'second') },
  { name: 'hour', ...per(1000, 'hour') },
  { name: 'day', ...per(20_000, 'day') }
]

const options: Omit<TollgateOptions, 'store'> = {
  app: {
    tiers: { default: pricing, vip: { capacity: 100, refillPerSecond: 10 } },
    identify: (request) => {
      const user = request.headers['x-user']
      return typeof user === 'string' ? { id: user, tier: request.headers['x-tier'] as string | undefined } : undefined
    }
  }
}

/** RateLimit's members: name → remaining whole tokens. */
function remaining (response: LightMyRequestResponse): Record<string, number> {
  const left: Record<string, number> = {}
  for (const member of String(response.headers.ratelimit).split(', ')) {
    const match = /^"([^"]+)";r=(\d+)/.exec(member)
    if (match !== null) left[match[1] as string] = Number(match[2])
  }
  return left
}

async function routes (app: FastifyInstance): Promise<void> {
  app.get('/', async () => 'ok')
  app.post('/bulk', { config: { rateLimit: { cost: 10 } } }, async () => 'ok')
  app.post('/export', {
    config: { rateLimit: { quota: { default: [{ name: 'export-hour', ...per(2, 'hour') }, { name: 'export-day', ...per(3, 'day') }] } } }
  }, async () => 'ok')
  await app.ready()
}

const stores: Array<[string, (t: Test, now: () => number) => Promise<Store>]> = [
  ['memory', async (_t, now) => memoryStore({ clock: now })]
]
if (requireRedis(t)) {
  stores.push(['redis', async (t, now) => redisStore({ client: (await startRedis(t)).client(t), clock: now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS })])
}

/** A refusal by `limit` alone whose Retry-After is exact to the second: refused one second before it, allowed at it. */
async function refusedUntilRetry (t: Test, clock: ReturnType<typeof manualClock>, request: () => Promise<LightMyRequestResponse>, limit: string): Promise<void> {
  const refused = await request()
  t.equal(refused.statusCode, 429, `refused by ${limit}`)
  const left = remaining(refused)
  t.equal(left[limit], 0, `${limit} is empty`)
  for (const [name, tokens] of Object.entries(left)) if (name !== limit) t.ok(tokens >= 1, `${name} still has tokens (${tokens})`)
  const retryAfter = Number(refused.headers['retry-after'])
  t.ok(retryAfter >= 1, `Retry-After ${retryAfter}`)
  if (retryAfter >= 2) {
    clock.advance((retryAfter - 1) * 1000)
    t.equal((await request()).statusCode, 429, 'still refused a second before Retry-After')
    clock.advance(1000)
  } else {
    clock.advance(retryAfter * 1000)
  }
  t.equal((await request()).statusCode, 200, `allowed after Retry-After (${retryAfter} s)`)
}

// Memory and Redis side by side: each has its own app, clock and store (Redis round trips mostly wait).
t.jobs = 2

for (const [name, makeStore] of stores) {
  t.test(`${name}: a tier of 10/s, 1 000/h, 20 000/day is three buckets`, async (t) => {
    const clock = manualClock(1_000_000)
    const app = await buildAppOn(await makeStore(t, clock.now), options)
    await routes(app)
    const get = async (): Promise<LightMyRequestResponse> => app.inject({ url: '/', headers: { 'x-user': 'u1' } })

    const first = await get()
    t.equal(first.headers['ratelimit-policy'], '"second";q=10;w=1, "hour";q=1000;w=3600, "day";q=20000;w=86400')
    t.equal(first.headers.ratelimit, '"second";r=9;t=1, "hour";r=999;t=4, "day";r=19999;t=5')

    await t.test('burst: the per-second limit refuses the 11th at once', async (t) => {
      for (let i = 0; i < 9; i++) t.equal((await get()).statusCode, 200)
      await refusedUntilRetry(t, clock, get, 'second')
    })

    await t.test('hourly: ten a second empties the hour before the day', async (t) => {
      let response = await get()
      for (let i = 0; response.statusCode === 200 && i < 2000; i++) {
        clock.advance(100) // one token a tenth of a second: the per-second limit never refuses
        response = await get()
      }
      t.equal(remaining(response).hour, 0)
      await refusedUntilRetry(t, clock, get, 'hour')
    })

    await t.test('daily: the day empties at the hour\'s pace, after about 114 hours', async (t) => {
      clock.advance(3600_000) // the hour full again
      // 10 tokens each 36 s: exactly the hour's refill, so only the day runs down (by 1.67 a step).
      let response = await app.inject({ method: 'POST', url: '/bulk', headers: { 'x-user': 'u1' } })
      let steps = 0
      while (response.statusCode === 200 && steps < 20_000) {
        clock.advance(36_000)
        response = await app.inject({ method: 'POST', url: '/bulk', headers: { 'x-user': 'u1' } })
        steps++
      }
      t.ok(steps > 10_000 && steps < 13_000, `about 12 000 steps (${steps})`)
      t.ok((remaining(response).day as number) < 10, 'refused: the day has less than the cost')
      // GET / costs 1: wait until the day holds less than one token, then the refusal is the day's.
      // (A tenth of a second apart: the per-second limit stays full.)
      while ((await get()).statusCode === 200) clock.advance(100)
      await refusedUntilRetry(t, clock, get, 'day')
    })

    await t.test('all or nothing: a refusal took nothing from the other limits', async (t) => {
      const before = remaining(await app.inject({ url: '/', headers: { 'x-user': 'u2' } }))
      for (let i = 0; i < 9; i++) await app.inject({ url: '/', headers: { 'x-user': 'u2' } })
      const refused = await app.inject({ url: '/', headers: { 'x-user': 'u2' } })
      t.equal(refused.statusCode, 429)
      t.same(remaining(refused), { second: 0, hour: (before.hour as number) - 9, day: (before.day as number) - 9 })
    })

    await t.test('a tier of one policy keeps its single "app" bucket', async (t) => {
      const vip = await app.inject({ url: '/', headers: { 'x-user': 'u3', 'x-tier': 'vip' } })
      t.equal(vip.headers['ratelimit-policy'], '"app";q=100;w=10')
      t.equal(vip.headers.ratelimit, '"app";r=99;t=1')
    })

    await t.test('a route quota of two limits follows the tier\'s three', async (t) => {
      const post = async (): Promise<LightMyRequestResponse> => app.inject({ method: 'POST', url: '/export', headers: { 'x-user': 'u4' } })
      const first = await post()
      t.equal(first.headers['ratelimit-policy'], '"second";q=10;w=1, "hour";q=1000;w=3600, "day";q=20000;w=86400, "export-hour";q=2;w=3600, "export-day";q=3;w=86400')
      t.match(first.headers.ratelimit, /"export-hour";r=1;t=1800, "export-day";r=2;t=28800$/)
      t.equal((await post()).statusCode, 200)
      await refusedUntilRetry(t, clock, post, 'export-hour')
      clock.advance(3600_000)
      await refusedUntilRetry(t, clock, post, 'export-day')
    })

    await t.test('fastify.tollgate names every limit of a tier', async (t) => {
      const user = { layer: 'app', user: 'u5', tier: 'default' } as const
      await app.tollgate.consume(user, 4)
      const peek = await app.tollgate.peek(user)
      t.same(peek.buckets.map((b) => [b.name, b.key, Math.round(b.tokens)]), [
        ['second', '{user:u5}:app:second', 6], ['hour', '{user:u5}:app:hour', 996], ['day', '{user:u5}:app:day', 19996]
      ])
      const level = await app.tollgate.refund(user, 3)
      t.equal(level.name, 'second', 'refund answers with the first limit')
      t.same((await app.tollgate.peek(user)).buckets.map((b) => Math.round(b.tokens)), [9, 999, 19999], 'every limit got 3 back')
      await app.tollgate.reset(user)
      t.same((await app.tollgate.peek(user)).buckets.map((b) => b.tokens), [10, 1000, 20000], 'reset: every limit full again')
      const routePeek = await app.tollgate.peek({ layer: 'app', user: 'u5', route: 'POST /export' })
      t.same(routePeek.buckets.map((b) => b.key), ['{user:u5}:route:POST /export#export-hour', '{user:u5}:route:POST /export#export-day'])
    })
    await app.close()
  })
}

t.test('redis: a step of five limits is one script call', async (t) => {
  if (!requireRedis(t)) return
  const redis = await startRedis(t)
  const clock = manualClock(1_000_000)
  const app = await buildAppOn(redisStore({ client: redis.client(t), clock: clock.now, heartbeatIntervalMs: 0, timeoutMs: PATIENT_TIMEOUT_MS }), options)
  await routes(app)
  const client = redis.client(t)
  const before = await commandCalls(client)
  for (let i = 0; i < 2; i++) t.equal((await app.inject({ method: 'POST', url: '/export', headers: { 'x-user': 'u9' } })).statusCode, 200)
  const after = await commandCalls(client)
  const scripts = (name: string): number => ((after[name] ?? 0) - (before[name] ?? 0))
  t.equal(scripts('evalsha') + scripts('eval'), 2, 'one script call per request')
  await app.close()
})

t.test('several limits: startup errors name the option, the value and what was expected', async (t) => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['an empty list', [], /`app\.tiers\.default\.length` to be an integer from 1 to 8, got `0`/],
    ['nine limits', Array.from({ length: 9 }, (_, i) => ({ name: `l${i}`, capacity: 1, refillPerSecond: 1 })), /from 1 to 8, got `9`/],
    ['a limit without a name', [{ capacity: 1, refillPerSecond: 1 }], /`app\.tiers\.default\[0\]\.name` to be a name of 1 to 32 letters/],
    ['a name with a space', [{ name: 'per hour', capacity: 1, refillPerSecond: 1 }], /got `"per hour"`/],
    ['the edge\'s name', [{ name: 'edge', capacity: 1, refillPerSecond: 1 }], /to differ from the edge's names/],
    ['a name twice', [{ name: 'a', capacity: 1, refillPerSecond: 1 }, { name: 'a', capacity: 2, refillPerSecond: 1 }], /unique, got `"a"` \(string\) twice/],
    ['a bad capacity', [{ name: 'a', capacity: 0, refillPerSecond: 1 }], /`app\.tiers\.default\[0\]\.capacity` to be a finite number ≥ 1, got `0`/],
    ['an unknown key', [{ name: 'a', capacity: 1, refillPerSecond: 1, window: 3 }], /Unknown option `app\.tiers\.default\[0\]\.window`/]
  ]
  for (const [what, tier, message] of cases) {
    await t.rejects(readyWith({ app: { tiers: { default: tier } } }), { code: 'TOLLGATE_INVALID_OPTION', message }, what)
  }
  const tiers = { default: pricing }
  await t.rejects(readyWith({ app: { tiers } }, (app) => { app.post('/x', { config: { rateLimit: { cost: 11 } } }, async () => 'ok') }), {
    code: 'TOLLGATE_INVALID_ROUTE_CONFIG',
    message: /got `11` above the capacity 10 of tier `default`'s limit `second`: it could never pass/
  }, 'a cost is checked against every limit')
  await t.rejects(readyWith({ app: { tiers } }, (app) => {
    app.post('/x', { config: { rateLimit: { quota: { default: [{ name: 'hour', capacity: 2, refillPerSecond: 1 }] } } } }, async () => 'ok')
  }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /named apart from tier `default`'s limits \(second, hour, day\), got `"hour"` \(string\) in both/ })
  await t.rejects(readyWith({ app: { tiers } }, (app) => {
    app.post('/x', { config: { rateLimit: { quota: { default: [] } } } }, async () => 'ok')
  }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /`rateLimit\.quota\.default\.length` to be an integer from 1 to 8/ })
})

t.test('per(count, period)', async (t) => {
  t.same(per(1000, 'hour'), { capacity: 1000, refillPerSecond: 1000 / 3600 })
  t.same(per(10, 'second'), { capacity: 10, refillPerSecond: 10 })
  t.same(per(5, 'minute'), { capacity: 5, refillPerSecond: 5 / 60 })
  t.same(per(7, 'week'), { capacity: 7, refillPerSecond: 7 / 604_800 })
  t.same(per(20_000, 'day'), { capacity: 20_000, refillPerSecond: 20_000 / 86_400 })
  t.same(per(3, 90), { capacity: 3, refillPerSecond: 3 / 90 })
  t.throws(() => per(0, 'hour'), { code: 'TOLLGATE_INVALID_OPTION', message: /`per\(count\)` to be a finite number ≥ 1, got `0`/ })
  t.throws(() => per(5, 'fortnight' as 'hour'), { code: 'TOLLGATE_INVALID_OPTION', message: /'second', 'minute', 'hour', 'day', 'week' or a number of seconds > 0, got `"fortnight"`/ })
  t.throws(() => per(5, 0), { code: 'TOLLGATE_INVALID_OPTION', message: /a number of seconds > 0, got `0`/ })
  t.throws(() => per(5, 'toString' as 'hour'), { code: 'TOLLGATE_INVALID_OPTION' }, 'own names only')
})

t.test('reset of a user without a tier clears the user under every tier', async (t) => {
  const app = await buildAppOn(memoryStore(), options)
  await routes(app)
  for (const tier of ['vip', undefined]) {
    await app.tollgate.consume({ layer: 'app', user: 'r1', tier }, 5)
  }
  await app.tollgate.reset({ layer: 'app', user: 'r1' })
  t.same((await app.tollgate.peek({ layer: 'app', user: 'r1', tier: 'vip' })).buckets.map((b) => b.tokens), [100])
  t.same((await app.tollgate.peek({ layer: 'app', user: 'r1' })).buckets.map((b) => b.tokens), [10, 1000, 20_000])
  await app.close()
})

t.test('w is the period of per(): no second more from floating point', async (t) => {
  const app = await buildAppOn(memoryStore(), { app: { tiers: { default: [{ name: 'm', ...per(11, 'minute') }, { name: 'd', ...per(11, 'day') }] } } })
  await routes(app)
  t.equal((await app.inject('/')).headers['ratelimit-policy'], '"m";q=11;w=60, "d";q=11;w=86400')
  await app.close()
})
