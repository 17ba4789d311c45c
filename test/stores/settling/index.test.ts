import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { redisStore, type RedisStore, type Store } from '../../../lib/index.js'
import { shareOf } from '../../../lib/engine/share.js'
import { SettlingEdge } from '../../../lib/stores/settling/index.js'
import type { BucketDebit, BucketSettlement } from '../../../lib/types/store.js'
import { requireRedis, startRedis } from '../../redis-server.js'

/** The outside fault-injection run's edge: B = 100, R = 20/s, three replicas, one hot key. */
const B = 100
const R = 20
const N = 3
/** The settlement interval, in ms of the test's clock. */
const I = 100
const policy = { capacity: B, refillPerSecond: R }
const KEY = '{hot}:edge'

/** A settlement held back: sent to Redis (`apply`) once the test's clock reaches `dueMs`, its answer handed back then. */
interface Held { dueMs: number, release: () => void }

interface Group {
  edges: SettlingEdge[]
  clock: { now: number }
  /** The Redis store every replica settles with (one connection: a PING answered means every earlier call was). */
  redis: RedisStore
  client: Redis
  held: Held[]
  /** Each replica's settlement delay now, in ms of the test's clock (0: at once). */
  delays: number[]
  /** Applied in Redis at once and answered late (a busy event loop), rather than applied late (a slow Redis). */
  appliedAtOnce?: boolean
}

/**
 * Replicas whose settlements go through a gate: a replica's settlement is applied
 * and answered `delays[i]` ms (the test's clock) after it was sent (a busy event
 * loop, a slow Redis). Their interval timers never fire (the test settles them).
 */
async function group (t: Test, count = N, replicas: () => number = () => N): Promise<Group> {
  const server = await startRedis(t)
  const client = new Redis({ port: server.port, enableOfflineQueue: false })
  t.teardown(() => { client.disconnect() })
  const clock = { now: 1_000_000 }
  const redis = redisStore({ client, clock: () => clock.now, heartbeatIntervalMs: 0, timeoutMs: 1000 })
  t.teardown(async () => redis.close())
  await redis.ready()
  const g: Group = { edges: [], clock, redis, client, held: [], delays: [] }
  for (let i = 0; i < count; i++) g.edges.push(replica(t, g, replicas))
  return g
}

/** One more replica of `g` (a scale-up), its settlements delayed by `g.delays` at its index. */
function replica (t: Test, g: Group, replicas: () => number): SettlingEdge {
  const index = g.edges.length
  g.delays[index] = 0
  const gated: Store & Required<Pick<Store, 'settle'>> = {
    consume: g.redis.consume.bind(g.redis),
    close: () => {},
    settle: async (debits: readonly BucketDebit[]): Promise<readonly BucketSettlement[]> => {
      const delay = g.delays[index] ?? 0
      const dueMs = g.clock.now + delay
      const applied = g.appliedAtOnce === true ? g.redis.settle(debits) : undefined
      if (delay > 0) await new Promise<void>((resolve) => { g.held.push({ dueMs, release: resolve }) })
      return applied ?? g.redis.settle(debits)
    }
  }
  // No interval timer (it would settle at real times): the test calls settleNow.
  const setIntervalReal = globalThis.setInterval
  globalThis.setInterval = ((): { unref: () => void } => ({ unref: () => {} })) as unknown as typeof setInterval
  try {
    const edge = new SettlingEdge({ store: gated, replicas, intervalMs: I, clock: () => g.clock.now, answerDeadlineMs: 60_000 })
    t.teardown(async () => {
      for (const h of g.held.splice(0)) h.release()
      await edge.close()
    })
    return edge
  } finally {
    globalThis.setInterval = setIntervalReal
  }
}

/** Lets what is due be sent and answered: held settlements whose time came, then every answer Redis owes. */
async function flush (g: Group): Promise<void> {
  const due = g.held.filter((h) => h.dueMs <= g.clock.now)
  for (const h of due) g.held.splice(g.held.indexOf(h), 1)
  for (const h of due) h.release()
  for (let i = 0; i < 3; i++) {
    await new Promise((resolve) => setImmediate(resolve))
    await g.client.ping()
  }
  await new Promise((resolve) => setImmediate(resolve))
}

/** Every replica takes what it is given at once (until refused), on `key`; returns how many. */
function push (edges: readonly SettlingEdge[], key = KEY): number {
  let admitted = 0
  for (const edge of edges) {
    for (let i = 0; i < 10 * B; i++) {
      if (!edge.consume([{ key, policy, cost: 1 }]).allowed) break
      admitted++
    }
  }
  return admitted
}

/**
 * `ms` of the test's clock in steps of 10 ms: `load` at each step, then each
 * replica settles every `I` ms (at its own offset), without waiting for the answer.
 */
async function run (g: Group, ms: number, load: (step: number) => number): Promise<number[]> {
  const admitted: number[] = []
  for (let step = 0; step < ms / 10; step++) {
    g.clock.now += 10
    admitted.push(load(step))
    g.edges.forEach((edge, j) => {
      if (step % (I / 10) === (j * 3) % (I / 10)) void edge.settleNow()
    })
    await flush(g)
  }
  return admitted
}

/**
 * The most admitted over any window of `steps` (10 ms each) beyond the stated
 * bound, B + R·t plus max(1, B/N) for each replica that started on the key in the
 * window (`started(first)`: those that started at or after step `first`).
 */
function worstWindow (steps: readonly number[], started: (first: number) => number, replicas = N): { excess: number, from: number, to: number, admitted: number } {
  let worst = { excess: -Infinity, from: 0, to: 0, admitted: 0 }
  for (let from = 0; from < steps.length; from++) {
    let admitted = 0
    for (let to = from; to < steps.length; to++) {
      admitted += steps[to] as number
      const excess = admitted - (B + R * (to - from) / 100 + started(from) * shareOf(B, 1, replicas))
      if (excess > worst.excess) worst = { excess, from, to, admitted }
    }
  }
  return worst
}


if (requireRedis(t)) {
  t.test('settle: settlements answered late (a busy event loop, a slow Redis): within the stated bound over any window', async (t) => {
    // Each replica's settlements answered that many ms (the test's clock) after they were sent: past the
    // interval, the next one is due before the answer. Every replica takes all it is given every 10 ms.
    for (const [delays, appliedAtOnce] of [[500, 500, 0], [900, 150, 300], [150, 150, 150], [1500, 0, 0]].flatMap((delays) => [[delays, false], [delays, true]] as const)) {
      const g = await group(t)
      g.appliedAtOnce = appliedAtOnce
      delays.forEach((delay, i) => { g.delays[i] = delay })
      const steps = await run(g, 3000, () => push(g.edges))
      // The three replicas start on the key at the first step.
      const worst = worstWindow(steps, (from) => from === 0 ? N : 0)
      t.ok(worst.excess <= 0, `delays ${delays.join(', ')} ms, ${appliedAtOnce ? 'answered' : 'applied'} late: ${worst.admitted} admitted from ${worst.from * 10} to ${worst.to * 10} ms, ${worst.excess.toFixed(1)} from B + R·t + max(1, B/N) per replica started (${steps.reduce((a, b) => a + b)} in 3 s)`)
    }
  })

  t.test('settle: a settlement given up on grants no fresh share; away, a replica spends what it holds, then R/N a second', async (t) => {
    const g = await group(t, 0)
    // Its settlements never answered: each given up on after its deadline (real time).
    const given = new SettlingEdge({ store: { consume: g.redis.consume.bind(g.redis), close: () => {}, settle: async () => new Promise(() => {}) }, replicas: () => N, intervalMs: I, clock: () => g.clock.now, answerDeadlineMs: 20 })
    t.teardown(async () => given.close())
    t.equal(push([given]), 33, 'its first share: max(1, B/N)')
    await given.settleNow()
    t.equal(push([given]), 0, 'given up on: no fresh share, nothing reserved')
    g.clock.now += 1500
    t.equal(push([given]), 10, 'away 1.5 s: R/N a second')
    g.clock.now += 60_000
    t.equal(push([given]), 33, 'at most max(1, B/N) at once, however long away')
  })

  t.test('settle: scale-up, three replicas on a drained key joined by three more: each new one adds at most its first share', async (t) => {
    let replicas = N
    const g = await group(t, N, () => replicas)
    g.delays.fill(150)
    const added = 100
    const steps = await run(g, 3000, (step) => {
      if (step === added) {
        replicas = 2 * N
        for (let i = 0; i < N; i++) {
          g.edges.push(replica(t, g, () => replicas))
          g.delays[g.edges.length - 1] = 150
        }
      }
      return push(g.edges)
    })
    const started = (from: number): number => from === 0 ? N * shareOf(B, 1, N) : 0
    const worst = worstWindow(steps, (from) => (started(from) + (from <= added ? N * shareOf(B, 1, 2 * N) : 0)) / shareOf(B, 1, N))
    t.ok(worst.excess <= 0, `${worst.admitted} admitted from ${worst.from * 10} to ${worst.to * 10} ms, ${worst.excess.toFixed(1)} from B + R·t + the first shares of the replicas started (${steps.reduce((a, b) => a + b)} in 3 s)`)
  })
}
