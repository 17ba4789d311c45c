import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Cluster, Redis } from 'ioredis'
import tollgate, { memoryStore, redisStore, type EdgeMode, type RedisStore, type Store } from '../../lib/index.js'
import { SettlingEdge } from '../../lib/stores/settling/index.js'
import { commandCalls, requireRedis, startCluster, startRedis, type RedisServer } from '../redis-server.js'

/** The edge of issue 14's measurement: B = 30, R = 10/s, three replicas. */
const B = 30
const R = 10
const N = 3
/** A settlement interval of virtual time (ms); the timer (NEVER: a minute) does not fire in these tests. */
const I = 100
const NEVER = 60_000

interface Replicas {
  apps: FastifyInstance[]
  stores: RedisStore[]
  clock: { now: number }
}

interface ReplicaOptions {
  /** The app layer too (a quota no test exhausts). */
  app?: boolean
  capacity?: number
  refillPerSecond?: number
  count?: number
}

/** `count` (default three) replicas on one Redis, every clock (Redis's included) the test's; closed when `t` ends. */
async function replicas (t: Test, server: RedisServer, mode: EdgeMode, options: ReplicaOptions = {}): Promise<Replicas> {
  const { app = false, capacity = B, refillPerSecond = R, count = N } = options
  const clock = { now: 1_000_000 }
  const apps: FastifyInstance[] = []
  const stores: RedisStore[] = []
  for (let i = 0; i < count; i++) {
    const client = new Redis({ port: server.port, enableOfflineQueue: false })
    t.teardown(() => { client.disconnect() })
    // No heartbeat: the replicas are all counted from the start, whatever the order they start in.
    const store = redisStore({ client, clock: () => clock.now, heartbeatIntervalMs: 0, replicas: count, timeoutMs: 1000, breakerThreshold: 1, probeIntervalMs: 1 })
    const fastify = Fastify()
    await fastify.register(tollgate, {
      store,
      edge: mode === 'settle' ? { capacity, refillPerSecond, mode, settleIntervalMs: NEVER } : { capacity, refillPerSecond, mode },
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
    t.ok((results['settle spread'] as number) <= exact, `settle, spread: at most B + R·t = ${exact}`)
    t.ok((results['settle pinned'] as number) <= exact, `settle, pinned: at most B + R·t = ${exact}`)
    t.ok((results['settle pinned'] as number) >= exact - R * N * I / 1000, 'settle, pinned: the whole quota, less at most N settlements\' refill')
  })

  t.test('replica-share: scale-up 3 → 6 adds at most Σ B/N of the new replicas + R·I (I the heartbeat interval)', async (t) => {
    const server = await startRedis(t)
    const { apps, stores, clock } = await replicas(t, server, 'replica-share', { count: 2 * N })
    // The new replicas start one after another: each one's first heartbeat counts itself and those before it
    // (4, 5, 6); the first three learn of them at their next heartbeat, up to I later.
    const heartbeatMs = 2000
    const startMs = 3000
    for (const store of stores) store.liveReplicas = N
    const steps: number[] = []
    for (let step = 0; step < 800; step++) {
      clock.now += 10
      const ms = (step + 1) * 10
      if (ms === startMs) stores.slice(N).forEach((store, i) => { store.liveReplicas = N + 1 + i })
      if (ms === startMs + heartbeatMs) for (const store of stores) store.liveReplicas = 2 * N
      let admitted = 0
      for (const fastify of ms < startMs ? apps.slice(0, N) : apps) {
        while ((await fastify.inject('/')).statusCode === 200) admitted++
      }
      steps.push(admitted)
    }
    // The new replicas' first shares, and the refill's excess while the first three still count three.
    const added = [N + 1, N + 2, N + 3].reduce((total, n) => total + B / n, 0)
    let worst = { excess: -Infinity, from: 0, to: 0, admitted: 0 }
    for (let from = 0; from < steps.length; from++) {
      let admitted = 0
      for (let to = from; to < steps.length; to++) {
        admitted += steps[to] as number
        const scaled = (from + 1) * 10 <= startMs && (to + 1) * 10 >= startMs
        const excess = admitted - (B + R * (to - from) / 100 + (scaled ? added + R * heartbeatMs / 1000 : 0))
        if (excess > worst.excess) worst = { excess, from, to, admitted }
      }
    }
    const stated = B / (N + 1) * N + R * heartbeatMs / 1000
    // From a drained bucket (every replica pushed until refused since the start), what the scale-up adds to R·t.
    let extra = -Infinity
    for (let from = 100; from < startMs / 10; from++) {
      let admitted = 0
      for (let to = from; to < steps.length; to++) {
        admitted += steps[to] as number
        if ((to + 1) * 10 >= startMs) extra = Math.max(extra, admitted - R * (to - from + 1) / 100)
      }
    }
    t.ok(extra >= added - 1 && extra <= stated, `from a drained bucket, the scale-up adds ${extra.toFixed(1)} to R·t: the new shares (${added.toFixed(1)}) and some refill, at most ${stated.toFixed(1)}`)
    t.ok(added <= B / (N + 1) * N, `the new replicas' first shares: ${added.toFixed(1)}, at most Σ B/(N+1) = ${(B / (N + 1) * N).toFixed(1)}`)
    t.ok(worst.excess <= 0, `over any window: ${worst.admitted} admitted from ${(worst.from + 1) * 10} to ${(worst.to + 1) * 10} ms, ${worst.excess.toFixed(1)} from B + R·t (+ ${stated.toFixed(1)} across the scale-up)`)
  })

  t.test('settle: a client pinned to one replica, in bursts at the refill rate, gets what exact gives', async (t) => {
    // The new-user read's pattern: 6 at once every 600 ms (R exactly) for 10 s. An idle view's
    // reservation, spent by a burst, was not topped up until a request was refused on it.
    const server = await startRedis(t)
    const results: Record<string, number> = {}
    for (const mode of ['exact', 'settle'] as const) {
      const { apps, clock } = await replicas(t, server, mode)
      let admitted = 0
      for (let step = 0; step < 1000; step++) {
        clock.now += 10
        if (step % 60 === 0) {
          for (let i = 0; i < 6; i++) if ((await (apps[0] as FastifyInstance).inject('/')).statusCode === 200) admitted++
        }
        for (let j = 0; j < apps.length; j++) {
          if (step % (I / 10) === (j * 3) % (I / 10)) await (apps[j] as FastifyInstance).tollgate.settle()
        }
      }
      results[mode] = admitted
      await server.client(t).flushall()
    }
    t.equal(results.exact, 102, 'exact: every one of the 17 bursts of 6')
    t.equal(results.settle, results.exact, `settle: ${results.settle}, as exact`)
  })

  t.test('settle: every replica pushed until refused at every step: B + R·t, whatever B', async (t) => {
    const server = await startRedis(t)
    for (const [capacity, refill, replicaCount] of [[300, 1, 3], [1000, 1, 4], [30, 10, 3]] as const) {
      const { apps, clock } = await replicas(t, server, 'settle', { capacity, refillPerSecond: refill, count: replicaCount })
      let admitted = 0
      for (let step = 0; step < 200; step++) {
        clock.now += 10
        for (const fastify of apps) {
          while ((await fastify.inject('/')).statusCode === 200) admitted++
        }
        for (let j = 0; j < apps.length; j++) {
          if (step % 10 === Math.floor(j * 10 / apps.length)) await (apps[j] as FastifyInstance).tollgate.settle()
        }
      }
      const bound = Math.floor(capacity + refill * 1.99)
      t.ok(admitted <= bound, `B = ${capacity}, R = ${refill}/s, ${replicaCount} replicas, 2 s: ${admitted}, at most ${bound}`)
      await server.client(t).flushall()
    }
  })

  t.test('Redis calls: settle makes none per request; both layers make one', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const scripts = async (): Promise<number> => {
      const calls = await commandCalls(inspector)
      return (calls.evalsha ?? 0) + (calls.eval ?? 0)
    }
    for (const mode of ['exact', 'settle'] as const) {
      const group = await replicas(t, server, mode, { app: true })
      const app = group.apps[0] as FastifyInstance
      // The first calls load the scripts (EVALSHA, then EVAL).
      await app.inject('/')
      await app.tollgate.settle()
      const before = await scripts()
      // Within what the first settlement reserved for this replica (settle): 9 of its share of 10.
      for (let i = 0; i < 8; i++) t.equal((await app.inject('/')).statusCode, 200)
      const during = await scripts()
      t.equal(during - before, mode === 'exact' ? 16 : 8, `${mode}: ${mode === 'exact' ? 'two calls' : 'one call'} per request allowed by both layers`)
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
    // A settlement merely late is no failure (the edge spends what it holds); one unanswered past its
    // deadline (max(1 s, 10 × the interval), real time) puts the edge on the replica's credit.
    let held = 0
    for (const fastify of apps) if ((await fastify.inject('/')).statusCode === 200) held++
    await Promise.all(apps.map(async (fastify) => fastify.tollgate.settle()))
    const outage = await load(group, 'spread', 3, false)
    outage.admitted += held
    server.resume()
    t.same([...outage.statuses].sort(), [200, 429], 'while Redis is paused: only 200 and 429, decided at once')
    t.ok(outage.admitted <= B + R * 3 + N, `while Redis is paused: ${outage.admitted}, each replica what it held, then its share of the refill (B + R·t = ${B + R * 3} together)`)
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
  const invalid = { code: 'TOLLGATE_INVALID_OPTION' }
  await t.rejects(register({ edge: { ...edge, mode: 'fast' } }), { ...invalid, message: /`edge\.mode` to be 'exact', 'replica-share' or 'settle', got `"fast"`/ })
  await t.rejects(register({ edge: { ...edge, mode: null } }), { ...invalid, message: /`edge\.mode`.*got `null`/ })
  await t.rejects(register({ edge: { ...edge, settleIntervalMs: 50 } }), { ...invalid, message: /`edge\.settleIntervalMs` only with `edge\.mode: 'settle'`, got it with `edge\.mode` left to its default, 'exact'/ })
  await t.rejects(register({ edge: { ...edge, mode: 'replica-share', settleIntervalMs: 50 } }), { ...invalid, message: /got it with `edge\.mode: 'replica-share'`/ })
  for (const interval of [0, 0.5, 60_001]) {
    await t.rejects(register({ edge: { ...edge, mode: 'settle', settleIntervalMs: interval } }), { ...invalid, message: /`edge\.settleIntervalMs`/ })
  }
  const custom = { consume: () => ({ allowed: true, tokens: [1], retryAfterMs: 0 }), close: () => {} }
  await t.rejects(register({ store: custom, edge: { ...edge, mode: 'replica-share' } }), { ...invalid, message: /a store with `liveReplicas` \(as redisStore has\) for `edge\.mode: 'replica-share'`/ })
  await t.rejects(register({ store: { ...custom, liveReplicas: 2 }, edge: { ...edge, mode: 'settle' } }), { ...invalid, message: /a store with `liveReplicas` and `settle\(\)`.*use `edge\.mode: 'exact'`/ })
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

/** A Redis client for one test, its store not yet made; `retryStrategy` reconnects fast after a restart. */
function clientOf (t: Test, server: RedisServer): Redis {
  const client = new Redis({ port: server.port, enableOfflineQueue: false, retryStrategy: () => 20 })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  return client
}

async function ready (client: Redis): Promise<void> {
  const deadline = Date.now() + 5000
  while (client.status !== 'ready' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
}

if (requireRedis(t)) {
  t.test('replica-share: the share follows the live replicas; headers show it; peek, refund, reset act on it', async (t) => {
    const server = await startRedis(t)
    const store = redisStore({ client: clientOf(t, server), heartbeatIntervalMs: 0, replicas: 3 })
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
    const heavy = await app.tollgate.consume({ layer: 'edge', ip: '10.0.0.9' }, 20)
    t.ok(heavy.allowed, 'a cost above the share but within the quota overdraws a full share')
    t.equal(heavy.buckets[0]?.tokens, -10)
    store.liveReplicas = 2
    t.equal((await app.inject('/')).headers['ratelimit-policy'], '"edge";q=15;w=10', 'two replicas: half')
    await app.tollgate.reset({ layer: 'edge', ip: '127.0.0.1' })
    t.equal((await app.inject('/')).headers.ratelimit, '"edge";r=14;t=1', 'reset: full again')
    t.same(await server.client(t).keys('tollgate:{ip*'), [], 'Redis holds no edge key')
  })

  t.test('settle: the timer settles and reserves; close gives back; peek, refund and reset reach Redis', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const app = Fastify()
    await app.register(tollgate, { store: redisStore({ client: clientOf(t, server), heartbeatIntervalMs: 0, replicas: 3 }), edge: { capacity: 30, refillPerSecond: 0.001, mode: 'settle', settleIntervalMs: 10 } })
    app.get('/', async () => 'ok')
    for (let i = 0; i < 3; i++) await app.inject('/')
    const key = 'tollgate:{ip:127.0.0.1}:edge'
    // The first settlement takes the 3 spent and reserves the rest of the first share (7): 20 left; the
    // next one, the view idle, tops its reservation up to the share (10): 17 left, and then nothing more.
    const deadline = Date.now() + 5000
    while (!/^17[.\d]* /.test(await inspector.get(key) ?? '') && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
    t.match(await inspector.get(key), /^17[.\d]* /, 'the timer settled: 3 spent, and this replica\'s share (10) reserved')
    const peeked = await app.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' })
    t.ok(Math.abs((peeked.buckets[0]?.tokens as number) - 17) < 0.1, 'peek reads Redis')
    await app.tollgate.refund({ layer: 'edge', ip: '127.0.0.1' }, 2)
    t.match(await inspector.get(key), /^19[.\d]* /, 'refund reaches Redis')
    t.equal((await app.inject('/')).headers.ratelimit, '"edge";r=26;t=4000', 'the headers: this replica\'s reservation (9 left) and the bucket as last settled (17)')
    await app.tollgate.reset({ layer: 'edge', ip: '127.0.0.1' })
    t.equal(await inspector.get(key), null, 'reset deletes the bucket')
    t.equal((await app.inject('/')).headers.ratelimit, '"edge";r=29;t=1000', 'and the view: a new one, full')
    await app.inject('/')
    const heavy = { layer: 'edge', ip: '10.0.0.9' } as const
    t.notOk((await app.tollgate.consume(heavy, 15)).allowed, 'a cost above this replica\'s share (10) waits for a reservation')
    // The timer settles too (every 10 ms): the cost asked for stays reserved until a request of it passes.
    let settlements = 0
    let allowed = false
    while (!allowed && settlements < 20) {
      await app.tollgate.settle()
      settlements++
      allowed = (await app.tollgate.consume(heavy, 15)).allowed
    }
    t.ok(allowed, `a settlement after the first reserves the cost asked for (${settlements} settlements)`)
    await app.close()
    t.match(await inspector.get(key), /^28[.\d]* /, 'close settled the last two and gave back what was reserved')
    t.match(await inspector.get('tollgate:{ip:10.0.0.9}:edge'), /^15[.\d]* /, 'and the heavy one: 15 spent')
  })

  t.test('settle: Redis killed and started again; what it did not take goes again', async (t) => {
    const server = await startRedis(t)
    const client = clientOf(t, server)
    const inspector = server.client(t)
    const clock = { now: 1_000_000 }
    const app = Fastify()
    await app.register(tollgate, { store: redisStore({ client, clock: () => clock.now, heartbeatIntervalMs: 0, replicas: 2, breakerThreshold: 1, probeIntervalMs: 1 }), edge: { capacity: 10, refillPerSecond: 2, mode: 'settle', settleIntervalMs: NEVER } })
    app.get('/', async () => 'ok')
    for (let i = 0; i < 2; i++) await app.inject('/')
    await app.tollgate.settle()
    t.match(await inspector.get('tollgate:{ip:127.0.0.1}:edge'), /^5 /, '2 spent, 3 reserved')
    await server.kill()
    t.equal((await app.inject('/')).statusCode, 200, 'Redis is gone: a reserved token')
    await app.tollgate.settle()
    // Away: what it holds (2 reserved), then its share of the refill (1/s), at most its share of the capacity (5).
    clock.now += 10_000
    const during = []
    for (let i = 0; i < 10; i++) during.push((await app.inject('/')).statusCode)
    t.same(during, [200, 200, 200, 200, 200, 200, 200, 429, 429, 429], 'while Redis is away: the 2 it held, then 5 earned at this replica\'s share of the refill')
    // The breaker is open now (one failure): this settlement is not sent at all.
    await app.tollgate.settle()
    await server.start()
    await ready(client)
    clock.now += 10
    await app.tollgate.settle()
    t.equal((await app.inject('/')).statusCode, 200, 'back on the shared quota')
    await app.close()
    // 10 − 5 spent unreserved while it was away − 1 since; the reservation taken since is given back at close.
    t.match(await inspector.get('tollgate:{ip:127.0.0.1}:edge'), /^4 /, 'the restarted Redis took the 5 spent unreserved while it was away, once')
  })

  t.test('settle: views past maxViews are dropped; what they spent and reserved is still settled', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const clock = { now: 1_000_000 }
    const store = redisStore({ client: clientOf(t, server), clock: () => clock.now, heartbeatIntervalMs: 0, breakerThreshold: 1, probeIntervalMs: 1000 })
    t.teardown(async () => store.close())
    await store.ready()
    const edge = new SettlingEdge({ store, replicas: () => 2, intervalMs: NEVER, clock: () => clock.now, maxViews: 2 })
    const policy = { capacity: 10, refillPerSecond: 0 }
    const take = (key: string): boolean => edge.consume([{ key, policy, cost: 1 }]).allowed
    const levels = async (): Promise<Array<string | undefined>> => Promise.all(['a', 'b', 'c', 'd'].map(async (k) => (await inspector.get(`tollgate:{${k}}:edge`))?.split(' ')[0]))
    t.ok(take('{a}:edge') && take('{b}:edge') && take('{c}:edge'), 'three keys, two views: a dropped')
    await edge.settleNow()
    t.same(await levels(), ['9', '5', '5', undefined], 'a: its spend; b, c: a spend and 4 reserved (what is left of their first share, 5)')
    t.ok(take('{d}:edge'), 'b dropped: its 4 reserved go back')
    t.ok(take('{b}:edge'), 'c dropped; b is a new view')
    // Redis paused past a consume's timeout: the breaker opens (threshold 1), and the next settlement is not sent.
    server.pause()
    await store.consume([{ key: '{x}:app', policy, cost: 1 }])
    server.resume()
    await edge.settleNow()
    t.same(await levels(), ['9', '5', '5', undefined], 'nothing settled while the breaker is open')
    clock.now += 1000
    await edge.settleNow()
    await edge.close()
    t.same(await levels(), ['9', '8', '9', '9'], 'every spend once (b two), every reservation back')
  })

  t.test('settle: views dropped and taken again; their spends merged, each key settled once per call', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const store = redisStore({ client: clientOf(t, server), heartbeatIntervalMs: 0 })
    t.teardown(async () => store.close())
    await store.ready()
    const edge = new SettlingEdge({ store, replicas: () => 10, intervalMs: NEVER, clock: () => 0, maxViews: 1 })
    const policy = { capacity: 10, refillPerSecond: 0 }
    const allowed = ['{a}:edge', '{b}:edge', '{a}:edge', '{b}:edge'].map((key) => edge.consume([{ key, policy, cost: 1 }]).allowed)
    t.same(allowed, [true, true, false, false], 'a key whose dropped view has spends to settle starts with no share')
    await edge.settleNow()
    t.match(await inspector.get('tollgate:{a}:edge'), /^9 /, 'a: its spend, settled once')
    t.match(await inspector.get('tollgate:{b}:edge'), /^9 /, 'b: its spend; its new view spent nothing')
    edge.consume([{ key: '{c}:edge', policy, cost: 1 }])
    await edge.settleNow()
    t.match(await inspector.get('tollgate:{b}:edge'), /^9 /, 'a view dropped with nothing unsettled sends nothing')
    t.match(await inspector.get('tollgate:{c}:edge'), /^9 /)
    await edge.close()
  })

  t.test('settle on a Redis Cluster: one call per node and maxBatch', async (t) => {
    const cluster = await startCluster(t)
    const client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })), { enableOfflineQueue: true })
    t.teardown(() => { client.disconnect() })
    const app = Fastify()
    await app.register(tollgate, {
      store: redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: 2000, maxBatch: 2 }),
      edge: { capacity: 10, refillPerSecond: 0, mode: 'settle', settleIntervalMs: NEVER, key: (request) => request.headers['x-api-key'] }
    })
    app.get('/', async () => 'ok')
    await app.ready()
    const keys = Array.from({ length: 12 }, (_, i) => `key-${i}`)
    for (const key of keys) await app.inject({ url: '/', headers: { 'x-api-key': key } })
    await app.tollgate.settle()
    await app.close()
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

  t.test('settle: a settlement unanswered past its deadline is taken as applied; waiting spends are bounded', async (t) => {
    const server = await startRedis(t)
    const inspector = server.client(t)
    const store = redisStore({ client: clientOf(t, server), heartbeatIntervalMs: 0 })
    t.teardown(async () => store.close())
    await store.ready()
    const warnings: string[] = []
    const log = (object: object, message: string): void => { warnings.push(`${message} ${JSON.stringify(object)}`) }
    const edge = new SettlingEdge({ store, replicas: () => 1, intervalMs: NEVER, clock: () => 0, maxViews: 1, answerDeadlineMs: 50 })
    edge.useLogger({ info: log, warn: log, error: log })
    const policy = { capacity: 10, refillPerSecond: 0 }
    for (const key of ['{a}:edge', '{b}:edge', '{c}:edge', '{d}:edge']) edge.consume([{ key, policy, cost: 1 }])
    t.ok(warnings.some((line) => line.includes('too many edge settlements waiting') && line.includes('{c}:edge')), 'a third dropped view\'s spend is dropped, and logged')
    server.pause()
    const started = Date.now()
    await edge.settleNow()
    t.ok(Date.now() - started < 5000, 'the settlement is given up on after its deadline')
    t.ok(warnings.some((line) => line.includes('within its deadline')), 'and logged')
    const away = edge.consume([{ key: '{d}:edge', policy, cost: 1 }])
    t.same([away.allowed, away.degraded], [false, 'local'], 'away, but no fresh share: what d\'s first share had left went into the settlement given up on')
    server.resume()
    await edge.settleNow()
    const other = new SettlingEdge({ store, replicas: () => 1, intervalMs: 20, clock: () => 0, maxViews: 1 })
    other.useLogger({ info: log, warn: log, error: log })
    for (const key of ['{x}:edge', '{y}:edge']) other.consume([{ key, policy, cost: 1 }])
    server.pause()
    void other.settleNow() // x's and y's spends, on their way
    for (const key of ['{z}:edge', '{w}:edge']) other.consume([{ key, policy, cost: 1 }])
    await other.close()
    server.resume()
    t.ok(warnings.some((line) => line.includes('closing with edge tokens') && line.includes('"tokens":4')), 'close, Redis paused: what it could not settle is logged')
    await edge.close()
    const levels = await Promise.all(['a', 'b', 'c', 'd'].map(async (k) => (await inspector.get(`tollgate:{${k}}:edge`))?.split(' ')[0]))
    // d: the late settlement took its spend and reserved 9 for a replica that had stopped waiting;
    // its answer gave them back at the next settlement.
    t.same(levels, ['9', '9', undefined, '9'], 'the late settlement applied once, its reservation given back')
  })

  t.test('settle: a settlement given up on, answered later as not taken, goes again', async (t) => {
    const server = await startRedis(t)
    const clock = { now: 0 }
    const redis = redisStore({ client: clientOf(t, server), heartbeatIntervalMs: 0, clock: () => clock.now })
    t.teardown(async () => redis.close())
    await redis.ready()
    // A store of one's own (the Store contract): its first settlement answers after 200 ms that it took nothing.
    let calls = 0
    const slow: Store & Required<Pick<Store, 'settle'>> = {
      consume: redis.consume.bind(redis),
      close: () => {},
      settle: async (debits) => {
        if (calls++ > 0) return redis.settle(debits)
        await new Promise((resolve) => setTimeout(resolve, 200))
        return debits.map(() => ({ tokens: NaN, reserved: 0 }))
      }
    }
    const edge = new SettlingEdge({ store: slow, replicas: () => 1, intervalMs: NEVER, clock: () => clock.now, answerDeadlineMs: 20, maxViews: 2 })
    const policy = { capacity: 10, refillPerSecond: 0 }
    t.ok(edge.consume([{ key: '{e}:edge', policy, cost: 2 }]).allowed)
    await edge.settleNow() // given up on after 20 ms
    // Away now: a new view spends its first share; views dropped for room leave their spends to settle,
    // merged by key; a key that comes back with spends to settle starts with no share, and spends only
    // what its new view earns away (R/N = 1/s here).
    const earning = { capacity: 10, refillPerSecond: 1 }
    const take = (keys: string[]): boolean[] => keys.map((key) => edge.consume([{ key: `{${key}}:edge`, policy: earning, cost: 1 }]).allowed)
    clock.now = 1000
    t.same(take(['a', 'b', 'c', 'a']), [true, true, true, false], 'first shares; a again: a new view, nothing earned yet')
    clock.now = 2000
    t.same(take(['a', 'b', 'c']), [true, false, false], 'a\'s new view earned 1 token in 1 s; b and c are new views again')
    await new Promise((resolve) => setTimeout(resolve, 300)) // the first settlement's answer: not taken
    await edge.settleNow()
    await edge.close()
    const inspector = server.client(t)
    const levels = await Promise.all(['a', 'b', 'c', 'e'].map(async (k) => (await inspector.get(`tollgate:{${k}}:edge`))?.split(' ')[0]))
    t.same(levels, ['8', '9', '9', '8'], 'every spend taken once (a\'s two merged)')
  })

  t.test('settle on a custom store without peek or a clock of its own', async (t) => {
    const server = await startRedis(t)
    const redis = redisStore({ client: clientOf(t, server), heartbeatIntervalMs: 0 })
    const custom = { consume: redis.consume.bind(redis), close: redis.close.bind(redis), settle: redis.settle.bind(redis), liveReplicas: 1 }
    const app = Fastify()
    t.teardown(async () => app.close())
    await app.register(tollgate, { store: custom, edge: { capacity: 5, refillPerSecond: 1, mode: 'settle' } })
    app.get('/', async () => 'ok')
    t.equal((await app.inject('/')).statusCode, 200)
    await t.rejects(app.tollgate.peek({ layer: 'edge', ip: '127.0.0.1' }), { code: 'TOLLGATE_STORE_UNSUPPORTED' })
  })
}
