import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Cluster, Redis } from 'ioredis'
import tollgate, { memoryStore, redisStore, type EdgeMode, type RedisStore } from '../lib/index.js'
import { SettlingEdge } from '../lib/stores/settling.js'
import { commandCalls, requireRedis, startCluster, startRedis, type RedisServer } from './redis-server.js'

/** The edge of issue 14's measurement: B = 30, R = 10/s, three replicas. */
const B = 30
const R = 10
const N = 3
/** A settlement interval of virtual time (ms); the timer itself never fires in these tests. */
const I = 100
const NEVER = 2 ** 31 - 1

interface Replicas {
  apps: FastifyInstance[]
  stores: RedisStore[]
  clock: { now: number }
}

/** Three replicas on one Redis, every clock (Redis's included) the test's. */
async function replicas (t: Test, server: RedisServer, mode: EdgeMode, app = false): Promise<Replicas> {
  const clock = { now: 1_000_000 }
  const apps: FastifyInstance[] = []
  const stores: RedisStore[] = []
  for (let i = 0; i < N; i++) {
    const client = new Redis({ port: server.port, enableOfflineQueue: false })
    t.teardown(() => { client.disconnect() })
    // No heartbeat: the replicas are three from the start, whatever the order they start in.
    const store = redisStore({ client, clock: () => clock.now, heartbeatIntervalMs: 0, replicas: N, timeoutMs: 1000, breakerThreshold: 1, probeIntervalMs: 1 })
    const fastify = Fastify()
    await fastify.register(tollgate, {
      store,
      edge: { capacity: B, refillPerSecond: R, mode, ...(mode === 'settle' ? { settleIntervalMs: NEVER } : {}) },
      app: app ? { tiers: { default: { capacity: 1e6, refillPerSecond: 1e6 } } } : false
    })
    fastify.get('/', async () => 'ok')
    await fastify.ready()
    apps.push(fastify)
    stores.push(store)
  }
  t.teardown(async () => { for (const fastify of apps) await fastify.close() })
  return { apps, stores, clock }
}

/**
 * `seconds` of virtual time in steps of 10 ms: at each step one request from the
 * same client to each replica (`spread`) or to the first only (`pinned`); each
 * replica settles every `I` ms, the three at different times.
 */
async function load ({ apps, clock }: Replicas, shape: 'spread' | 'pinned', seconds: number, awaitSettlements = true): Promise<{ admitted: number, statuses: Set<number> }> {
  let admitted = 0
  const statuses = new Set<number>()
  const steps = seconds * 1000 / 10
  for (let step = 0; step < steps; step++) {
    clock.now += 10
    for (const fastify of shape === 'spread' ? apps : apps.slice(0, 1)) {
      const response = await fastify.inject('/')
      statuses.add(response.statusCode)
      if (response.statusCode === 200) admitted++
    }
    for (let j = 0; j < apps.length; j++) {
      if (step % (I / 10) !== (j * 3) % (I / 10)) continue
      // A settlement that Redis does not answer is not waited for (a paused Redis).
      const settlement = (apps[j] as FastifyInstance).tollgate.settle()
      if (awaitSettlements) await settlement
    }
  }
  return { admitted, statuses }
}

if (requireRedis(t)) {
  t.test('three replicas, 10 s, B = 30, R = 10/s: admitted against B + R·t', async (t) => {
    const server = await startRedis(t)
    const results: Record<string, number> = {}
    for (const mode of ['exact', 'replica-share', 'settle'] as const) {
      for (const shape of ['spread', 'pinned'] as const) {
        const group = await replicas(t, server, mode)
        const { admitted, statuses } = await load(group, shape, 10)
        results[`${mode} ${shape}`] = admitted
        t.same([...statuses].sort(), [200, 429], `${mode}, ${shape}: only 200 and 429`)
        await server.client(t).flushall()
      }
    }
    t.comment(JSON.stringify(results))
    // The first request comes at 10 ms, the last at 10 000 ms: t = 9.99 s.
    const exact = Math.floor(B + R * 9.99)
    t.equal(results['exact spread'], exact, `exact, spread: B + R·t = ${exact}`)
    t.equal(results['exact pinned'], exact, `exact, pinned: B + R·t = ${exact}`)
    t.ok((results['replica-share spread'] as number) <= exact, 'replica-share, spread: at most B + R·t')
    const third = (B + R * 9.99) / N
    t.ok(Math.abs((results['replica-share pinned'] as number) - third) <= 1, `replica-share, pinned: a third, ${third.toFixed(1)}`)
    const settleBound = Math.floor(B + R * 9.99 + (N - 1) * (1 + R * I / 1000))
    t.ok((results['settle spread'] as number) <= settleBound, `settle, spread: at most B + R·t + (N − 1)(1 + R·I) = ${settleBound}`)
    t.ok((results['settle pinned'] as number) <= settleBound, `settle, pinned: at most ${settleBound}`)
    t.ok((results['settle pinned'] as number) >= exact - R * N * I / 1000, 'settle, pinned: the whole quota, less at most N settlements\' refill')
  })

  t.test('Redis calls: settle makes none per request; both layers make one', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const scripts = async (): Promise<number> => {
      const calls = await commandCalls(inspector)
      return (calls.evalsha ?? 0) + (calls.eval ?? 0)
    }
    for (const mode of ['exact', 'settle'] as const) {
      const group = await replicas(t, server, mode, true)
      const app = group.apps[0] as FastifyInstance
      // The first calls load the scripts (EVALSHA, then EVAL).
      await app.inject('/')
      await app.tollgate.settle()
      const before = await scripts()
      for (let i = 0; i < 20; i++) {
        group.clock.now += 1000
        t.equal((await app.inject('/')).statusCode, 200)
      }
      const during = await scripts()
      t.equal(during - before, mode === 'exact' ? 40 : 20, `${mode}: ${mode === 'exact' ? 'two calls' : 'one call'} per request allowed by both layers`)
      await app.tollgate.settle()
      t.equal(await scripts() - during, mode === 'exact' ? 0 : 1, `${mode}: a settlement is one call for every key`)
      await inspector.flushall()
    }
  })

  t.test('settle: a flood from one client costs Redis a call per settlement', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const group = await replicas(t, server, 'settle')
    const app = group.apps[0] as FastifyInstance
    const before = (await commandCalls(inspector)).evalsha ?? 0
    let refused = 0
    for (let ms = 1; ms <= 1000; ms++) {
      group.clock.now += 1
      for (const response of await Promise.all([app.inject('/'), app.inject('/')])) if (response.statusCode === 429) refused++
      if (ms % I === 0) await app.tollgate.settle()
    }
    const calls = ((await commandCalls(inspector)).evalsha ?? 0) + ((await commandCalls(inspector)).eval ?? 0) - before
    t.ok(refused > 1900, `${refused} of 2 000 refused`)
    t.ok(calls / 2000 <= 0.01, `${calls} script calls for 2 000 requests`)
  })

  t.test('settle: Redis paused under load; the edge goes on deciding, then converges', async (t) => {
    const server = await startRedis(t)
    const clock = { now: 1_000_000 }
    const apps: FastifyInstance[] = []
    const logs: string[] = []
    for (let i = 0; i < N; i++) {
      const client = new Redis({ port: server.port, enableOfflineQueue: false })
      t.teardown(() => { client.disconnect() })
      const store = redisStore({ client, clock: () => clock.now, heartbeatIntervalMs: 0, replicas: N, timeoutMs: 50, breakerThreshold: 1, probeIntervalMs: 1 })
      const fastify = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { logs.push(line) } } } })
      // A settlement unanswered for I ms of the test's time puts the edge on the replica's share.
      await fastify.register(tollgate, { store, edge: { capacity: B, refillPerSecond: R, mode: 'settle', settleIntervalMs: I } })
      fastify.get('/', async () => 'ok')
      await fastify.ready()
      apps.push(fastify)
    }
    t.teardown(async () => { for (const fastify of apps) await fastify.close() })
    const group = { apps, stores: [], clock }
    const before = await load(group, 'spread', 2)
    server.pause()
    t.teardown(() => { server.resume() })
    const outage = await load(group, 'spread', 3, false)
    server.resume()
    t.same([...outage.statuses].sort(), [200, 429], 'while Redis is paused: only 200 and 429, decided at once')
    t.ok(outage.admitted <= B + R * 3 + N, `while Redis is paused: ${outage.admitted}, each replica its share (B + R·t = ${B + R * 3} together)`)
    t.ok(logs.some((line) => line.includes('settlement failed')), 'the failure is logged')
    // The settlements sent while Redis was paused are answered now; then each replica settles its outage spends.
    for (const fastify of apps) await fastify.tollgate.settle()
    for (const fastify of apps) await fastify.tollgate.settle()
    const after = await load(group, 'pinned', 10)
    t.ok(logs.some((line) => line.includes('back on the shared quota')), 'the recovery is logged')
    const total = before.admitted + outage.admitted + after.admitted
    const bound = B + R * 15 + (N - 1) * (1 + R * I / 1000)
    t.ok(total <= bound, `15 s in all: ${total} admitted, at most ${bound}`)
    // Pinned to one replica after the recovery, the client gets the shared quota, not a third of it.
    t.ok(after.admitted >= R * 10 - (B + N), `after the recovery, pinned: ${after.admitted}`)
  })
}

t.test('edge.mode is checked at startup', async (t) => {
  const edge = { capacity: 10, refillPerSecond: 1 }
  const register = async (options: Record<string, unknown>): Promise<void> => {
    const app = Fastify()
    t.teardown(async () => app.close())
    await app.register(tollgate, options as never)
    await app.ready()
  }
  await t.rejects(register({ edge: { ...edge, mode: 'fast' } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`edge\.mode`.*'exact', 'replica-share' or 'settle', got `"fast"`/ })
  await t.rejects(register({ edge: { ...edge, settleIntervalMs: 50 } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`edge\.settleIntervalMs` only with `edge\.mode: 'settle'`, got it with `edge\.mode: 'exact'`/ })
  await t.rejects(register({ edge: { ...edge, mode: 'settle', settleIntervalMs: 0 } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`edge\.settleIntervalMs`/ })
  const custom = { consume: () => ({ allowed: true, tokens: [1], retryAfterMs: 0 }), close: () => {} }
  await t.rejects(register({ store: custom, edge: { ...edge, mode: 'replica-share' } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`edge\.mode`.*liveReplicas/ })
  await t.rejects(register({ store: { ...custom, liveReplicas: 2 }, edge: { ...edge, mode: 'settle' } }), { code: 'TOLLGATE_INVALID_OPTION', message: /`edge\.mode`.*settle\(\)/ })
  for (const mode of ['exact', 'replica-share', 'settle'] as const) {
    // The memory store never leaves the process: every mode decides the same.
    const clock = { now: 0 }
    const store = memoryStore({ clock: () => clock.now })
    const app = Fastify()
    t.teardown(async () => app.close())
    await app.register(tollgate, { store, edge: { capacity: 2, refillPerSecond: 1, mode } })
    app.get('/', async () => 'ok')
    const statuses = []
    for (let i = 0; i < 3; i++) statuses.push((await app.inject('/')).statusCode)
    t.same(statuses, [200, 200, 429], `memory store, ${mode}: the quota itself`)
  }
})

if (requireRedis(t)) {
  t.test('replica-share: the share follows the live replicas; headers show it; peek, refund, reset act on it', async (t) => {
    const server = await startRedis(t)
    const client = new Redis({ port: server.port, enableOfflineQueue: false })
    t.teardown(() => { client.disconnect() })
    const store = redisStore({ client, heartbeatIntervalMs: 0, replicas: 3 })
    const app = Fastify()
    t.teardown(async () => app.close())
    await app.register(tollgate, { store, edge: { capacity: 30, refillPerSecond: 3, mode: 'replica-share' } })
    app.get('/', async () => 'ok')
    app.post('/login', { config: { rateLimit: { edge: { capacity: 3, refillPerSecond: 0.01 } } } }, async () => 'ok')
    const login = await app.inject({ method: 'POST', url: '/login' })
    t.equal(login.headers['ratelimit-policy'], '"edge";q=10;w=10, "edge-route";q=1;w=300', 'a route\'s own edge bucket: its share too, at least one token')
    t.equal((await app.inject({ method: 'POST', url: '/login' })).statusCode, 429)
    await app.tollgate.reset({ layer: 'edge', ip: '127.0.0.1' })
    const first = await app.inject('/')
    t.equal(first.headers['ratelimit-policy'], '"edge";q=10;w=10', 'a third of the quota')
    t.equal(first.headers.ratelimit, '"edge";r=9;t=1')
    t.equal((await app.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' })).buckets[0]?.capacity, 10)
    t.equal((await app.tollgate.refund({ layer: 'edge', ip: '127.0.0.1' })).tokens, 10)
    store.liveReplicas = 2
    t.equal((await app.inject('/')).headers['ratelimit-policy'], '"edge";q=15;w=10', 'two replicas: half')
    await app.tollgate.reset({ layer: 'edge', ip: '127.0.0.1' })
    t.equal((await app.inject('/')).headers.ratelimit, '"edge";r=14;t=1', 'reset: full again')
    t.same(await server.client(t).keys('tollgate:{ip*'), [], 'Redis holds no edge key')
  })

  t.test('settle: the timer settles, close settles what is left, peek/refund/reset reach Redis', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const client = new Redis({ port: server.port, enableOfflineQueue: false })
    t.teardown(() => { client.disconnect() })
    const app = Fastify()
    await app.register(tollgate, { store: redisStore({ client, heartbeatIntervalMs: 0 }), edge: { capacity: 30, refillPerSecond: 0.001, mode: 'settle', settleIntervalMs: 10 } })
    app.get('/', async () => 'ok')
    for (let i = 0; i < 3; i++) await app.inject('/')
    const key = 'tollgate:{ip:127.0.0.1}:edge'
    const deadline = Date.now() + 5000
    while (await inspector.get(key) === null && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
    t.match(await inspector.get(key), /^27[.\d]* /, 'the timer settled the three requests')
    const peeked = await app.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' })
    t.ok(Math.abs((peeked.buckets[0]?.tokens as number) - 27) < 0.1, 'peek reads Redis')
    await app.tollgate.refund({ layer: 'edge', ip: '127.0.0.1' }, 2)
    t.match(await inspector.get(key), /^29[.\d]* /, 'refund reaches Redis')
    t.equal((await app.inject('/')).headers.ratelimit, '"edge";r=28;t=2000', 'and the view')
    await app.tollgate.reset({ layer: 'edge', ip: '127.0.0.1' })
    t.equal(await inspector.get(key), null, 'reset deletes the bucket')
    t.equal((await app.inject('/')).headers.ratelimit, '"edge";r=29;t=1000', 'and the view: a new one, full')
    await app.inject('/')
    await app.close()
    t.match(await inspector.get(key), /^28[.\d]* /, 'close settled the last two')
  })

  t.test('settle: Redis killed and started again; a debit it did not take goes again', async (t) => {
    const server = await startRedis(t)
    const client = new Redis({ port: server.port, enableOfflineQueue: false, retryStrategy: () => 20 })
    client.on('error', () => {})
    t.teardown(() => { client.disconnect() })
    const clock = { now: 1_000_000 }
    const app = Fastify()
    t.teardown(async () => app.close())
    await app.register(tollgate, { store: redisStore({ client, clock: () => clock.now, heartbeatIntervalMs: 0, replicas: 2, breakerThreshold: 1, probeIntervalMs: 1 }), edge: { capacity: 10, refillPerSecond: 0, mode: 'settle', settleIntervalMs: NEVER } })
    app.get('/', async () => 'ok')
    for (let i = 0; i < 2; i++) await app.inject('/')
    await app.tollgate.settle()
    await server.kill()
    t.equal((await app.inject('/')).statusCode, 200, 'Redis is gone: decided by the view')
    await app.tollgate.settle()
    const during = []
    for (let i = 0; i < 10; i++) during.push((await app.inject('/')).statusCode)
    // The local share starts full: it cannot know what Redis held.
    t.same(during, [200, 200, 200, 200, 200, 429, 429, 429, 429, 429], 'while Redis is away: this replica\'s share, 5 of 10')
    // The breaker is open now (one failure): this settlement is not sent at all.
    await app.tollgate.settle()
    await server.start()
    const deadline = Date.now() + 5000
    while (client.status !== 'ready' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
    clock.now += 10
    await app.tollgate.settle()
    t.match(await server.client(t).get('tollgate:{ip:127.0.0.1}:edge'), /^4 /, 'the six spent since Redis went away were debited once (the two before were lost with it)')
    t.equal((await app.inject('/')).statusCode, 200, 'back on the shared quota')
  })

  t.test('settle: views past maxViews are dropped, their spends still settled', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const client = new Redis({ port: server.port, enableOfflineQueue: false })
    t.teardown(() => { client.disconnect() })
    const clock = { now: 1_000_000 }
    const store = redisStore({ client, clock: () => clock.now, heartbeatIntervalMs: 0 })
    t.teardown(async () => store.close())
    await store.ready()
    const edge = new SettlingEdge({ store, replicas: () => 1, intervalMs: NEVER, clock: () => clock.now, maxViews: 2 })
    t.teardown(async () => edge.close())
    const policy = { capacity: 10, refillPerSecond: 1 }
    const take = (key: string): boolean => edge.consume([{ key, policy, cost: 1 }]).allowed
    t.ok(take('{a}:edge') && take('{b}:edge') && take('{c}:edge'), 'three keys, two views')
    await edge.settleNow()
    t.match(await inspector.get('tollgate:{a}:edge'), /^9 /, 'the dropped view\'s spend was settled')
    t.match(await inspector.get('tollgate:{c}:edge'), /^9 /)
    clock.now += 60_000
    await edge.settleNow()
    await edge.settleNow()
    t.ok(take('{b}:edge'), 'views full and idle are dropped; a new one starts full')
    await edge.settleNow()
    t.match(await inspector.get('tollgate:{b}:edge'), /^9 /)
    // A dropped view's spend that Redis did not take goes again.
    t.ok(take('{b}:edge') && take('{c}:edge') && take('{d}:edge'), 'b dropped with a spend unsettled')
    await server.kill()
    await edge.settleNow()
    t.ok(take('{c}:edge'), 'Redis away: decided by the local share, which starts full')
    await server.start()
    const deadline = Date.now() + 5000
    while (client.status !== 'ready' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
    clock.now += 1
    await edge.settleNow()
    t.match(await inspector.get('tollgate:{b}:edge'), /^9 /, 'b\'s spend reached the restarted Redis')
    t.match(await inspector.get('tollgate:{d}:edge'), /^9 /, 'and d\'s')
  })
}

if (requireRedis(t)) {
  t.test('settle: views dropped and taken again; their spends merged, each key settled once per call', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const client = new Redis({ port: server.port, enableOfflineQueue: false })
    t.teardown(() => { client.disconnect() })
    const store = redisStore({ client, heartbeatIntervalMs: 0 })
    t.teardown(async () => store.close())
    await store.ready()
    const edge = new SettlingEdge({ store, replicas: () => 1, intervalMs: NEVER, clock: () => 0, maxViews: 1 })
    t.teardown(async () => edge.close())
    const policy = { capacity: 10, refillPerSecond: 0 }
    for (const key of ['{a}:edge', '{b}:edge', '{a}:edge', '{b}:edge']) edge.consume([{ key, policy, cost: 1 }])
    await edge.settleNow()
    t.match(await inspector.get('tollgate:{a}:edge'), /^8 /, 'a: two spends, one dropped twice')
    t.match(await inspector.get('tollgate:{b}:edge'), /^8 /, 'b: a dropped spend and its view\'s')
    edge.consume([{ key: '{c}:edge', policy, cost: 1 }])
    await edge.settleNow()
    t.match(await inspector.get('tollgate:{b}:edge'), /^8 /, 'a view dropped with nothing unsettled sends nothing')
    t.match(await inspector.get('tollgate:{c}:edge'), /^9 /)
  })

  t.test('settle on a Redis Cluster: one call per node and maxBatch', async (t) => {
    const cluster = await startCluster(t)
    const client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })), { enableOfflineQueue: true })
    t.teardown(() => { client.disconnect() })
    const app = Fastify()
    t.teardown(async () => app.close())
    await app.register(tollgate, {
      store: redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: 2000, maxBatch: 2 }),
      edge: { capacity: 10, refillPerSecond: 0, mode: 'settle', settleIntervalMs: NEVER, key: (request) => request.headers['x-api-key'] }
    })
    app.get('/', async () => 'ok')
    await app.ready()
    const keys = Array.from({ length: 12 }, (_, i) => `key-${i}`)
    for (const key of keys) await app.inject({ url: '/', headers: { 'x-api-key': key } })
    await app.tollgate.settle()
    let stored = 0
    for (const node of cluster.nodes) {
      const nodeClient = node.client()
      for (const key of await nodeClient.keys('tollgate:{key:*')) {
        t.match(await nodeClient.get(key), /^9 /, `${key}: one spend`)
        stored++
      }
      nodeClient.disconnect()
    }
    t.equal(stored, keys.length, 'every key settled, on its node')
  })
}
