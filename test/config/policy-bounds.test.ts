/**
 * The largest policies startup accepts (config/check.ts `POLICY_BOUNDS`): capacity and
 * refill ≤ 1e12, and a refilling bucket full again within 1e10 s. Beyond them,
 * headers would print numbers RFC 9651 rejects, so startup fails, naming the
 * option, the value and the bound, wherever a policy is given.
 */
import t from 'tap'
import Fastify from 'fastify'
import tollgate from '../../lib/index.js'
import { POLICY_BOUNDS } from '../../lib/config/check.js'
import { readyWith } from '../helpers.js'

const tiers = { default: { capacity: 20, refillPerSecond: 5 } }

t.test('the bounds', async (t) => {
  t.same(POLICY_BOUNDS, { capacity: 1e12, refillPerSecond: 1e12, secondsToFill: 1e10 })
})

t.test('absurd plugin policies fail startup with TOLLGATE_INVALID_OPTION, naming option, value and bound', async (t) => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['an "unlimited" tier at Number.MAX_SAFE_INTEGER', { app: { tiers: { ...tiers, unlimited: { capacity: Number.MAX_SAFE_INTEGER, refillPerSecond: 1000 } } } },
      /^Invalid fastify-tollgate option: Expected `app\.tiers\.unlimited\.capacity` to be at most 1e12 tokens \(no client reaches 1e12: use it for a tier meant to be unlimited\), got `9007199254740991` \(number\)$/],
    ['capacity 1e21', { edge: { capacity: 1e21, refillPerSecond: 1 } }, /Expected `edge\.capacity` to be at most 1e12 tokens .*, got `1e\+21` \(number\)$/],
    ['capacity just above', { edge: { capacity: 1e12 + 1, refillPerSecond: 1e9 } }, /`edge\.capacity` to be at most 1e12 tokens .*, got `1000000000001`/],
    ['refill above 1e12 per second', { edge: { capacity: 10, refillPerSecond: 1e13 } },
      /Expected `edge\.refillPerSecond` to be at most 1e12 tokens per second, got `10000000000000` \(number\)$/],
    ['a refill that never fills the bucket', { edge: { capacity: 10, refillPerSecond: 1e-300 } },
      /Expected `edge\.refillPerSecond` to fill the bucket of 10 tokens within 1e10 seconds \(about 317 years\), got `1e-300` \(number\), which takes 1e\+301 s; for a bucket that never refills, write `refillPerSecond: 0`$/],
    ['a refill just too slow', { app: { tiers: { default: { capacity: 1e12, refillPerSecond: 99.99 } } } },
      /`app\.tiers\.default\.refillPerSecond` to fill the bucket of 1000000000000 tokens within 1e10 seconds.*got `99\.99` \(number\), which takes 10001000000 s/]
  ]
  for (const [name, options, message] of cases) {
    await t.rejects(readyWith(options), { code: 'TOLLGATE_INVALID_OPTION', statusCode: 500, message }, name)
  }
})

t.test('an absurd route quota fails startup with TOLLGATE_INVALID_ROUTE_CONFIG', async (t) => {
  await t.rejects(readyWith({ app: { tiers } }, (app) => {
    app.get('/report', { config: { rateLimit: { quota: { default: { capacity: 3, refillPerSecond: 1e-10 } } } } }, async () => 'ok')
  }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /route GET \/report: Expected `rateLimit\.quota\.default\.refillPerSecond` to fill the bucket of 3 tokens within 1e10 seconds/ })
  await t.rejects(readyWith({ app: { tiers } }, (app) => {
    app.get('/report', { config: { rateLimit: { quota: { default: { capacity: 1e15, refillPerSecond: 1 } } } } }, async () => 'ok')
  }), { code: 'TOLLGATE_INVALID_ROUTE_CONFIG', message: /`rateLimit\.quota\.default\.capacity` to be at most 1e12 tokens/ })
})

t.test('an absurd fastify.tollgate.consume policy is refused with TOLLGATE_INVALID_OPTION', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 2, refillPerSecond: 1 } })
  await app.ready()
  t.teardown(() => app.close())
  await t.rejects(app.tollgate.consume('k', { capacity: 2e12, refillPerSecond: 1e6 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`policy\.capacity` to be at most 1e12 tokens/ })
  await t.rejects(app.tollgate.consume('k', { capacity: 1, refillPerSecond: 1e-11 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`policy\.refillPerSecond` to fill the bucket of 1 tokens within 1e10 seconds/ })
  t.match(await app.tollgate.consume('k', { capacity: 1e12, refillPerSecond: 100 }), { allowed: true }, 'the largest policy is accepted')
})

t.test('the largest policies start, and so does a bucket that never refills', async (t) => {
  await t.resolves(readyWith({
    edge: { capacity: 1e12, refillPerSecond: 1e12 },
    app: { tiers: { default: { capacity: 1e12, refillPerSecond: 100 }, trial: { capacity: 1, refillPerSecond: 1e-10 }, once: { capacity: 1e12, refillPerSecond: 0 } } }
  }, (app) => {
    app.get('/report', { config: { rateLimit: { quota: { default: { capacity: 1e12, refillPerSecond: 100 } } } } }, async () => 'ok')
  }))
})
