/**
 * The `'local'` fallback across an outage (lib/stores/redis/fallback.ts): a share
 * starts from the level Redis last reported, and what it admits is charged back
 * to the shared bucket once Redis answers (down to zero at most). Real
 * redis-server, frozen (SIGSTOP).
 */
import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Cluster, Redis } from 'ioredis'
import tollgate, { redisStore, type RedisStore } from '../../../lib/index.js'
import { requireRedis, startCluster, startRedis, type RedisServer } from '../../redis-server.js'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
/** A quota that never refills: every count below is exact. */
const EDGE = { capacity: 30, refillPerSecond: 0 }

async function replica (t: Test, server: RedisServer): Promise<{ app: FastifyInstance, store: RedisStore }> {
  const client = new Redis({ port: server.port, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 })
  client.on('error', () => {})
  const store = redisStore({ client, timeoutMs: 50, probeIntervalMs: 100, heartbeatIntervalMs: 100 })
  const app = Fastify()
  await app.register(tollgate, { store, edge: EDGE })
  app.get('/', async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close(); client.disconnect() })
  return { app, store }
}

/** Sends `count` requests one after another; the number admitted. */
async function admitted (app: FastifyInstance, count: number): Promise<number> {
  let ok = 0
  for (let i = 0; i < count; i++) if ((await app.inject('/')).statusCode === 200) ok++
  return ok
}

/** Sends requests until one was decided by Redis again (the breaker closed and a call answered). */
async function untilRedisAnswers (app: FastifyInstance, store: RedisStore): Promise<number> {
  let ok = 0
  const deadline = performance.now() + 5000
  while (store.state !== 'closed' && performance.now() < deadline) {
    if ((await app.inject('/')).statusCode === 200) ok++
    await sleep(20)
  }
  return ok
}

if (requireRedis(t)) {
  t.test('a share starts from the level Redis last reported, not from a full share', async (t) => {
    const server = await startRedis(t)
    const { app } = await replica(t, server)
    t.equal(await admitted(app, 28), 28, 'on Redis: 28 of 30 taken')
    server.pause()
    t.teardown(() => { server.resume() })
    // One live replica: its share is 30 × 1.2 capped at 30, and it starts at 2, where Redis left the bucket.
    t.equal(await admitted(app, 10), 2, 'Redis frozen: the local share admits the 2 tokens left, not a fresh 30')
  })

  t.test('what a replica admits on its share is charged to the shared bucket once Redis answers', async (t) => {
    const server = await startRedis(t)
    const { app, store } = await replica(t, server)
    t.equal(await admitted(app, 10), 10, 'on Redis: 10 of 30')
    server.pause()
    t.equal(await admitted(app, 30), 20, 'Redis frozen: the 20 left, from the local share')
    server.resume()
    const during = await untilRedisAnswers(app, store)
    await sleep(100) // the charge-back goes with Redis's first answer
    const after = await admitted(app, 10)
    // The debit goes ahead of the request that finds Redis back. The calls the freeze held
    // are applied when Redis thaws, too: they make it fewer, never more.
    t.equal(during + after, 0, 'nothing more: one quota across the outage')
    const inspector = server.client(t)
    const [tokens] = String(await inspector.get('tollgate:{ip:127.0.0.1}:edge')).split(' ')
    t.equal(Number(tokens), 0, 'the shared bucket is empty: the 20 were debited (down to zero, not into debt)')
  })

  t.test('a decision made without Redis and its return are logged, even when the breaker never opened', async (t) => {
    const server = await startRedis(t)
    const client = new Redis({ port: server.port, enableOfflineQueue: false, maxRetriesPerRequest: 0 })
    client.on('error', () => {})
    const lines: string[] = []
    const logger = { info: (_details: object, message: string) => { lines.push(`info ${message}`) }, warn: (_details: object, message: string) => { lines.push(`warn ${message}`) }, error: () => {} }
    const store = redisStore({ client, timeoutMs: 50, breakerThreshold: 5, heartbeatIntervalMs: 0 })
    store.useLogger(logger)
    t.teardown(async () => { await store.close(); client.disconnect() })
    await store.ready()
    const bucket = { key: 'k', policy: EDGE, cost: 1 }
    await store.consume([bucket])
    server.pause()
    t.equal((await store.consume([bucket])).degraded, 'local', 'one call timed out: decided locally')
    server.resume()
    t.equal((await store.consume([bucket])).degraded, undefined, 'the next is decided by Redis')
    t.equal(store.state, 'closed', 'the breaker never opened')
    t.same(lines.map((line) => line.split(';')[0]), ['warn fastify-tollgate: Redis unavailable', 'info fastify-tollgate: Redis answers again'])
  })

  t.test('Cluster, one node frozen: the answers of the other nodes do not restart its keys\' shares', async (t) => {
    const cluster = await startCluster(t)
    const client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })))
    client.on('error', () => {})
    const store = redisStore({ client, timeoutMs: 50, heartbeatIntervalMs: 0 })
    t.teardown(async () => { await store.close(); client.disconnect() })
    await store.ready()
    const bucket = (key: string) => ({ key, policy: EDGE, cost: 1 })
    for (let i = 0; i < 28; i++) await store.consume([bucket('{a}:edge')])
    const frozen = await (async () => {
      for (const node of cluster.nodes) {
        const inspector = node.client()
        const held = await inspector.exists('tollgate:{a}:edge').catch(() => 0) // MOVED: another node's slot
        inspector.disconnect()
        if (held === 1) return node
      }
      throw new Error('no node holds the key')
    })()
    frozen.pause()
    t.teardown(() => { frozen.resume() })
    let admitted = 0
    let others = 0
    for (let i = 0; i < 30; i++) {
      // The other identities land on every node: the live nodes keep answering.
      const [mine, ...theirs] = await Promise.all([store.consume([bucket('{a}:edge')]), ...Array.from({ length: 6 }, async (_, j) => store.consume([bucket(`{b${i * 6 + j}}:edge`)]))])
      if (mine?.allowed === true) admitted++
      others += theirs.filter((decision) => decision.degraded === undefined).length
    }
    t.ok(others > 0, `the live nodes answered (${others} decisions)`)
    t.equal(admitted, 2, 'the frozen node\'s key admits the 2 tokens left, once, not a share at every answer from elsewhere')
  })

  t.test('what is owed is charged after a heartbeat that answers, without another request, and its level kept', async (t) => {
    const server = await startRedis(t)
    const client = new Redis({ port: server.port, enableOfflineQueue: false, maxRetriesPerRequest: 0 })
    client.on('error', () => {})
    const store = redisStore({ client, timeoutMs: 50, heartbeatIntervalMs: 100 })
    t.teardown(async () => { await store.close(); client.disconnect() })
    await store.ready()
    const bucket = { key: 'k', policy: EDGE, cost: 1 }
    for (let i = 0; i < 10; i++) await store.consume([bucket])
    server.pause()
    let local = 0
    for (let i = 0; i < 5; i++) if ((await store.consume([bucket])).allowed) local++
    server.resume()
    const inspector = server.client(t)
    const deadline = performance.now() + 3000
    let tokens = NaN
    while (performance.now() < deadline) {
      tokens = Number(String(await inspector.get('tollgate:k')).split(' ')[0])
      if (tokens <= 20 - local - 3) break
      await sleep(20)
    }
    // 20 left; the 3 calls the freeze held are applied on thaw, and the local admissions charged.
    t.ok(tokens <= 20 - local - 3, `the shared bucket holds ${tokens}: the ${local} admitted locally were charged with no request sent`)
  })

  t.test('app.close() charges what is owed before it returns', async (t) => {
    const server = await startRedis(t)
    const { app } = await replica(t, server)
    t.equal(await admitted(app, 10), 10)
    server.pause()
    t.equal(await admitted(app, 10), 10, 'admitted on the local share')
    server.resume()
    await app.close()
    const [tokens] = String(await server.client(t).get('tollgate:{ip:127.0.0.1}:edge')).split(' ')
    t.ok(Number(tokens) <= 20 - 10, `the shared bucket holds ${tokens}: the 10 were charged at close`)
  })

  t.test('three replicas through a freeze admit the quota once, plus the headroom of what was left', async (t) => {
    const server = await startRedis(t)
    const replicas = [await replica(t, server), await replica(t, server), await replica(t, server)]
    const deadline = performance.now() + 3000
    while (replicas.some(({ store }) => store.liveReplicas !== 3) && performance.now() < deadline) await sleep(20)
    let before = 0
    // Round robin, as a balancer spreads a client: each replica's last view of the level is recent.
    for (let i = 0; i < 15; i++) before += await admitted((replicas[i % 3] as { app: FastifyInstance }).app, 1)
    t.equal(before, 15, 'on Redis: 15 of 30, 15 left')
    server.pause()
    let during = 0
    for (const { app } of replicas) during += await admitted(app, 20)
    // Each starts at its part of the level it last saw (17, 16 and 15): 0.4 × that, 6.8, 6.4 and 6.
    t.equal(during, 18, 'frozen: each replica admits 6, about (1 + headroom) × the 15 left, not 3 fresh shares of 12')
    server.resume()
    for (const { app, store } of replicas) during += await untilRedisAnswers(app, store)
    await sleep(100)
    let after = 0
    for (const { app } of replicas) after += await admitted(app, 5)
    const total = before + during + after
    // B + R·t + h·(B + R·d) with R = 0. A replica's probe may be decided before the
    // others' held calls and debits reach Redis: it passes on tokens they spent.
    t.ok(total <= 36, `in all ${total}: at most B + headroom × B = 36`)
    const [tokens] = String(await server.client(t).get('tollgate:{ip:127.0.0.1}:edge')).split(' ')
    t.equal(Number(tokens), 0, 'every admission was charged to the shared bucket: it is empty')
  })
}
