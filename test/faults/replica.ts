/**
 * A replica process of the fault suite: `node build/test/faults/replica.js '<json>'`
 * (or the JSON in FAULTS_REPLICA), a `ReplicaConfig` (config.ts).
 *
 * A Fastify app on 127.0.0.1 (a port the OS picks) with the plugin on a Redis
 * store, its edge `{ capacity, refillPerSecond, mode }`; `GET /` answers 200.
 * Prints `{"type":"listening","port":N}` once listening, and one line per message
 * on the store channel (`degraded`, `restored`, `replicas`, `closed`), so the
 * harness times them on its own clock. `GET /__faults` (exempt from the limit)
 * answers the counts of those events, the live replicas as last counted and
 * this process's `performance.now()`.
 * Closes the app on SIGTERM; exits when its stdin closes (the harness died).
 *
 * Clock skew (`config.skew`): before the plugin is loaded, `performance.now()`
 * and `Date.now()` are replaced by clocks `offsetMs` ahead running `rate` times
 * as fast. That skews what the store reads locally (its `localClock`: the deny
 * cache, the circuit breaker's probe times, the local fallback buckets, the
 * 'replica-share' and 'settle' edges' local buckets) and the outage log's
 * throttle. It does not skew Node's timers (setTimeout, setInterval) nor Redis's
 * TIME, which the shared buckets are decided by.
 */
import { subscribe } from 'node:diagnostics_channel'
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import type { StoreMessage } from '../../lib/index.js'
import type { ReplicaConfig, ReplicaLine } from './config.js'

const config = JSON.parse(process.argv[2] ?? process.env.FAULTS_REPLICA ?? '{}') as ReplicaConfig

function skewClocks ({ offsetMs, rate }: { offsetMs: number, rate: number }): void {
  const realNow = performance.now.bind(performance)
  const realDateNow = Date.now.bind(Date)
  const start = realNow()
  const dateStart = realDateNow()
  performance.now = () => start + offsetMs + (realNow() - start) * rate
  Date.now = () => dateStart + offsetMs + (realDateNow() - dateStart) * rate
}

if (config.skew !== undefined) skewClocks(config.skew)
// Loaded after the clocks are skewed.
const { default: tollgate, redisStore, STORE_CHANNEL } = await import('../../lib/index.js')

const print = (line: ReplicaLine): void => { process.stdout.write(JSON.stringify(line) + '\n') }
const counts: Record<string, number> = { degraded: 0, restored: 0, replicas: 0, closed: 0 }
subscribe(STORE_CHANNEL, (raw) => {
  const message = raw as StoreMessage
  counts[message.event] = (counts[message.event] ?? 0) + 1
  print({ type: 'store', event: message.event, store: message.store, liveReplicas: message.liveReplicas })
})

const clientOptions = { enableOfflineQueue: false, maxRetriesPerRequest: 0 }
const client = 'sentinels' in config.redis
  ? new Redis({ sentinels: config.redis.sentinels, name: config.redis.name, ...clientOptions })
  : new Redis({ host: config.redis.host, port: config.redis.port, ...clientOptions })
client.on('error', () => {})

const store = redisStore({ client, ...config.store })
const app = Fastify()
app.addHook('onClose', async () => { client.disconnect() })
await app.register(tollgate, { store, edge: config.edge })
app.get('/', async () => 'ok')
// `clock`: this process's performance.now(), skewed or not.
app.get('/__faults', { config: { rateLimit: false } }, async () => ({ counts, liveReplicas: store.liveReplicas, clock: performance.now() }))
await app.listen({ host: '127.0.0.1', port: 0 })
const address = app.server.address()
print({ type: 'listening', port: typeof address === 'object' && address !== null ? address.port : 0 })

process.once('SIGTERM', () => {
  app.close().then(() => process.exit(0), () => process.exit(1))
})
// The harness holds stdin open: when it dies (a timeout, a crash), so does this replica.
process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0)).resume()
