/** `protect` and the routes' `critical` and `latencyMs`, checked at startup (config/protect.ts, config/route.ts). */
import t from 'tap'
import { checkOptions } from '../../lib/config/options.js'
import { failure, readyWith } from '../helpers.js'

const app = { tiers: { vip: { capacity: 10, refillPerSecond: 1 }, default: { capacity: 5, refillPerSecond: 1 }, anonymous: { capacity: 2, refillPerSecond: 1 } } }
const gauge = { read: () => 0, target: 2 }

t.test('defaults: the other tiers, then default, then anonymous; a floor of 4, a ceiling of 10 000, every 100 ms, 503', async (t) => {
  const plan = checkOptions({ app: { tiers: { default: app.tiers.default, anonymous: app.tiers.anonymous, gold: app.tiers.vip, silver: app.tiers.vip } }, protect: { gauge } }).protect
  t.same(plan?.priorities, ['gold', 'silver', 'default', 'anonymous'])
  t.match(plan, { minConcurrency: 4, maxConcurrency: 10_000, intervalMs: 100, status: 503, latencyMs: undefined, eventLoopDelayMs: undefined })
  t.same(checkOptions({ app: { tiers: { default: app.tiers.default } }, protect: { eventLoopDelayMs: 50 } }).protect?.priorities, ['default'])
  t.same(checkOptions({ app, protect: { gauge, priorities: ['anonymous', 'vip', 'default'] } }).protect?.priorities, ['anonymous', 'vip', 'default'], 'any order, each tier once')
  t.equal(plan?.initialConcurrency, undefined, 'the control law\'s own start')
  t.equal(checkOptions({ app, protect: { gauge, initialConcurrency: 400 } }).protect?.initialConcurrency, 400)
  t.equal(checkOptions({ app, protect: false }).protect, undefined)
  t.equal(checkOptions({ app }).protect, undefined)
})

const rejected: Array<[string, unknown, RegExp]> = [
  ['without app', { edge: { capacity: 1, refillPerSecond: 1 }, protect: { gauge } }, /Expected `app` with `protect`/],
  ['no signal', { app, protect: {} }, /Expected at least one signal in `protect`: `eventLoopDelayMs`, `latencyMs` or `gauge`/],
  ['not an object', { app, protect: true }, /`protect`/],
  ['an unknown key', { app, protect: { gauge, latency: 50 } }, /Unknown option `protect\.latency`/],
  ['a zero latency target', { app, protect: { latencyMs: 0 } }, /Expected `protect\.latencyMs` to be a number > 0 and ≤ 3600000, got `0`/],
  ['an event-loop target that is a string', { app, protect: { eventLoopDelayMs: '50' } }, /Expected `protect\.eventLoopDelayMs` to be a number > 0/],
  ['a gauge without read', { app, protect: { gauge: { target: 2 } } }, /Expected `protect\.gauge\.read` to be a function/],
  ['a gauge target of 0', { app, protect: { gauge: { read: () => 0, target: 0 } } }, /Expected `protect\.gauge\.target` to be a number > 0/],
  ['a gauge with an unknown key', { app, protect: { gauge: { ...gauge, max: 3 } } }, /Unknown option `protect\.gauge\.max`/],
  ['a tier not configured', { app, protect: { gauge, priorities: ['vip', 'gold', 'default', 'anonymous'] } }, /Expected `protect\.priorities\[1\]` to be a tier of `app\.tiers` \('vip', 'default', 'anonymous'\), got `"gold"` \(string\)/],
  ['a tier twice', { app, protect: { gauge, priorities: ['vip', 'vip', 'default', 'anonymous'] } }, /Expected `protect\.priorities\[1\]` to be each tier once/],
  ['a tier missing', { app, protect: { gauge, priorities: ['vip', 'default'] } }, /to name every tier of `app\.tiers`, highest priority first; missing: 'anonymous'/],
  ['priorities not an array', { app, protect: { gauge, priorities: 'vip' } }, /Expected `protect\.priorities` to be an array of tier names/],
  ['a floor of 0', { app, protect: { gauge, minConcurrency: 0 } }, /Expected `protect\.minConcurrency` to be an integer from 1/],
  ['a ceiling under the floor', { app, protect: { gauge, minConcurrency: 10, maxConcurrency: 5 } }, /Expected `protect\.maxConcurrency` to be an integer from 10/],
  ['a start under the floor', { app, protect: { gauge, minConcurrency: 12, initialConcurrency: 10 } }, /Expected `protect\.initialConcurrency` to be an integer from 12 to 10000, got `10`/],
  ['a start above the ceiling', { app, protect: { gauge, maxConcurrency: 50, initialConcurrency: 100 } }, /Expected `protect\.initialConcurrency` to be an integer from 4 to 50, got `100`/],
  ['a start that is no integer', { app, protect: { gauge, initialConcurrency: 2.5 } }, /Expected `protect\.initialConcurrency` to be an integer/],
  ['an interval of 5 ms', { app, protect: { gauge, intervalMs: 5 } }, /Expected `protect\.intervalMs` to be an integer from 10 to 60000, got `5`/],
  ['a status of 500', { app, protect: { gauge, status: 500 } }, /Expected `protect\.status` to be 503 or 429, got `500`/]
]

t.test('a bad `protect` fails at startup with TOLLGATE_INVALID_OPTION, naming the option, the value and what was expected', async (t) => {
  for (const [name, options, message] of rejected) {
    const { code, message: said } = await failure(() => checkOptions(options))
    t.equal(code, 'TOLLGATE_INVALID_OPTION', name)
    t.match(said, message, name)
  }
})

t.test('a route\'s `critical` and `latencyMs` are checked at startup', async (t) => {
  const options = { app, protect: { gauge } }
  const route = (rateLimit: unknown) => (fastify: { get: (path: string, options: object, handler: () => string) => void }): void => { fastify.get('/', { config: { rateLimit } }, () => 'x') }
  await t.resolves(readyWith(options, route({ critical: true, latencyMs: 2000 })))
  t.match(await failure(() => readyWith(options, route({ critical: 'yes' }))), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /Expected `rateLimit\.critical` to be a boolean, got `"yes"` \(string\)/ })
  t.match(await failure(() => readyWith(options, route({ latencyMs: -1 }))), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /Expected `rateLimit\.latencyMs` to be a number of ms > 0/ })
  // Settings that would do nothing are no silent typo.
  for (const rateLimit of [{ critical: true }, { latencyMs: 200 }]) {
    const named = Object.keys(rateLimit)[0] as string
    t.match(await failure(() => readyWith({ app }, route(rateLimit))), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: new RegExp(`\`rateLimit\\.${named}\` belongs to capacity protection, which runs in the app layer: set the \`protect\` option`) }, JSON.stringify(rateLimit))
    t.match(await failure(() => readyWith(options, route({ ...rateLimit, app: false }))), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /the app layer leaves this route out/ }, `${JSON.stringify(rateLimit)} with app: false`)
  }
  await t.resolves(readyWith({ app }, route({ critical: false })), 'critical: false asks nothing')
  t.match(await failure(() => readyWith({ app }, route({ critical: true, latencyMs: 5 }))), { message: /`rateLimit\.critical` and `rateLimit\.latencyMs` belong to capacity protection/ })
})
