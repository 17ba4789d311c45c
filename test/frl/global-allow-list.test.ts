/**
 * FRL's test/global-rate-limit.test.js, part 2: the allow-list, the callbacks
 * (`onExceeding`, `onExceeded`, `onBanReach`) and `ban`. FRL's async allow-list
 * is in global-async.
 */
import t from 'tap'
import type { FastifyRequest } from 'fastify'
import type { LimitDecision } from '../../lib/index.js'
import { frlApp, JSON_TYPE, trio } from './frl.js'

const TWO_IN_TWO_SECONDS = { capacity: 2, refillPerSecond: 1 }

t.test('FRL: With ips allowList, allowed ips should not result in rate limiting', async (t) => {
  // Same: an allowed address touches no bucket and gets no rate-limit header.
  const { app } = await frlApp({ edge: TWO_IN_TWO_SECONDS, allowList: ['127.0.0.1'] })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject('/')), { status: 200 })
})

t.test('FRL: With ips allowList, not allowed ips should result in rate limiting', async (t) => {
  const { app } = await frlApp({ edge: TWO_IN_TWO_SECONDS, allowList: ['1.1.1.1'] })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 200, 429])
})

t.test('FRL: With ips allowList', async (t) => {
  // Same; here the list also takes CIDR ranges.
  const { app } = await frlApp({ edge: TWO_IN_TWO_SECONDS, allowList: ['127.0.0.0/8'] })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject('/')), { status: 200 })
  t.equal((await app.inject({ url: '/', remoteAddress: '198.51.100.1' })).statusCode, 200)
  t.equal((await app.inject({ url: '/', remoteAddress: '198.51.100.1' })).statusCode, 200)
  t.equal((await app.inject({ url: '/', remoteAddress: '198.51.100.1' })).statusCode, 429, 'an address outside the range is limited')
})

t.test('FRL: With function allowList', async (t) => {
  // Differs: the predicate gets the request only (FRL: `(req, key)`), and must return
  // `true` (FRL: anything truthy). The key 42 is `edge.key`'s.
  const calls: FastifyRequest[] = []
  const { app } = await frlApp({
    edge: { ...TWO_IN_TWO_SECONDS, key: () => 42 },
    allowList: (request) => { calls.push(request); return request.headers['x-my-header'] !== undefined }
  })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const allowed = { method: 'GET' as const, url: '/', headers: { 'x-my-header': 'FOO BAR' } }
  for (let i = 0; i < 3; i++) t.strictSame(trio(await app.inject(allowed)), { status: 200 })
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 200, 429])
  t.equal(calls.length, 6, 'called once per request by the one layer')
  t.ok(calls.every((request) => typeof request.headers === 'object'))
  // FRL allows on any truthy answer; here only `true` allows.
  const truthy = await frlApp({ edge: TWO_IN_TWO_SECONDS, allowList: ((request: FastifyRequest) => request.headers['x-my-header']) as unknown as (request: FastifyRequest) => boolean })
  t.teardown(() => truthy.app.close())
  truthy.app.get('/', async () => 'hello!')
  const truthyCodes = []
  for (let i = 0; i < 3; i++) truthyCodes.push((await truthy.app.inject(allowed)).statusCode)
  t.strictSame(truthyCodes, [200, 200, 429], 'a truthy string is not `true`: limited')
})

t.test('FRL: With onExceeding option', async (t) => {
  // Differs by design: no callback per admitted request. A hook that runs after the
  // edge sees exactly the requests it admitted: an onRequest hook added after the plugin.
  const { app } = await frlApp({ edge: TWO_IN_TWO_SECONDS })
  t.teardown(() => app.close())
  const admitted: string[] = []
  app.addHook('onRequest', async (request) => { admitted.push(request.ip) })
  app.get('/', async () => 'hello!')
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 200, 429])
  t.strictSame(admitted, ['127.0.0.1', '127.0.0.1'], 'called for the two admitted requests only')
})

t.test('FRL: With onExceeded option', async (t) => {
  // Same, as `onLimit(request, decision)`: once per refusal, with the key in the decision.
  const calls: Array<{ request: FastifyRequest, decision: LimitDecision }> = []
  const { app } = await frlApp({ edge: TWO_IN_TWO_SECONDS, onLimit: (request, decision) => { calls.push({ request, decision }) } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 200, 429])
  t.equal(calls.length, 1)
  t.equal(calls[0]?.request.ip, '127.0.0.1')
  t.match(calls[0]?.decision, { layer: 'edge', allowed: false, retryAfterMs: 1000, buckets: [{ name: 'edge', key: '{ip:127.0.0.1}:edge', capacity: 2 }] })
})

/** FRL's `{ max: 1, ban: 1 }` (its default window, a minute): `ban: n` is a penalty `after: n + 1` refusals, with status 403. */
const MAX_1_BAN_1 = { capacity: 1, refillPerSecond: 1 / 60, penalty: { after: 2, withinSeconds: 60, seconds: 60, status: 403 as const } }

t.test('FRL: With onBanReach option', async (t) => {
  // Differs: `onBanReach` is `onLimit` with `decision.penalty.state === 'started'`. The
  // penalty is a fixed time (here FRL's window, 60 s), refused 403 until its end.
  const states: Array<string | undefined> = []
  const { app } = await frlApp({ edge: MAX_1_BAN_1, onLimit: (_request, decision) => { states.push(decision.penalty?.state) } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 429, 403])
  t.strictSame(states, [undefined, 'started'], 'the ban is reached once, on the 403')
})

t.test('FRL: With ban', async (t) => {
  const { app } = await frlApp({ edge: MAX_1_BAN_1 })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  const codes = [(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/')).statusCode]
  t.strictSame(codes, [200, 429, 403])
  const banned = await app.inject('/')
  t.equal(banned.statusCode, 403, 'and during the penalty')
  t.equal(banned.json().code, 'TOLLGATE_PENALIZED')
  t.equal(banned.headers['retry-after'], '60', 'Retry-After runs to the end of the penalty')
})

t.test('FRL: ban directly', async (t) => {
  // FRL's `ban: 0` (403 on the first refusal) is `penalty: { after: 1, status: 403 }`; the
  // ban lasts FRL's window, 1 s. Differs: the 403 body has the code and the penalty's message.
  const { app, clock } = await frlApp({ edge: { capacity: 2, refillPerSecond: 2, penalty: { after: 1, withinSeconds: 1, seconds: 1, status: 403 } } })
  t.teardown(() => app.close())
  app.get('/', async () => 'hello!')
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '0', reset: '1' })
  const banned = await app.inject('/')
  t.strictSame(trio(banned), { status: 403, limit: '2', remaining: '0', reset: '1', retryAfter: '1' })
  t.equal(banned.headers['content-type'], JSON_TYPE)
  t.strictSame(banned.json(), { statusCode: 403, code: 'TOLLGATE_PENALIZED', error: 'Forbidden', message: 'Refused for 1 second: too many requests after being limited' })
  clock.advance(1100)
  t.strictSame(trio(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '1' })
})
