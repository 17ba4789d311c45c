import t from 'tap'
import Fastify from 'fastify'
import tollgate, { memoryStore, type MemoryStore } from '../../lib/index.js'
import { manualClock, storeConformance } from '../helpers.js'

const policy = { capacity: 2, refillPerSecond: 1 }
const take = (store: MemoryStore, key: string, cost = 1) => store.consume([{ key, policy, cost }])

t.test('passes the conformance cases', async (t) => {
  const clock = manualClock()
  await storeConformance(t, memoryStore({ clock: clock.now }), clock.set, 'memory')
})

t.test('answers synchronously: no promise on the hot path', async (t) => {
  const store = memoryStore()
  const result = take(store, 'k')
  t.notOk(result instanceof Promise)
  t.equal(result.allowed, true)
  store.close()
})

t.test('keeps at most maxKeys buckets, dropping the least recently used', async (t) => {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now, maxKeys: 3 })
  for (const key of ['a', 'b', 'c']) take(store, key, 2)
  t.equal(store.size, 3)
  take(store, 'a', 0) // a is now the most recent; b is the oldest
  take(store, 'd', 2)
  t.equal(store.size, 3, 'bounded')
  t.equal(take(store, 'a').allowed, false, 'a was kept (still empty)')
  t.equal(take(store, 'c').allowed, false, 'c was kept (still empty)')
  t.equal(take(store, 'b', 2).allowed, true, 'b was evicted, so it came back full')
  store.close()
})

t.test('a refused key is touched too, so a hot abusive key is not the one evicted', async (t) => {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now, maxKeys: 2 })
  take(store, 'abuser', 2)
  take(store, 'x', 1)
  t.equal(take(store, 'abuser').allowed, false)
  take(store, 'y', 1) // evicts x, the least recently used, not the abuser
  t.equal(take(store, 'abuser').allowed, false, 'still empty')
  store.close()
})

t.test('1M distinct keys stay within maxKeys', async (t) => {
  const store = memoryStore({ maxKeys: 10_000 })
  for (let i = 0; i < 1_000_000; i++) take(store, `k${i}`)
  t.equal(store.size, 10_000)
  store.close()
})

t.test('past its first reservation (2^20 slots) the store grows and keeps every bucket', async (t) => {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now, maxKeys: 1_100_000 })
  for (let i = 0; i < 1_050_000; i++) take(store, `k${i}`)
  t.equal(store.size, 1_050_000)
  t.same(take(store, 'k0').tokens, [0], 'the first bucket kept its state across the copy')
  t.same(take(store, 'k1049999').tokens, [0], 'and so did the last')
  store.close()
})

t.test('sweep drops buckets that are full by now, and stops its timer when empty', async (t) => {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now })
  take(store, 'slow', 2) // empty: full again in 2 s
  take(store, 'fast', 1) // full again in 1 s
  store.consume([{ key: 'never', policy: { capacity: 1, refillPerSecond: 0 }, cost: 1 }])
  clock.set(1000)
  store.sweep()
  t.equal(store.size, 2, 'fast is full by now and dropped')
  clock.set(2000)
  store.sweep()
  t.equal(store.size, 1, 'slow dropped; the never-refilling bucket stays')
  t.equal(take(store, 'slow', 2).allowed, true, 'a dropped bucket is a full one')
  store.close()
  t.equal(store.size, 0)
  const other = memoryStore({ clock: clock.now })
  take(other, 'k', 2)
  clock.set(10_000)
  other.sweep()
  t.equal(other.size, 0)
})

t.test('the sweep timer runs on its interval, is unref\'d, and is cleared by close', async (t) => {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now, sweepIntervalMs: 5 })
  take(store, 'k', 2)
  const timer = (store as unknown as { sweepTimer: NodeJS.Timeout }).sweepTimer
  t.ok(timer, 'a timer runs while there are buckets')
  t.equal(timer.hasRef(), false, 'unref\'d: it never keeps the process alive')
  clock.set(2000)
  await new Promise((resolve) => setTimeout(resolve, 30))
  t.equal(store.size, 0, 'the timer swept the full bucket')
  t.equal((store as unknown as { sweepTimer: unknown }).sweepTimer, undefined, 'and stopped once empty')
  take(store, 'k', 2)
  store.close()
  t.equal((store as unknown as { sweepTimer: unknown }).sweepTimer, undefined, 'close clears it')
})

t.test('closing the app closes the store', async (t) => {
  const store = memoryStore()
  const app = Fastify()
  await app.register(tollgate, { store, edge: { capacity: 1, refillPerSecond: 1 } })
  app.get('/', async () => 'ok')
  await app.inject('/')
  t.equal(store.size, 1)
  await app.close()
  t.equal(store.size, 0)
})

t.test('replicas: N takes this process\'s share of every quota', async (t) => {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now, replicas: 3 })
  t.equal(store.quotaShare, 1 / 3)
  const app = Fastify()
  await app.register(tollgate, { store, edge: { capacity: 30, refillPerSecond: 3 } })
  app.get('/', async () => 'ok')
  let admitted = 0
  for (let i = 0; i < 40; i++) if ((await app.inject('/')).statusCode === 200) admitted++
  t.equal(admitted, 10, '30 ÷ 3')
  const response = await app.inject('/')
  t.equal(response.headers['ratelimit-policy'], '"edge";q=10;w=10', 'headers tell this replica\'s share')
  clock.advance(1000)
  admitted = 0
  for (let i = 0; i < 5; i++) if ((await app.inject('/')).statusCode === 200) admitted++
  t.equal(admitted, 1, '3/s ÷ 3 = 1/s')
  await app.close()
})

t.test('replicas leaving a capacity below 1 fails at startup', async (t) => {
  const app = Fastify()
  await t.rejects(async () => { await app.register(tollgate, { store: memoryStore({ replicas: 3 }), edge: { capacity: 2, refillPerSecond: 1 } }) }, {
    code: 'TOLLGATE_INVALID_OPTION',
    message: /`edge\.capacity` × the store's quota share/
  })
})

t.test('invalid store options fail with a coded error naming the option', async (t) => {
  const cases: Array<[unknown, RegExp]> = [
    [{ maxKeys: 0 }, /Expected `memoryStore\.maxKeys` to be an integer ≥ 1, got `0` \(number\)/],
    [{ replicas: 1.5 }, /`memoryStore\.replicas`.*`1\.5` \(number\)/],
    [{ clock: 5 }, /Expected `memoryStore\.clock` to be a function, got `5` \(number\)/],
    [{ sweepIntervalMs: -1 }, /`memoryStore\.sweepIntervalMs`/],
    [{ maxkeys: 10 }, /Unknown option `memoryStore\.maxkeys`/],
    ['fast', /Expected `memoryStore` to be an object, got `"fast"` \(string\)/]
  ]
  for (const [options, message] of cases) {
    t.throws(() => memoryStore(options as never), { code: 'TOLLGATE_INVALID_OPTION', message }, JSON.stringify(options))
  }
})

t.test('a step over several buckets never evicts one of its own buckets', async (t) => {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now, maxKeys: 2 })
  const step = (cost: number) => store.consume([
    { key: 'old', policy, cost },
    { key: 'new', policy: { capacity: 5, refillPerSecond: 0 }, cost: 1 }
  ])
  take(store, 'old', 1)
  take(store, 'other', 0)
  t.equal(step(1).allowed, true, 'old (known) and new (inserted, evicting `other`)')
  t.equal(take(store, 'old').allowed, false, 'old kept its debit: 2 - 1 - 1 = 0')
  t.same(store.consume([{ key: 'new', policy: { capacity: 5, refillPerSecond: 0 }, cost: 0 }]).tokens, [4], 'new holds 5 - 1')
  const tiny = memoryStore({ clock: clock.now, maxKeys: 1 })
  const decision = tiny.consume([{ key: 'a', policy, cost: 1 }, { key: 'b', policy, cost: 2 }])
  t.same(decision.tokens, [1, 0], 'with maxKeys below the step size the decision is still right')
  t.equal(tiny.size, 1)
  store.close()
  tiny.close()
})
