import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { Cluster, Redis } from 'ioredis'
import tollgate, { memoryStore, redisStore, type RedisStore, type Store } from '../../../lib/index.js'
import { clusterSlot } from '../../../lib/stores/redis/cluster-slot.js'
import { commandCalls, redisAvailable, requireRedis, startCluster, startRedis, type RedisServer } from '../../redis-server.js'

/** Three replicas of one API, each with its own store. */
async function replicas (t: Test, makeStore: () => Store, edge = { capacity: 30, refillPerSecond: 2 }): Promise<FastifyInstance[]> {
  const apps: FastifyInstance[] = []
  for (let i = 0; i < 3; i++) {
    const app = Fastify()
    await app.register(tollgate, { store: makeStore(), edge })
    app.get('/', async () => 'ok')
    await app.ready()
    apps.push(app)
  }
  t.teardown(async () => { for (const app of apps) await app.close() })
  return apps
}

/** Sends `count` requests from one client, round-robin over the replicas, all at once. */
async function spray (apps: FastifyInstance[], count: number): Promise<{ admitted: number, elapsedS: number, statuses: number[] }> {
  const started = performance.now()
  const responses = await Promise.all(Array.from({ length: count }, async (_, i) => (apps[i % apps.length] as FastifyInstance).inject('/')))
  const elapsedS = (performance.now() - started) / 1000
  const statuses = responses.map((response) => response.statusCode)
  return { admitted: statuses.filter((status) => status === 200).length, elapsedS, statuses }
}

t.test('three replicas with memory stores admit three quotas', async (t) => {
  const apps = await replicas(t, () => memoryStore())
  const { admitted, elapsedS } = await spray(apps, 300)
  t.ok(admitted >= 90 && admitted <= 90 + 3 * Math.ceil(2 * elapsedS), `admitted ${admitted} of 300 (≈ 3 × 30) in ${elapsedS.toFixed(2)} s`)
})

if (requireRedis(t)) {
  t.test('three replicas on one Redis admit one quota: B + R·t', async (t) => {
    const server = await startRedis(t)
    const clients: Redis[] = []
    const stores: RedisStore[] = []
    t.teardown(() => { for (const client of clients) client.disconnect() })
    const apps = await replicas(t, () => {
      const client = new Redis({ port: server.port, enableOfflineQueue: false })
      clients.push(client)
      // A generous timeout: this test is about one shared quota, not about a slow Redis on a busy CI machine.
      const store = redisStore({ client, heartbeatIntervalMs: 100, timeoutMs: 1000 })
      stores.push(store)
      return store
    })
    // No waiting for the clients here: app.ready() waits for them (without the offline queue, commands fail until connected).
    t.equal(stores[2]?.liveReplicas, 3, 'after ready(), the last replica started has counted all three')
    const { admitted, elapsedS, statuses } = await spray(apps, 300)
    t.ok(admitted >= 30 && admitted <= 30 + Math.ceil(2 * elapsedS), `admitted ${admitted} of 300 (B = 30, R = 2/s, ${elapsedS.toFixed(2)} s)`)
    t.same(statuses.filter((status) => status !== 200 && status !== 429), [], 'only 200 and 429')
    const inspector = server.client(t)
    const deadline = performance.now() + 3000
    while (await inspector.zcard('tollgate:{replicas}') < 3 && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
    const keys = await inspector.keys('*')
    t.same(keys.sort(), ['tollgate:{ip:127.0.0.1}:edge', 'tollgate:{replicas}'])
    for (const key of keys) {
      t.match(key, /\{[^{}]+\}/, `${key} has a hash tag`)
      t.ok(await inspector.pttl(key) > 0, `${key} has a TTL`)
    }
    t.equal(await inspector.zcard('tollgate:{replicas}'), 3, 'the heartbeat sees three replicas')
  })

  t.test('1 000 concurrent requests on one key, across replicas, admit exactly the capacity', async (t) => {
    const server = await startRedis(t)
    const clients: Redis[] = []
    t.teardown(() => { for (const client of clients) client.disconnect() })
    const apps = await replicas(t, () => {
      const client = new Redis({ port: server.port })
      clients.push(client)
      return redisStore({ client, timeoutMs: 2000 })
    }, { capacity: 100, refillPerSecond: 0 })
    const { admitted, statuses } = await spray(apps, 1000)
    t.equal(admitted, 100)
    t.equal(statuses.filter((status) => status === 429).length, 900)
  })

  t.test('Redis Cluster: one quota across replicas, keys spread over the nodes, one call per node', async (t) => {
    const cluster = await startCluster(t)
    const clients: Cluster[] = []
    t.teardown(() => { for (const client of clients) client.disconnect() })
    const connect = (): Cluster => {
      const client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })), { enableOfflineQueue: true })
      clients.push(client)
      return client
    }
    const apps = await replicas(t, () => redisStore({ client: connect(), timeoutMs: 2000 }), { capacity: 30, refillPerSecond: 2 })
    const { admitted, elapsedS } = await spray(apps, 300)
    t.ok(admitted >= 30 && admitted <= 30 + Math.ceil(2 * elapsedS), `admitted ${admitted} of 300 on the cluster (${elapsedS.toFixed(2)} s)`)

    // Many identities in one turn: one script call per node, keys on every node, each with a TTL.
    const client = connect()
    const store = redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: 2000 })
    const policy = { capacity: 5, refillPerSecond: 1 }
    await store.consume([{ key: '{warm}:x', policy, cost: 1 }])
    await Promise.all(cluster.nodes.map(async (node) => { const c = node.client(); await c.script('FLUSH'); c.disconnect() }))
    const inspectors = cluster.nodes.map((node) => node.client())
    t.teardown(() => { for (const inspector of inspectors) inspector.disconnect() })
    const before = await Promise.all(inspectors.map(commandCalls))
    const decisions = await Promise.all(Array.from({ length: 300 }, async (_, i) => store.consume([
      { key: `{user:${i}}:app`, policy, cost: 1 },
      { key: `{user:${i}}:route:GET /`, policy, cost: 1 }
    ])))
    t.equal(decisions.filter((decision) => decision.allowed).length, 300)
    const after = await Promise.all(inspectors.map(commandCalls))
    const calls = after.map((stats, i) => (stats.evalsha ?? 0) + (stats.eval ?? 0) - ((before[i]?.evalsha ?? 0) + (before[i]?.eval ?? 0)))
    t.same(calls.map((count) => count >= 1 && count <= 2), [true, true, true], `script calls per node: ${calls.join(', ')} (EVALSHA, plus EVAL once after SCRIPT FLUSH)`)
    for (const inspector of inspectors) {
      const keys = (await inspector.keys('tollgate:{user:*')).slice(0, 20)
      t.ok(keys.length > 0, 'this node holds some users')
      for (const key of keys) t.ok(await inspector.pttl(key) > 0, `${key} has a TTL`)
    }
    await store.close()
  })
}

if (redisAvailable) {
  t.test('clusterSlot agrees with CLUSTER KEYSLOT', async (t) => {
    const cluster = await startCluster(t)
    const inspector = (cluster.nodes[0] as RedisServer).client(t)
    for (const key of ['123456789', 'tollgate:{user:42}:app', '{user:42}', 'a{}b', '{}{x}', 'no-tag}', 'open{only', 'x{y}z{w}', 'ümlaut{é}', '']) {
      t.equal(clusterSlot(key), await inspector.cluster('KEYSLOT', key), JSON.stringify(key))
    }
    // A store used before the cluster client knows its slots still decides (grouped by slot meanwhile).
    const client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })))
    t.teardown(() => { client.disconnect() })
    const store = redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: 2000 })
    const decision = await store.consume([{ key: '{early}:k', policy: { capacity: 2, refillPerSecond: 1 }, cost: 1 }])
    t.match(decision, { allowed: true, tokens: [1] })
    t.equal(decision.degraded, undefined, 'decided by Redis')
    await store.close()
  })
}
