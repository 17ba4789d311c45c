/**
 * The live-replica count (lib/stores/redis/heartbeat.ts) against a real
 * redis-server: it survives Redis losing its data, and a replica that dies
 * stays counted for a bounded time.
 */
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { redisStore, type RedisStore } from '../../../lib/index.js'
import { requireRedis, startRedis, type RedisServer } from '../../redis-server.js'
import { TcpProxy } from '../../faults/proxy.js'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
const INTERVAL_MS = 100

async function replica (t: Test, server: RedisServer, offlineQueue = false): Promise<{ store: RedisStore, client: Redis }> {
  const client = new Redis({ port: server.port, enableOfflineQueue: offlineQueue, maxRetriesPerRequest: offlineQueue ? null : 0, retryStrategy: () => 20 })
  client.on('error', () => {})
  const store = redisStore({ client, heartbeatIntervalMs: INTERVAL_MS, timeoutMs: 200 })
  await store.ready()
  t.teardown(async () => { await store.close(); client.disconnect() })
  return { store, client }
}

async function threeReplicas (t: Test, server: RedisServer, offlineQueue = false): Promise<RedisStore[]> {
  const stores = [(await replica(t, server, offlineQueue)).store, (await replica(t, server, offlineQueue)).store, (await replica(t, server, offlineQueue)).store]
  const deadline = performance.now() + 3000
  while (stores.some((store) => store.liveReplicas !== 3) && performance.now() < deadline) await sleep(10)
  return stores
}

/** Every store's count every 5 ms for `ms`; the smallest seen. */
async function lowestCount (stores: RedisStore[], ms: number): Promise<number> {
  let lowest = Infinity
  for (const end = performance.now() + ms; performance.now() < end;) {
    for (const store of stores) lowest = Math.min(lowest, store.liveReplicas)
    await sleep(5)
  }
  return lowest
}

if (requireRedis(t)) {
  t.test('Redis restarted empty: no replica counts fewer than the live ones', async (t) => {
    const server = await startRedis(t)
    const stores = await threeReplicas(t, server)
    t.same(stores.map((store) => store.liveReplicas), [3, 3, 3])
    await server.kill()
    await server.start() // the same port, no data
    // The first replica to beat after the restart finds only itself in the set; it keeps 3.
    t.equal(await lowestCount(stores, 8 * INTERVAL_MS), 3, 'every count stayed at 3 for 8 intervals after the restart')
  })

  t.test('Redis down 600 ms then restarted empty, clients with an offline queue: the held beats do not hide the loss', async (t) => {
    const server = await startRedis(t)
    const stores = await threeReplicas(t, server, true)
    t.same(stores.map((store) => store.liveReplicas), [3, 3, 3])
    await server.kill()
    await sleep(600) // beats time out meanwhile and wait in the clients' queues; they reach the new Redis first
    await server.start()
    t.equal(await lowestCount(stores, 8 * INTERVAL_MS), 3, 'every count stayed at 3')
  })

  t.test('a replica that dies stays counted at most four intervals, then the count drops', async (t) => {
    const server = await startRedis(t)
    const stores = await threeReplicas(t, server)
    const dead = await replica(t, server)
    const deadline = performance.now() + 3000
    while (stores.some((store) => store.liveReplicas !== 4) && performance.now() < deadline) await sleep(10)
    // Dies without leaving: its connection goes, as when the process is killed.
    dead.client.disconnect()
    const died = performance.now()
    while (stores.some((store) => store.liveReplicas !== 3) && performance.now() < died + 3000) await sleep(5)
    const countedMs = performance.now() - died
    t.same(stores.map((store) => store.liveReplicas), [3, 3, 3], 'the others count three again')
    // Its last beat counts for 3 intervals; the others see it gone at their next beat; plus a beat's round trip.
    t.ok(countedMs <= 4 * INTERVAL_MS + 150, `counted ${countedMs.toFixed(0)} ms after it died (≤ 4 intervals)`)
  })

  t.test('a replica that closes leaves at once', async (t) => {
    const server = await startRedis(t)
    const stores = await threeReplicas(t, server)
    await (stores[2] as RedisStore).close()
    const closed = performance.now()
    while ((stores[0] as RedisStore).liveReplicas !== 2 && performance.now() < closed + 1000) await sleep(5)
    t.equal((stores[0] as RedisStore).liveReplicas, 2)
    t.ok(performance.now() - closed <= INTERVAL_MS + 150, 'counted gone at the next beat (plus a beat\'s round trip)')
  })

  t.test('a beat whose reply is no list (a corrupting middlebox) keeps the last count, and the process', async (t) => {
    const server = await startRedis(t)
    const proxy = new TcpProxy(server.port)
    const port = await proxy.listen()
    t.teardown(async () => { await proxy.close() })
    const direct = await replica(t, server)
    const client = new Redis({ port, maxRetriesPerRequest: 0 })
    const proxied = redisStore({ client, heartbeatIntervalMs: INTERVAL_MS, timeoutMs: 200 })
    await proxied.ready()
    t.teardown(async () => { await proxied.close(); client.disconnect() })
    const deadline = performance.now() + 3000
    while ((proxied.liveReplicas !== 2 || direct.store.liveReplicas !== 2) && performance.now() < deadline) await sleep(10)
    t.equal(proxied.liveReplicas, 2)
    // The beat's reply, two strings (the count, and '1' when this replica's beat was new), comes back as a null list.
    const beat = /^\*2\r\n\$\d+\r\n\d+\r\n\$1\r\n[01]\r\n$/
    let rewritten = 0
    proxy.rewrite = (chunk) => { if (!beat.test(chunk.toString('latin1'))) return chunk; rewritten++; return Buffer.from('*-1\r\n', 'latin1') }
    t.equal(await lowestCount([proxied], 5 * INTERVAL_MS), 2, 'the count stays at the last one read')
    t.ok(rewritten >= 3, `${rewritten} beats answered with a null list, none threw out of the store`)
    proxy.rewrite = undefined
    await sleep(2 * INTERVAL_MS)
    t.equal(proxied.liveReplicas, 2, 'and beats are read again')
  })
}
