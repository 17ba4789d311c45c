import t from 'tap'
import { Redis } from 'ioredis'
import { redisStore } from '../../../lib/index.js'
import { SettlingEdge } from '../../../lib/stores/settling/index.js'
import { requireRedis, startRedis } from '../../redis-server.js'

if (requireRedis(t)) {
  t.test('settle: a settlement answered while the event loop was held past its deadline is taken, not given up on', async (t) => {
    const server = await startRedis(t)
    const client = new Redis({ port: server.port, enableOfflineQueue: false })
    t.teardown(() => { client.disconnect() })
    const store = redisStore({ client, clock: () => 0, heartbeatIntervalMs: 0 })
    t.teardown(async () => store.close())
    await store.ready()
    const warnings: string[] = []
    const log = (_object: object, message: string): void => { warnings.push(message) }
    const edge = new SettlingEdge({ store, replicas: () => 1, intervalMs: 60_000, clock: () => 0, answerDeadlineMs: 20 })
    edge.useLogger({ info: log, warn: log, error: log })
    t.teardown(async () => edge.close())
    const policy = { capacity: 10, refillPerSecond: 0 }
    t.ok(edge.consume([{ key: '{k}:edge', policy, cost: 1 }]).allowed)
    const settling = edge.settleNow()
    // The call is written in this turn of the event loop; then the loop is held past the deadline
    // (a CPU-heavy handler): Redis's answer waits in the socket when the deadline's timer fires.
    for (let i = 0; i < 10; i++) await Promise.resolve()
    const until = Date.now() + 100
    while (Date.now() < until) { /* held */ }
    await settling
    t.same(warnings, [], 'not given up on: the answer read by the poll that follows the timer')
    const decision = edge.consume([{ key: '{k}:edge', policy, cost: 9 }])
    t.same([decision.allowed, decision.degraded], [true, undefined], 'the settlement was taken: the 9 left of the first share, reserved, and the edge not away')
    t.match(await client.get('tollgate:{k}:edge'), /^0 /, 'Redis: 1 spent, 9 reserved')
  })
}
