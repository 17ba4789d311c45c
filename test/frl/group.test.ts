/**
 * FRL's test/group-rate-limit.test.js. There is no `groupId` (a route config
 * naming it fails startup). A group of routes sharing one limit is a hook on
 * each, taking from one bucket with `fastify.tollgate.consume` (MIGRATING.md);
 * a group of one route is the route's own edge bucket (`config.rateLimit.edge`).
 * (In FRL 11, routes with one `groupId` still count apart: fastify-rate-limit#463.)
 */
import t from 'tap'
import { failure, readyWith } from '../helpers.js'
import { consumeHook, frlApp, JSON_TYPE, tooMany, trio } from './frl.js'

/** FRL's `{ max: 2, timeWindow: 500 }`: 2 at once, then 2 per 500 ms. */
const TWO_PER_HALF_SECOND = { capacity: 2, refillPerSecond: 4 }

t.test('FRL: GroupId from routeConfig', async (t) => {
  // Differs: the group is a hook of the app's; two routes with it share its bucket. The
  // hook writes Retry-After on a refusal, not the X-RateLimit trio (the edge's is sent).
  const { app } = await frlApp({ edge: { capacity: 10, refillPerSecond: 10 } })
  t.teardown(() => app.close())
  const group1 = consumeHook(app, 'group1', TWO_PER_HALF_SECOND)
  app.get('/routeWithGroupId', { onRequest: group1 }, async () => 'hello from route with groupId!')
  app.get('/sameGroup', { onRequest: group1 }, async () => 'hello from the same group!')
  t.equal((await app.inject({ url: '/routeWithGroupId', method: 'GET' })).statusCode, 200)
  t.equal((await app.tollgate.peek('group1:127.0.0.1', TWO_PER_HALF_SECOND)).buckets[0]?.tokens, 1, "the group's bucket was taken")
  t.equal((await app.inject('/sameGroup')).statusCode, 200)
  const refused = await app.inject('/routeWithGroupId')
  t.equal(refused.statusCode, 429, 'the group holds 2 for both routes together')
  t.equal(refused.headers['retry-after'], '1')
  t.strictSame(refused.json(), tooMany(1))
})

t.test('FRL: GroupId from routeOptions', async (t) => {
  // Same: a route's own limit, its own bucket.
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/routeWithGroupIdFromOptions', { config: { rateLimit: { edge: TWO_PER_HALF_SECOND } } }, async () => 'hello from route with groupId from options!')
  t.strictSame(trio(await app.inject({ url: '/routeWithGroupIdFromOptions', method: 'GET' })), { status: 200, limit: '2', remaining: '1', reset: '1' })
})

t.test('FRL: No groupId provided', async (t) => {
  const { app } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/noGroupId', { config: { rateLimit: { edge: TWO_PER_HALF_SECOND } } }, async () => 'hello from no groupId route!')
  const get = async () => app.inject({ url: '/noGroupId', method: 'GET' })
  t.strictSame(trio(await get()), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await get()), { status: 200, limit: '2', remaining: '0', reset: '1' })
  const refused = await get()
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(refused.headers['content-type'], JSON_TYPE)
  t.strictSame(refused.json(), tooMany(1))
})

t.test('FRL: With multiple routes and custom groupId', async (t) => {
  // Same, as two routes with their own buckets (each group here has one route).
  const { app, clock } = await frlApp({ edge: { global: false } })
  t.teardown(() => app.close())
  app.get('/route1', { config: { rateLimit: { edge: TWO_PER_HALF_SECOND } } }, async () => 'hello from route 1!')
  app.get('/route2', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 } } } }, async () => 'hello from route 2!')
  for (const url of ['/route1', '/route2']) {
    t.strictSame(trio(await app.inject(url)), { status: 200, limit: '2', remaining: '1', reset: '1' }, url)
    t.strictSame(trio(await app.inject(url)), { status: 200, limit: '2', remaining: '0', reset: '1' }, url)
    const refused = await app.inject(url)
    t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' }, url)
    t.strictSame(refused.json(), tooMany(1))
  }
  clock.advance(1000)
  t.strictSame(trio(await app.inject('/route1')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/route2')), { status: 200, limit: '2', remaining: '1', reset: '1' })
})

t.test('FRL: Invalid groupId type', async (t) => {
  // Differs: any `groupId` is refused (not only a non-string), at `ready()`, naming the route.
  const bad = await failure(() => readyWith({ edge: { capacity: 2, refillPerSecond: 2 } }, (app) => {
    app.get('/invalidGroupId', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 }, groupId: 123 } as never } }, async () => 'x')
  }))
  t.equal(bad.code, 'TOLLGATE_INVALID_ROUTE_CONFIG')
  t.match(bad.message, 'on route GET /invalidGroupId: Unknown option `rateLimit.groupId`')
})
