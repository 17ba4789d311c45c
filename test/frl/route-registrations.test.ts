/**
 * FRL's test/route-rate-limit.test.js, 'Allow multiple different rate limiter
 * registrations': several registrations in one app (README, "Several
 * registrations"), each but one with a `name`: its header members
 * `"<name>.edge"`, its keys apart, a refusal by one giving back what the others
 * took for the request.
 */
import t from 'tap'
import Fastify from 'fastify'
import tollgate, { memoryStore } from '../../lib/index.js'
import { failure, manualClock } from '../helpers.js'
import { JSON_TYPE, trio } from './frl.js'

t.test('FRL: Allow multiple different rate limiter registrations', async (t) => {
  // Same, with a `name` on the second registration: two without a name fail startup
  // (they would share header members, keys and metrics). Each allow-lists the other's
  // route; both on one store, their keys apart (a shared key would refuse `/test` at once).
  const twice = Fastify()
  t.teardown(() => twice.close())
  const unnamed = await failure(async () => {
    await twice.register(tollgate, { edge: { capacity: 1, refillPerSecond: 1 } })
    await twice.register(tollgate, { edge: { capacity: 1, refillPerSecond: 1 } })
  })
  t.equal(unnamed.code, 'TOLLGATE_INVALID_OPTION')
  t.match(unnamed.message, 'Expected a `name` for this registration')
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now })
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(tollgate, { store, headers: 'legacy', edge: { capacity: 1, refillPerSecond: 1 }, allowList: (request) => request.url !== '/test' })
  await app.register(tollgate, { name: 'second', store, headers: 'legacy', edge: { capacity: 1, refillPerSecond: 1 }, allowList: (request) => request.url === '/test' })
  app.get('/', async () => 'hello!')
  app.get('/test', async () => 'hello from another route!')
  for (const url of ['/', '/test']) {
    t.strictSame(trio(await app.inject(url)), { status: 200, limit: '1', remaining: '0', reset: '1' }, url)
    const refused = await app.inject(url)
    t.strictSame(trio(refused), { status: 429, limit: '1', remaining: '0', reset: '1', retryAfter: '1' }, url)
    t.equal(refused.headers['content-type'], JSON_TYPE)
  }

  await t.test('under the default headers, each registration names its members', async (t) => {
    // Two limits on one route, `slow` registered first: one member per registration's
    // bucket, named by it. `burst`'s refusal gives back the token `slow` took for it.
    const clock = manualClock()
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(tollgate, { name: 'slow', store: memoryStore({ clock: clock.now }), edge: { capacity: 10, refillPerSecond: 0.5 } })
    await app.register(tollgate, { name: 'burst', store: memoryStore({ clock: clock.now }), edge: { capacity: 1, refillPerSecond: 1 } })
    app.get('/', async () => 'hello!')
    const first = await app.inject('/')
    t.equal(first.statusCode, 200)
    t.equal(first.headers['ratelimit-policy'], '"slow.edge";q=10;w=20, "burst.edge";q=1;w=1')
    t.equal(first.headers['ratelimit'], '"slow.edge";r=9;t=2, "burst.edge";r=0;t=1')
    t.equal((await app.inject('/')).statusCode, 429, 'refused by burst, after slow took a token')
    clock.advance(1000)
    const third = await app.inject('/')
    t.equal(third.statusCode, 200)
    t.equal(third.headers['ratelimit'], '"slow.edge";r=8;t=3, "burst.edge";r=0;t=1', 'slow got back the token of the refused request')
  })
})
