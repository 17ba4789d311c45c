import t, { type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import tollgate, { redisStore, type RedisStore } from '../../../lib/index.js'
import { BoundedWait } from '../../../lib/stores/redis/bounded-wait.js'
import { requireRedis, startRedis, type RedisServer } from '../../redis-server.js'

const policy = { capacity: 10, refillPerSecond: 1 }

/** Holds the event loop for `ms`, as a GC pause or a CPU-heavy handler does. */
function busyFor (ms: number): void {
  const end = performance.now() + ms
  while (performance.now() < end) { /* busy */ }
}

/** A store with default options (but no heartbeat) whose failed calls land in `errors`. */
function storeOn (t: Test, server: RedisServer): { store: RedisStore, errors: string[] } {
  const store = redisStore({ client: server.client(t), heartbeatIntervalMs: 0 })
  const errors: string[] = []
  store.useLogger({ info () {}, warn () {}, error (_object, message) { errors.push(message) } })
  t.teardown(() => store.close())
  return { store, errors }
}

if (requireRedis(t)) {
  t.test('a pause longer than timeoutMs while a reply is in flight: the decision is still Redis\'s, not a failover', async (t) => {
    const server = await startRedis(t)
    const { store, errors } = storeOn(t, server)
    await store.consume([{ key: '{warm}:k', policy, cost: 1 }]) // loads the script
    for (const pauseMs of [60, 200]) {
      const decision = store.consume([{ key: '{busy}:k', policy, cost: 1 }])
      // The batch goes in this check phase (setImmediate); the pause comes right after it,
      // while Redis answers within a millisecond. Then Node runs the expired timer before
      // it polls for I/O: the timeout must not fail a reply that waits in the socket.
      await new Promise<void>((resolve) => { setImmediate(() => { busyFor(pauseMs); resolve() }) })
      t.match(await decision, { allowed: true }, `${pauseMs} ms pause (timeoutMs 50)`)
      t.equal((await decision).degraded, undefined, `${pauseMs} ms pause: decided by Redis`)
    }
    t.same(errors, [], 'no call counted as failed')
    t.equal(store.state, 'closed')
  })

  t.test('one burst of 3 000 decisions (six script calls), a 200 ms pause, CPU per answer: every call is Redis\'s, one quota holds', async (t) => {
    const server = await startRedis(t)
    const { store, errors } = storeOn(t, server)
    const burst = { capacity: 30, refillPerSecond: 2 }
    await store.consume([{ key: '{warm}:k', policy: burst, cost: 1 }])
    for (let run = 1; run <= 3; run++) {
      const started = performance.now()
      // 0.15 ms of CPU per answer (a handler's work): reading one call's reply holds the loop for 75 ms.
      const decisions = Array.from({ length: 3000 }, async () => {
        const decision = await store.consume([{ key: `{burst:${run}}:k`, policy: burst, cost: 1 }])
        busyFor(0.15)
        return decision
      })
      // The six calls go in this check phase; Redis answers them within ms, but Node reads
      // their replies only after the pause, a socket buffer at a time: the later calls'
      // timers have long fired by then.
      await new Promise<void>((resolve) => { setImmediate(() => { setImmediate(() => { busyFor(200); resolve() }) }) })
      const all = await Promise.all(decisions)
      const elapsedS = (performance.now() - started) / 1000
      const admitted = all.filter((decision) => decision.allowed).length
      const local = all.filter((decision) => decision.degraded !== undefined).length
      t.ok(admitted <= 30 + Math.ceil(2 * elapsedS), `run ${run}: admitted ${admitted} of 3000 in ${elapsedS.toFixed(2)} s (B = 30, R = 2/s)`)
      t.equal(local, 0, `run ${run}: no decision by failMode`)
    }
    t.same(errors, [], 'no call counted as failed')
  })

  t.test('a frozen Redis (SIGSTOP): the store still fails over after about timeoutMs', async (t) => {
    const server = await startRedis(t)
    const { store, errors } = storeOn(t, server)
    await store.consume([{ key: '{warm}:k', policy, cost: 1 }])
    server.pause()
    t.teardown(() => { server.resume() })
    const started = performance.now()
    const decision = await store.consume([{ key: '{frozen}:k', policy, cost: 1 }])
    const waitedMs = performance.now() - started
    t.match(decision, { allowed: true, degraded: 'local' })
    t.ok(waitedMs >= 50 && waitedMs < 200, `answered by failMode after ${waitedMs.toFixed(1)} ms (timeoutMs 50)`)
    t.same(errors, ['fastify-tollgate: Redis call failed; deciding by failMode'])
    server.resume()
    const deadline = performance.now() + 5000
    let after = await store.consume([{ key: '{thawed}:k', policy, cost: 1 }])
    while (after.degraded !== undefined && performance.now() < deadline) after = await store.consume([{ key: '{thawed}:k', policy, cost: 1 }])
    t.equal(after.degraded, undefined, 'Redis decides again once thawed')
  })

  t.test('three replicas on one Redis with default options, CPU-heavy handlers, 300 requests at once: one quota (B + R·t)', async (t) => {
    const server = await startRedis(t)
    const apps: FastifyInstance[] = []
    for (let i = 0; i < 3; i++) {
      const app = Fastify()
      await app.register(tollgate, { store: redisStore({ client: server.client(t) }), edge: { capacity: 30, refillPerSecond: 2 } })
      // 2 ms of CPU per admitted request: the event loop is held for tens of ms at a time.
      app.get('/', async () => { busyFor(2); return 'ok' })
      await app.ready()
      apps.push(app)
    }
    t.teardown(async () => { for (const app of apps) await app.close() })
    for (let run = 1; run <= 3; run++) {
      const remoteAddress = `198.51.100.${run}` // a fresh edge bucket per run
      const started = performance.now()
      const responses = await Promise.all(Array.from({ length: 300 }, async (_, i) => (apps[i % 3] as FastifyInstance).inject({ url: '/', remoteAddress })))
      const elapsedS = (performance.now() - started) / 1000
      const admitted = responses.filter((response) => response.statusCode === 200).length
      const shared = responses.filter((response) => response.headers['ratelimit-policy'] === '"edge";q=30;w=15').length
      t.ok(admitted >= 30 && admitted <= 30 + Math.ceil(2 * elapsedS), `run ${run}: admitted ${admitted} of 300 in ${elapsedS.toFixed(2)} s (B = 30, R = 2/s)`)
      t.equal(shared, 300, `run ${run}: every answer on the shared policy (none from a local share)`)
    }
  })
}

t.test('the bounded wait counts answers per connection: a call waits while its node answers others, not while another node does', async (t) => {
  const wait = new BoundedWait(20)
  const never = new Promise<never>(() => {})
  const outcome = async (call: Promise<unknown>): Promise<string> => call.then(() => 'answered', (error: Error) => error.message)
  // Node `a` answers a call every 5 ms for 200 ms (ten times timeoutMs); node `b` never answers.
  let streaming = true
  const stream = (async () => {
    const end = performance.now() + 200
    while (performance.now() < end) await wait.wait(new Promise((resolve) => { setTimeout(resolve, 5) }), 'a')
    streaming = false
  })()
  const onB = outcome(wait.wait(never, 'b')).then((message) => ({ message, streaming }))
  const onA = outcome(wait.wait(never, 'a')).then((message) => ({ message, streaming }))
  await stream
  t.same(await onB, { message: 'fastify-tollgate: Redis did not answer within 20 ms', streaming: true }, 'b fails while a answers')
  t.same(await onA, { message: 'fastify-tollgate: Redis did not answer within 20 ms', streaming: false }, 'a call on a fails once a stops answering')
})
