import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import { Redis, type RedisOptions } from 'ioredis'
import tollgate, { redisStore, type RedisStore, type RedisStoreOptions } from '../../../lib/index.js'
import { answerBound, requireRedis, sleep, withClient } from '../../redis-server.js'
import { eventLoopLag } from '../../helpers.js'
import { startSentinelGroup, type SentinelGroup } from '../../redis-sentinel.js'

// The load keys each request by a fresh `x-client` header (a fresh bucket, so every
// request asks Redis); the quota checks send none and share the IP's bucket.
const edge = { capacity: 10, refillPerSecond: 0.001, key: (request: FastifyRequest) => request.headers['x-client'] }
/** The shared bucket's policy (the local share's, 10 × 1.2 / 2 replicas, says q=6). */
const SHARED_POLICY = /^"edge";q=10(;|$)/
const IP_BUCKET = 'tollgate:{ip:127.0.0.1}:edge'
/**
 * The stores' `timeoutMs`: 250 ms, not the default 50. A failover closes the connections (answers fail at
 * once, whatever the timeout); on a busy machine a healthy reply can take over 50 ms, and the default would
 * turn the quota checks' answers into the local share's and keep the breaker from closing.
 */
const TIMEOUT_MS = 250

interface Replica { app: FastifyInstance, store: RedisStore }
/** The ioredis options a test sets on top of `{ sentinels, name, enableOfflineQueue: false, maxRetriesPerRequest: 0 }`. */
type ClientOptions = Pick<RedisOptions, 'retryStrategy' | 'failoverDetector'>

/** A Fastify app ("a replica") on the Redis store, through the group's sentinels. */
async function replicaOn (t: Test, group: SentinelGroup, clientOptions: ClientOptions = {}, storeOptions: Partial<RedisStoreOptions> = {}): Promise<Replica> {
  const client = new Redis({ sentinels: group.sentinels, name: group.name, enableOfflineQueue: false, maxRetriesPerRequest: 0, ...clientOptions })
  client.on('error', () => {})
  // As docs/redis.md recommends with failoverDetector: ioredis ends the client (status 'end', no
  // more reconnects) when it detects a failover while it is asking a sentinel; connect it again.
  let closing = false
  if (clientOptions.failoverDetector === true) client.on('end', () => { if (!closing) client.connect().catch(() => {}) })
  const app = Fastify()
  t.teardown(async () => { closing = true; await app.close(); client.disconnect() })
  app.addHook('onClose', async () => { closing = true; client.disconnect() })
  const store = redisStore({ timeoutMs: TIMEOUT_MS, ...storeOptions, client })
  await app.register(tollgate, { store, edge })
  app.get('/', async () => 'ok')
  await app.ready()
  // ready() waits connectWaitMs at most: a busy machine can take longer to ask a sentinel and connect.
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve))
  return { app, store }
}

/** 12 requests on the IP's bucket, alternating between the replicas. */
async function quotaStatuses (replicas: Replica[]): Promise<number[]> {
  const statuses: number[] = []
  for (let i = 0; i < 12; i++) statuses.push((await (replicas[i % replicas.length] as Replica).app.inject('/')).statusCode)
  return statuses
}

const ONE_QUOTA = [...Array<number>(10).fill(200), 429, 429]

/** An answer under load: `at`, when its request went (performance.now()); `shared`, decided by Redis (not the local share). */
interface Sample { replica: number, at: number, status: number, ms: number, shared: boolean }

/** Every replica sends a request with a fresh key every `everyMs` until `stop()`. */
function load (replicas: Replica[], everyMs = 10): { samples: Sample[], stop: () => Promise<void> } {
  const samples: Sample[] = []
  let running = true
  const loops = replicas.map(async ({ app }, replica) => {
    for (let n = 0; running; n++) {
      const started = performance.now()
      const response = await app.inject({ url: '/', headers: { 'x-client': `load-${replica}-${n}` } })
      const ms = performance.now() - started
      samples.push({ replica, at: started, status: response.statusCode, ms, shared: SHARED_POLICY.test(String(response.headers['ratelimit-policy'])) })
      await sleep(Math.max(0, everyMs - ms))
    }
  })
  return { samples, stop: async () => { running = false; await Promise.all(loops) } }
}

/**
 * Polls until a request at every replica, from a fresh client address, writes its
 * bucket on the server on `port`; resolves with when (performance.now()), or Infinity after `timeoutMs`.
 */
async function writesOn (replicas: Replica[], port: number, timeoutMs: number): Promise<number> {
  const deadline = performance.now() + timeoutMs
  const done = replicas.map(() => false)
  for (let n = 1; performance.now() < deadline; n++) {
    await Promise.all(replicas.map(async ({ app }, i) => {
      if (done[i] === true) return
      const address = `127.${i + 1}.${(n >> 8) & 255}.${n & 255}`
      await app.inject({ url: '/', remoteAddress: address })
      done[i] = await withClient(port, (client) => client.exists(`tollgate:{ip:${address}}:edge`)) === 1
    }))
    if (done.every(Boolean)) return performance.now()
    await sleep(20)
  }
  return Infinity
}

/** How the primary goes: `kill -9`, or a switchover the sentinels are asked for (SENTINEL FAILOVER), the old primary left running. */
type Loss = 'kill' | 'switchover'

async function lose (group: SentinelGroup, loss: Loss): Promise<void> {
  if (loss === 'kill') return group.killPrimary()
  const [sentinel] = group.sentinels
  if (sentinel === undefined) throw new Error('no sentinel')
  await withClient(sentinel.port, (client) => client.call('SENTINEL', 'FAILOVER', group.name))
}

interface Failover { oldPort: number, newPort: number, promotedMs: number, writesMs: number, samples: Sample[], lagMs: number }

/** Loses the primary under load from both replicas; times the promotion and the first writes of every replica on the new primary. */
async function failoverUnderLoad (group: SentinelGroup, replicas: Replica[], loss: Loss): Promise<Failover> {
  const oldPort = await group.primaryPort()
  const traffic = load(replicas)
  const lag = eventLoopLag()
  try {
    await sleep(300)
    const lostAt = performance.now()
    await lose(group, loss)
    const newPort = await group.waitForFailover(15_000)
    const promotedMs = performance.now() - lostAt
    const writesMs = await writesOn(replicas, newPort, 15_000) - lostAt
    await sleep(200)
    await traffic.stop()
    const samples = traffic.samples.map((sample) => ({ ...sample, at: sample.at - lostAt }))
    return { oldPort, newPort, promotedMs, writesMs, samples, lagMs: lag.stop() }
  } finally {
    lag.stop()
    await traffic.stop()
  }
}

/** Checks the answers through the failover, and one quota again on the new primary; returns how long the writes took to reach it. */
async function checkFailover (t: Test, replicas: Replica[], failover: Failover, loss: Loss): Promise<number> {
  const { oldPort, newPort, promotedMs, writesMs, samples, lagMs } = failover
  const slowest = Math.max(...samples.map((sample) => sample.ms))
  // Answered before the loss: on a busy machine a request sent just before it can be answered after it, locally.
  const before = samples.filter((sample) => sample.at + sample.ms < 0)
  const local = samples.filter((sample) => sample.at > 0 && !sample.shared)
  t.comment(`${loss}: sentinels promoted ${newPort} (was ${oldPort}) after ${promotedMs.toFixed(0)} ms; both replicas write to it after ${writesMs.toFixed(0)} ms; ${samples.length} answers, ${local.length} from the local share, slowest ${slowest.toFixed(1)} ms; the stores ${replicas.map(({ store }) => store.state).join(', ')}`)
  t.ok(before.length >= 20 && before.every((sample) => sample.shared), `before: ${before.length} answers, all from Redis`)
  if (loss === 'kill') t.ok(local.length > 0, 'after the kill: answers from the local share (the outage was seen)')
  t.same(samples.filter((sample) => sample.status !== 200 && sample.status !== 429), [], 'no answer other than 200 or 429 (no 500s)')
  const bound = answerBound(TIMEOUT_MS, lagMs)
  t.ok(slowest < bound, `every answer within ${bound.toFixed(0)} ms, the timeout's bound with the loop ${lagMs.toFixed(0)} ms late (slowest ${slowest.toFixed(1)} ms)`)
  t.ok(writesMs < 15_000, 'every replica writes to the new primary')
  t.not(newPort, oldPort, 'another server is the primary')
  t.same(await quotaStatuses(replicas), ONE_QUOTA, 'a fresh bucket: 10 admitted across both replicas, then 429')
  t.equal(await withClient(newPort, (client) => client.exists(IP_BUCKET)), 1, 'its key lives on the new primary')
  return writesMs - promotedMs
}

/** What a user should set for Sentinel: reconnect often (each attempt asks a sentinel), drop the connection on +switch-master, probe often. */
const RECOMMENDED: [ClientOptions, Partial<RedisStoreOptions>] = [{ retryStrategy: (times) => Math.min(times * 50, 250), failoverDetector: true }, { probeIntervalMs: 250 }]

if (requireRedis(t)) {
  t.test('two replicas through Sentinel share one quota: 10 admitted, then 429', async (t) => {
    const group = await startSentinelGroup({ t })
    const replicas = [await replicaOn(t, group), await replicaOn(t, group)]
    t.same(await quotaStatuses(replicas), ONE_QUOTA)
    t.equal(await withClient(await group.primaryPort(), (client) => client.exists(IP_BUCKET)), 1, 'the bucket lives on the primary')
  })

  t.test('the primary killed under load, ioredis reconnection defaults: 200s and 429s only, bounded latency, one quota again on the new primary', async (t) => {
    const group = await startSentinelGroup({ t })
    const replicas = [await replicaOn(t, group), await replicaOn(t, group)]
    await checkFailover(t, replicas, await failoverUnderLoad(group, replicas, 'kill'), 'kill')
  })

  t.test('the primary killed under load, recommended options: the replicas follow the promotion within 2 s', async (t) => {
    const group = await startSentinelGroup({ t })
    const replicas = [await replicaOn(t, group, ...RECOMMENDED), await replicaOn(t, group, ...RECOMMENDED)]
    const afterPromotion = await checkFailover(t, replicas, await failoverUnderLoad(group, replicas, 'kill'), 'kill')
    t.ok(afterPromotion < 2000, `writes reach the new primary ${afterPromotion.toFixed(0)} ms after the sentinels agree on it`)
  })

  t.test('a switchover (SENTINEL FAILOVER, the old primary still up), recommended options: the replicas leave the old primary within 2 s', async (t) => {
    const group = await startSentinelGroup({ t })
    const replicas = [await replicaOn(t, group, ...RECOMMENDED), await replicaOn(t, group, ...RECOMMENDED)]
    const afterPromotion = await checkFailover(t, replicas, await failoverUnderLoad(group, replicas, 'switchover'), 'switchover')
    t.ok(afterPromotion < 2000, `writes reach the new primary ${afterPromotion.toFixed(0)} ms after the sentinels agree on it (without failoverDetector: about 10 s, until the sentinels demote the old one)`)
  })
}
