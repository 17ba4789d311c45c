/**
 * FRL's test/group-rate-limit.test.js. There is no `groupId` (a route config
 * naming it fails startup). A group of routes sharing one limit is one limiter
 * carried by each (`fastify.tollgate.limiter`, MIGRATING.md); a group of one
 * route is the route's own edge bucket (`config.rateLimit.edge`), with
 * `replace: true` where FRL's route limit stands instead of the global one.
 * (In FRL 11, routes with one `groupId` still count apart: fastify-rate-limit#463.)
 */
import t from 'tap'
import { failure, readyWith } from '../helpers.js'
import { frlApp, JSON_TYPE, tooMany, trio } from './frl.js'

/** FRL's `{ max: 2, timeWindow: 500 }`: 2 at once, then 2 per 500 ms. */
const TWO_PER_HALF_SECOND = { capacity: 2, refillPerSecond: 4 }

t.test('FRL: GroupId from routeConfig', async (t) => {
  // Differs: the group is a limiter the routes carry, not a string in their config; two
  // routes with it share its bucket, and FRL's headers are its own (the legacy trio shows
  // the bucket with the fewest whole tokens: the group's 2, not the edge's 10).
  const { app } = await frlApp({ edge: { capacity: 10, refillPerSecond: 10 } })
  t.teardown(() => app.close())
  const group1 = app.tollgate.limiter({ name: 'group1', ...TWO_PER_HALF_SECOND })
  app.get('/routeWithGroupId', { onRequest: group1 }, async () => 'hello from route with groupId!')
  app.get('/sameGroup', { onRequest: group1 }, async () => 'hello from the same group!')
  t.strictSame(trio(await app.inject({ url: '/routeWithGroupId', method: 'GET' })), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/sameGroup')), { status: 200, limit: '2', remaining: '0', reset: '1' }, "the group's bucket, taken by either route")
  const refused = await app.inject('/routeWithGroupId')
  t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' }, 'the group holds 2 for both routes together')
  t.equal(refused.headers['content-type'], JSON_TYPE)
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
  // Same: under a global limit of 2 per 500 ms, two routes whose own limits replace it
  // (`replace: true`), each counted apart (each group here has one route).
  const { app, clock } = await frlApp({ edge: TWO_PER_HALF_SECOND })
  t.teardown(() => app.close())
  app.get('/route1', { config: { rateLimit: { edge: TWO_PER_HALF_SECOND, replace: true } } }, async () => 'hello from route 1!')
  app.get('/route2', { config: { rateLimit: { edge: { capacity: 2, refillPerSecond: 2 }, replace: true } } }, async () => 'hello from route 2!')
  for (const url of ['/route1', '/route2']) {
    t.strictSame(trio(await app.inject(url)), { status: 200, limit: '2', remaining: '1', reset: '1' }, url)
    t.strictSame(trio(await app.inject(url)), { status: 200, limit: '2', remaining: '0', reset: '1' }, url)
    const refused = await app.inject(url)
    t.strictSame(trio(refused), { status: 429, limit: '2', remaining: '0', reset: '1', retryAfter: '1' }, url)
    t.equal(refused.headers['content-type'], JSON_TYPE)
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
