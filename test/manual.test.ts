import t from 'tap'
import Fastify from 'fastify'
import tollgate, { memoryStore } from '../lib/index.js'
import { manualClock } from './helpers.js'

t.test('fastify.tollgate.consume takes from a bucket by hand', async (t) => {
  const clock = manualClock()
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ clock: clock.now }), edge: { capacity: 1, refillPerSecond: 1 } })
  await app.ready()
  const jobs = { capacity: 3, refillPerSecond: 1 }
  const first = await app.tollgate.consume('jobs:tenant-1', jobs, 2)
  t.match(first, { layer: 'manual', allowed: true, cost: 2, retryAfterMs: 0, buckets: [{ name: 'manual', capacity: 3, tokens: 1 }] })
  const second = await app.tollgate.consume('jobs:tenant-1', jobs, 2)
  t.match(second, { allowed: false, retryAfterMs: 1000 })
  t.match(await app.tollgate.consume('jobs:tenant-2', jobs), { allowed: true }, 'another key')
  t.match(await app.tollgate.consume('jobs:tenant-1', jobs), { allowed: true, buckets: [{ tokens: 0 }] }, 'default cost 1')
  await app.close()
})

t.test('manual keys live apart from request keys, and shares apply', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ replicas: 2 }), edge: { capacity: 2, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  await app.ready()
  const decision = await app.tollgate.consume('127.0.0.1', { capacity: 4, refillPerSecond: 2 })
  t.match(decision.buckets[0], { capacity: 2, refillPerSecond: 1, tokens: 1, key: '{manual:127.0.0.1}:manual' })
  t.equal((await app.inject('/')).statusCode, 200, 'the edge bucket of 127.0.0.1 is untouched')
  await app.close()
})

t.test('invalid manual arguments throw a coded error', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 2, refillPerSecond: 1 } })
  await app.ready()
  await t.rejects(app.tollgate.consume('', { capacity: 1, refillPerSecond: 1 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`key` to be a non-empty string/ })
  await t.rejects(app.tollgate.consume('k', { capacity: 0, refillPerSecond: 1 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`policy\.capacity`/ })
  await t.rejects(app.tollgate.consume('k', { capacity: 1, refillPerSecond: 1 }, -1), { code: 'TOLLGATE_INVALID_OPTION', message: /`cost`/ })
  await app.close()
  const shared = Fastify()
  await shared.register(tollgate, { store: memoryStore({ replicas: 4 }), edge: { capacity: 4, refillPerSecond: 1 } })
  await t.rejects(shared.tollgate.consume('k', { capacity: 2, refillPerSecond: 1 }), { code: 'TOLLGATE_INVALID_OPTION', message: /`policy\.capacity` × the store's quota share \(0\.25\)/ }, 'a share below one token')
  await shared.close()
})

t.test('a manual cost above this replica\'s share overdraws a full share; above the whole quota it never passes', async (t) => {
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ replicas: 3 }), edge: { capacity: 3, refillPerSecond: 1 } })
  await app.ready()
  const policy = { capacity: 20, refillPerSecond: 0 }
  const heavy = await app.tollgate.consume('export', policy, 10)
  t.match(heavy, { allowed: true, cost: 10 })
  t.ok(Math.abs((heavy.buckets[0]?.tokens ?? 0) - (20 / 3 - 10)) < 1e-9, 'the whole cost was debited: the share, 20 / 3, is 3.33 in debt')
  t.match(await app.tollgate.consume('export', policy, 1), { allowed: false, retryAfterMs: Infinity }, 'and it never refills')
  t.match(await app.tollgate.consume('other', policy, 21), { allowed: false, retryAfterMs: Infinity, cost: 21 })
  await app.close()
})
